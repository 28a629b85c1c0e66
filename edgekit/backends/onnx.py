"""ONNX, run by ONNX Runtime; quantized in place (QDQ int8, fp16)."""

from edgekit.backends import Backend

BACKEND = Backend(
    format="onnx",
    suffixes={".onnx": "onnx"},
    runners={"onnxruntime": "edgekit.targets.onnxruntime:OnnxRuntimeRunner"},
    default_targets=("onnxruntime:cpu",),
    converters={
        "torch": "edgekit.converters.torch_onnx:TorchToOnnx",
        "keras": "edgekit.converters.keras_onnx:KerasToOnnx",
        "onnx": "edgekit.converters.onnx_quantize:OnnxQuantizer",
    },
    loader="edgekit.loaders.onnx:for_conversion",
    describer="edgekit.loaders.onnx:onnx_artifact",
    summary="edgekit.loaders.onnx:onnx_summary",
)
