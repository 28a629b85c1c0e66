"""`executorch:cpu`: a .pte in ExecuTorch's Python runtime (the C++ runtime an app links, through pybind),
its XNNPACK delegate on a thread pool of the run's thread count. Shapes are static, as planned at export."""

from __future__ import annotations

import numpy as np

from edgekit.backends.executorch.coverage import pte_coverage
from edgekit.errors import ModelLoadError
from edgekit.native import stderr_silenced
from edgekit.targets.base import DeviceInfo, Runner


class ExecuTorchRunner(Runner):
    runtime = "executorch"
    package = "executorch"
    import_name = "executorch"
    families = ("executorch",)

    @classmethod
    def devices(cls) -> list[DeviceInfo]:

        with stderr_silenced():
            from executorch.runtime import Runtime

            xnnpack = Runtime.get().backend_registry.is_available("XnnpackBackend")
        detail = "ExecuTorch runtime, XNNPACK delegate" if xnnpack else "ExecuTorch runtime without XNNPACK: portable CPU kernels only"
        return [DeviceInfo("executorch:cpu", True, detail)]

    @classmethod
    def listed_devices(cls) -> list[DeviceInfo]:
        """Told without importing ExecuTorch: its pip wheel's runtime carries the XNNPACK delegate (`--probe` asks it)."""
        return [DeviceInfo("executorch:cpu", True, "ExecuTorch runtime, XNNPACK delegate (the pip wheel's)")]

    def _load_impl(self) -> None:
        from edgekit.backends.executorch.describe import load_program, tensor_specs

        with stderr_silenced():  # "Resetting threadpool to N threads."
            from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool

            _unsafe_reset_threadpool(self.threads)
        program, meta = load_program(self.source.path)
        try:
            self.method = program.load_method("forward")
        except RuntimeError as exc:  # e.g. a delegate this runtime was built without
            raise ModelLoadError(
                f"ExecuTorch cannot load {self.source.path.name}: {str(exc).splitlines()[0][:200]}",
                hint="`edgekit info` lists the delegates it calls; `edgekit targets` says whether this runtime has XNNPACK",
            ) from None
        self.inputs = tensor_specs(meta, meta.num_inputs(), "input_tensor_meta", "input")
        self.output_names = [s.name for s in tensor_specs(meta, meta.num_outputs(), "output_tensor_meta", "output")]

    def _prepare_impl(self, feeds: dict[str, np.ndarray]) -> list:
        import torch

        return [torch.from_numpy(np.ascontiguousarray(feeds[spec.name])) for spec in self.inputs]

    def _infer_impl(self, prepared: list) -> list[np.ndarray]:
        return [out.numpy().copy() for out in self.method.execute(prepared)]

    def int8_coverage(self) -> dict:
        """What the program runs in int8: its XNNPACK partitions' node datatypes and its kernel calls."""

        return pte_coverage(self.source.path)

    def config(self) -> dict:
        return {"delegate": "XNNPACK", "threadpool": self.threads}
