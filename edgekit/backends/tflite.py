"""TFLite / LiteRT flatbuffers, run by the LiteRT interpreter with XNNPACK; Vela compiles int8 ones for Ethos-U."""

from edgekit.backends import Backend

BACKEND = Backend(
    format="tflite",
    suffixes={".tflite": "tflite"},
    runners={"litert": "edgekit.targets.litert:LiteRtRunner"},
    default_targets=("litert:cpu",),
    converters={
        "keras": "edgekit.converters.keras_tflite:KerasToTflite",
        "torch": "edgekit.converters.torch_tflite:TorchToTflite",
        "tflite": "edgekit.converters.passthrough:Passthrough",
    },
    loader="edgekit.converters.pipeline:file_for_conversion",
    describer="edgekit.loaders.tflite:tflite_artifact",
    summary="edgekit.loaders.tflite:tflite_summary",
)
