"""TensorFlow target: Keras models and SavedModels, run through one compiled tf.function."""

from __future__ import annotations

import numpy as np

from edgekit.machine import nvidia_gpus, package_versions
from edgekit.targets.base import DeviceInfo, Runner, default_threads


class TensorFlowRunner(Runner):
    """The Keras reference. A tf.function, never eager per-sample calls (~8 ms of Python overhead each)."""

    runtime = "tensorflow"
    package = "tensorflow-cpu"
    import_name = "tensorflow"
    families = ("keras",)

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        from edgekit.backends.keras.loader import quiet_tensorflow

        gpus = quiet_tensorflow().config.list_physical_devices("GPU")
        return [
            DeviceInfo("tensorflow:cpu", True),
            DeviceInfo("tensorflow:gpu", bool(gpus), f"{len(gpus)} GPU(s)" if gpus else "no GPU visible to TensorFlow"),
        ]

    @classmethod
    def listed_devices(cls) -> list[DeviceInfo]:

        gpus = nvidia_gpus()
        cpu_only = "tensorflow" not in package_versions("tensorflow")  # tensorflow-cpu is a separate distribution
        detail = "tensorflow-cpu has no GPU support" if cpu_only else f"{len(gpus)} GPU(s)" if gpus else "no GPU visible to TensorFlow"
        return [DeviceInfo("tensorflow:cpu", True), DeviceInfo("tensorflow:gpu", bool(gpus) and not cpu_only, detail)]

    def _load_impl(self) -> None:
        from edgekit.backends.keras.loader import KerasModel, quiet_tensorflow

        tf = quiet_tensorflow()
        try:
            tf.config.threading.set_intra_op_parallelism_threads(self.threads)
            tf.config.threading.set_inter_op_parallelism_threads(1)
        except RuntimeError:  # TensorFlow fixes its pools at first use (e.g. a conversion earlier in this process)
            self.threads = tf.config.threading.get_intra_op_parallelism_threads() or default_threads()
        self.model = KerasModel(self.source)
        self.inputs = self.model.specs
        self.output_names = self.model.output_names
        self.function = self.model.tf_function()

    def _infer_impl(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.model.predict(feeds, self.function)
