"""TensorRT engines, built on the GPU from the ONNX edgekit writes first (QDQ for int8)."""

from edgekit.backends import Backend

BACKEND = Backend(
    format="tensorrt",
    suffixes={".engine": "tensorrt", ".plan": "tensorrt"},
    runners={"tensorrt": "edgekit.targets.tensorrt:TensorRtRunner"},
    default_targets=("tensorrt:cuda",),
    converters={"onnx": "edgekit.converters.onnx_tensorrt:OnnxToTensorrt"},
    describer="edgekit.loaders.tensorrt:tensorrt_artifact",
    summary="edgekit.loaders.tensorrt:tensorrt_summary",
    via="onnx",
)
