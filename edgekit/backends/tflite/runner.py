"""LiteRT (TFLite) target: ai-edge-litert's interpreter with XNNPACK and a thread count.

Falls back to tflite_runtime or tf.lite where only those exist (older boards). Integer inputs and
outputs are quantized/dequantized with each tensor's scale and zero-point, so validation feeds and
compares float data whatever the model's I/O type.
"""

from __future__ import annotations

import importlib.util

import numpy as np

from edgekit.backends.tflite.interpreter import INTERPRETERS, dequantize, interpreter_class, quantize, tensor_name, tensor_spec
from edgekit.errors import ModelLoadError
from edgekit.native import stderr_silenced
from edgekit.targets.base import DeviceInfo, Runner


class LiteRtRunner(Runner):
    """Runs .tflite files; resizes the batch dim when the model allows it."""

    runtime = "litert"
    package = "ai-edge-litert"
    import_name = "ai_edge_litert"
    families = ("tflite",)

    @classmethod
    def installed(cls) -> bool:
        return any(importlib.util.find_spec(m.split(".")[0]) is not None for m, _ in INTERPRETERS)

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        _, package = interpreter_class()
        return [DeviceInfo("litert:cpu", True, f"{package} interpreter, XNNPACK delegate")]

    @classmethod
    def listed_devices(cls) -> list[DeviceInfo]:
        package = next(p for m, p in INTERPRETERS if importlib.util.find_spec(m.split(".")[0]) is not None)
        return [DeviceInfo("litert:cpu", True, f"{package} interpreter, XNNPACK delegate")]

    def _load_impl(self) -> None:
        interpreter, self.interpreter_package = interpreter_class()
        try:
            with stderr_silenced():  # "Created TensorFlow Lite XNNPACK delegate for CPU."
                self.interpreter = interpreter(model_path=str(self.source.path), num_threads=self.threads)
                self.interpreter.allocate_tensors()
        except (ValueError, RuntimeError) as exc:
            raise ModelLoadError(
                f"LiteRT cannot load {self.source.spec}: {str(exc).splitlines()[0][:200]}", hint="check it with `edgekit info`"
            ) from None
        self._in = self.interpreter.get_input_details()
        self._out = self.interpreter.get_output_details()
        self.inputs = [tensor_spec(d) for d in self._in]
        self.output_names = [tensor_name(d["name"]) for d in self._out]
        self._shapes = {d["index"]: tuple(d["shape"]) for d in self._in}

    def int8_coverage(self) -> dict:
        """What the interpreter runs in int8, after the XNNPACK delegate took its partitions."""
        from edgekit.backends.tflite.coverage import litert_coverage

        return litert_coverage(self.source.path, self.interpreter)

    def config(self) -> dict:
        return {"interpreter": getattr(self, "interpreter_package", self.package), "delegate": "XNNPACK (default)"}

    def _prepare_impl(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Float feeds quantized with each input's scale and zero-point (unchanged for float inputs)."""
        return {spec.name: quantize(feeds[spec.name], detail) for detail, spec in zip(self._in, self.inputs, strict=True)}

    def _infer_impl(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        self._resize_for(feeds)
        for detail, spec in zip(self._in, self.inputs, strict=True):
            self.interpreter.set_tensor(detail["index"], feeds[spec.name])
        self.interpreter.invoke()
        return [dequantize(self.interpreter.get_tensor(d["index"]), d) for d in self._out]

    def _resize_for(self, feeds: dict[str, np.ndarray]) -> None:
        changed = False
        for detail, spec in zip(self._in, self.inputs, strict=True):
            shape = tuple(feeds[spec.name].shape)
            if self._shapes[detail["index"]] != shape:
                self.interpreter.resize_tensor_input(detail["index"], list(shape), strict=True)
                self._shapes[detail["index"]] = shape
                changed = True
        if changed:
            self.interpreter.allocate_tensors()
