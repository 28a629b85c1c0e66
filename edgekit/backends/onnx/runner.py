"""ONNX Runtime target: CPU, and CUDA/TensorRT/OpenVINO providers where installed."""

from __future__ import annotations

import numpy as np

from edgekit.artifact import TensorSpec
from edgekit.backends.onnx.coverage import ort_coverage
from edgekit.errors import ModelLoadError, RuntimeMissingError
from edgekit.targets.base import DeviceInfo, Runner, package_files

PROVIDERS = {
    "cpu": ("CPUExecutionProvider", "onnxruntime"),
    "cuda": ("CUDAExecutionProvider", "onnxruntime-gpu"),
    "tensorrt": ("TensorrtExecutionProvider", "onnxruntime-gpu"),
    "openvino": ("OpenVINOExecutionProvider", "onnxruntime-openvino"),
}


def _short(provider: str) -> str:
    """'CUDAExecutionProvider' -> 'cuda', as in the library's name libonnxruntime_providers_cuda.so."""
    return provider.removesuffix("ExecutionProvider").lower()


class OnnxRuntimeRunner(Runner):
    """Runs .onnx files in an InferenceSession with an explicit thread count."""

    runtime = "onnxruntime"
    package = "onnxruntime"
    import_name = "onnxruntime"
    families = ("onnx",)
    # optimization=disable runs a Q/DQ model as written (Dequantize -> float op -> Quantize): the exact
    # numerics of int32-accumulating hardware (TensorRT, NPUs), free of x86 kernels' int16 saturation.
    options = {"optimization": ("all", "basic", "disable")}

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        import onnxruntime as ort

        found = set(ort.get_available_providers())
        return [
            DeviceInfo(f"onnxruntime:{dev}", provider in found, "" if provider in found else f"pip install {package}")
            for dev, (provider, package) in PROVIDERS.items()
        ]

    @classmethod
    def listed_devices(cls) -> list[DeviceInfo]:
        """A provider is there when its library ships in the wheel (onnxruntime-gpu, onnxruntime-openvino)."""
        shipped = {"CPUExecutionProvider"} | {
            provider
            for provider, _ in PROVIDERS.values()
            if package_files(cls.import_name, f"capi/*onnxruntime_providers_{_short(provider)}*")
        }
        return [
            DeviceInfo(f"onnxruntime:{dev}", provider in shipped, "" if provider in shipped else f"pip install {package}")
            for dev, (provider, package) in PROVIDERS.items()
        ]

    def _load_impl(self) -> None:
        import onnxruntime as ort

        provider = self._provider()
        try:
            self.session = ort.InferenceSession(str(self.source.spec), self._options(), providers=[provider])
        except Exception as exc:  # ORT raises its own exception types per failure
            from edgekit.backends.onnx.loader import check_external_data, read_onnx

            check_external_data(read_onnx(self.source.spec, load_weights=False), self.source.spec)  # the likelier cause, named
            raise ModelLoadError(
                f"ONNX Runtime cannot load {self.source.spec}: {str(exc).splitlines()[0][:300]}",
                hint="check the file with `edgekit info`; an op the runtime lacks needs another opset or target",
                cause=str(exc),
            ) from None
        self.inputs = _session_specs(self.session.get_inputs())
        self.output_names = [o.name for o in self.session.get_outputs()]

    def int8_coverage(self) -> dict:
        """What ONNX Runtime runs in int8: its optimized graph for this session's options and provider."""

        return ort_coverage(self.source.spec, self._options(), [self._provider()])

    def _options(self):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = {
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        }[self.settings["optimization"]]
        options.log_severity_level = 3
        return options

    def _provider(self) -> str:
        import onnxruntime as ort

        if self.device not in PROVIDERS:
            raise RuntimeMissingError(
                f"onnxruntime has no device '{self.device}'", hint=f"use one of: {', '.join('onnxruntime:' + d for d in PROVIDERS)}"
            )
        provider, package = PROVIDERS[self.device]
        if provider not in ort.get_available_providers():
            raise RuntimeMissingError(
                f"ONNX Runtime's {provider} is not available here", hint=f"pip install {package}, or use --target onnxruntime:cpu"
            )
        return provider

    def _infer_impl(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.session.run(self.output_names, feeds)


def _session_specs(args) -> list[TensorSpec]:
    dtypes = {
        "tensor(float)": "float32",
        "tensor(float16)": "float16",
        "tensor(double)": "float64",
        "tensor(int64)": "int64",
        "tensor(int32)": "int32",
        "tensor(uint8)": "uint8",
        "tensor(int8)": "int8",
        "tensor(bool)": "bool",
    }
    return [TensorSpec(a.name, tuple(d if isinstance(d, int) else (d or None) for d in a.shape), dtypes.get(a.type, a.type)) for a in args]
