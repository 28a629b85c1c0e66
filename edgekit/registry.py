"""The backend registry: one `Backend(...)` line per model format, made of strings only.

A declaration names the code of its backend as "module:attr" (each backend's code is one folder,
edgekit/backends/<format>/), so reading the registry imports no framework. The tables the rest of edgekit
reads (default targets, suffixes, formats, converters, runners, describers, summaries) are derived here.
Adding a format is adding its folder and one entry in `REGISTRY` (docs/backends.md); tests/contract/test_backends.py
runs the same checks on every registered backend and fails for one it has no contract entry for.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Backend:
    """A model format and what edgekit does with it; code is named as "module:attr" and imported when used."""

    format: str  # the family name: what `--to` takes and what runners declare they run
    suffixes: dict[str, str]  # file suffix -> format name as `edgekit info` shows it; the first is what convert writes
    runners: dict[str, str]  # runtime name -> "module:Runner"
    default_targets: tuple[str, ...]  # runtime:device, the first is the default of `validate`/`bench`
    converters: dict[str, str] = field(default_factory=dict)  # source family -> "module:Converter" writing this format
    loader: str | None = None  # "module:function" (source) -> (model, input specs): what its converters take
    describer: str | None = None  # "module:function" (path, precision) -> Artifact; None for source formats
    summary: str | None = None  # "module:function" (path) -> dict of graph facts for `edgekit info`
    via: str | None = None  # a format built from another edgekit writes first (TensorRT from its ONNX)
    source_only: bool = False  # a framework's own model (torch, keras): read, never written by `convert`

    @property
    def suffix(self) -> str:
        """The suffix `convert` writes."""
        return next(iter(self.suffixes), f".{self.format}")


# One entry per backend. Order is the order of `--to` choices and `edgekit targets`.
REGISTRY = (
    # ONNX, run by ONNX Runtime; quantized in place (QDQ int8, fp16).
    Backend(
        format="onnx",
        suffixes={".onnx": "onnx"},
        runners={"onnxruntime": "edgekit.backends.onnx.runner:OnnxRuntimeRunner"},
        default_targets=("onnxruntime:cpu",),
        converters={
            "torch": "edgekit.backends.onnx.from_torch:TorchToOnnx",
            "keras": "edgekit.backends.onnx.from_keras:KerasToOnnx",
            "onnx": "edgekit.backends.onnx.quantize:OnnxQuantizer",
        },
        loader="edgekit.backends.onnx.loader:for_conversion",
        describer="edgekit.backends.onnx.loader:onnx_artifact",
        summary="edgekit.backends.onnx.loader:onnx_summary",
    ),
    # PyTorch: the models edgekit starts from (exported programs, TorchScript, module:factory), run eagerly or compiled.
    Backend(
        format="torch",
        suffixes={".pt2": "torch-export"},  # TorchScript's .pt/.ts are told apart from state dicts by their content
        runners={"torch": "edgekit.backends.torch.runner:TorchRunner"},
        default_targets=("torch:cpu",),
        loader="edgekit.backends.torch.loader:for_conversion",
        source_only=True,
    ),
    # OpenVINO IR (.xml + .bin), run by OpenVINO on CPU, GPU or NPU; int8 through NNCF or ONNX Runtime's QDQ.
    Backend(
        format="openvino",
        suffixes={".xml": "openvino"},
        runners={"openvino": "edgekit.backends.openvino.runner:OpenVinoRunner"},
        default_targets=("openvino:cpu",),
        converters={
            "torch": "edgekit.backends.openvino.convert:ToOpenVino",
            "onnx": "edgekit.backends.openvino.convert:ToOpenVino",
            "keras": "edgekit.backends.openvino.convert:ToOpenVino",
            "openvino": "edgekit.backends.passthrough:Passthrough",
        },
        loader="edgekit.conversion:file_for_conversion",
        describer="edgekit.backends.openvino.loader:openvino_artifact",
        summary="edgekit.backends.openvino.loader:openvino_summary",
    ),
    # Keras 3 / TensorFlow: .keras, .h5 and SavedModel folders, run by TensorFlow.
    Backend(
        format="keras",
        suffixes={".keras": "keras", ".h5": "keras-h5", ".hdf5": "keras-h5"},
        runners={"tensorflow": "edgekit.backends.keras.runner:TensorFlowRunner"},
        default_targets=("tensorflow:cpu",),
        loader="edgekit.backends.keras.loader:for_conversion",
        source_only=True,
    ),
    # TFLite / LiteRT flatbuffers, run by the LiteRT interpreter with XNNPACK; Vela compiles int8 ones for Ethos-U.
    Backend(
        format="tflite",
        suffixes={".tflite": "tflite"},
        runners={"litert": "edgekit.backends.tflite.runner:LiteRtRunner"},
        default_targets=("litert:cpu",),
        converters={
            "keras": "edgekit.backends.tflite.from_keras:KerasToTflite",
            "torch": "edgekit.backends.tflite.from_torch:TorchToTflite",
            "tflite": "edgekit.backends.passthrough:Passthrough",
        },
        loader="edgekit.conversion:file_for_conversion",
        describer="edgekit.backends.tflite.loader:tflite_artifact",
        summary="edgekit.backends.tflite.loader:tflite_summary",
    ),
    # TensorRT engines, built on the GPU from the ONNX edgekit writes first (QDQ for int8).
    Backend(
        format="tensorrt",
        suffixes={".engine": "tensorrt", ".plan": "tensorrt"},
        runners={"tensorrt": "edgekit.backends.tensorrt.runner:TensorRtRunner"},
        default_targets=("tensorrt:cuda",),
        converters={"onnx": "edgekit.backends.tensorrt.from_onnx:OnnxToTensorrt"},
        describer="edgekit.backends.tensorrt.loader:tensorrt_artifact",
        summary="edgekit.backends.tensorrt.loader:tensorrt_summary",
        via="onnx",
    ),
    # ExecuTorch: PyTorch's edge runtime; .pte programs lowered to the XNNPACK delegate (fp32, PT2E int8).
    Backend(
        format="executorch",
        suffixes={".pte": "executorch"},
        runners={"executorch": "edgekit.backends.executorch.run:ExecuTorchRunner"},
        default_targets=("executorch:cpu",),
        converters={"torch": "edgekit.backends.executorch.convert:TorchToExecutorch"},
        describer="edgekit.backends.executorch.describe:executorch_artifact",
        summary="edgekit.backends.executorch.describe:executorch_summary",
    ),
)


def backends() -> dict[str, Backend]:
    """Every registered backend by format."""
    return {backend.format: backend for backend in REGISTRY}


def backend(fmt: str) -> Backend | None:
    return backends().get(fmt)


def written_formats() -> tuple[str, ...]:
    """Formats `edgekit convert --to` writes."""
    return tuple(b.format for b in backends().values() if not b.source_only)


def runners() -> dict[str, str]:
    return {runtime: ref for b in backends().values() for runtime, ref in b.runners.items()}


def default_targets() -> dict[str, list[str]]:
    return {b.format: list(b.default_targets) for b in backends().values()}


def converters() -> dict[tuple[str, str], str]:
    """(source family, format) -> "module:Converter"."""
    return {(source, b.format): ref for b in backends().values() for source, ref in b.converters.items()}


def suffix_formats() -> dict[str, str]:
    """File suffix -> format, for recognising a model file."""
    return {suffix: name for b in backends().values() for suffix, name in b.suffixes.items()}


def describers() -> dict[str, str]:
    return {b.format: b.describer for b in backends().values() if b.describer}


def summaries() -> dict[str, str]:
    return {b.format: b.summary for b in backends().values() if b.summary}
