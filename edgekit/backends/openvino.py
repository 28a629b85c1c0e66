"""OpenVINO IR (.xml + .bin), run by OpenVINO on CPU, GPU or NPU; int8 through NNCF or ONNX Runtime's QDQ."""

from edgekit.backends import Backend

BACKEND = Backend(
    format="openvino",
    suffixes={".xml": "openvino"},
    runners={"openvino": "edgekit.targets.openvino:OpenVinoRunner"},
    default_targets=("openvino:cpu",),
    converters={
        "torch": "edgekit.converters.any_openvino:ToOpenVino",
        "onnx": "edgekit.converters.any_openvino:ToOpenVino",
        "keras": "edgekit.converters.any_openvino:ToOpenVino",
        "openvino": "edgekit.converters.passthrough:Passthrough",
    },
    loader="edgekit.converters.pipeline:file_for_conversion",
    describer="edgekit.loaders.openvino:openvino_artifact",
    summary="edgekit.loaders.openvino:openvino_summary",
)
