"""Keras / SavedModel -> ONNX with tf2onnx, through a tf.function (tf2onnx's from_keras fails with Keras 3)."""

from __future__ import annotations

from pathlib import Path

from edgekit.backends.keras.batchnorm import with_batchnorm_folded
from edgekit.conversion import ConversionData, Converter, ConvertOptions
from edgekit.errors import ConversionError

OPSET = 17


class KerasToOnnx(Converter):
    """One .onnx with a dynamic batch axis; inputs keep the Keras names and layout (NHWC stays NHWC)."""

    sources = ("keras",)
    target_format = "onnx"
    precisions = {"fp32": False}
    package = "tf2onnx"
    import_name = "tf2onnx"

    def convert(self, model, specs, out: Path, options: ConvertOptions, data: ConversionData) -> dict:
        from edgekit.backends.keras.loader import quiet_tensorflow

        quiet_tensorflow()
        import tf2onnx

        model, folded = with_batchnorm_folded(model)
        function = model.tf_function()
        try:
            tf2onnx.convert.from_function(function, input_signature=function.input_signature, opset=OPSET, output_path=str(out))
        except Exception as exc:  # tf2onnx raises many types for unsupported ops
            raise ConversionError(
                f"tf2onnx could not convert the model: {str(exc).strip().splitlines()[0][:300]}",
                hint="an op may be unsupported by tf2onnx; try --to openvino or --to tflite",
            ) from None
        _rename_io(out, [s.name for s in specs], model.output_names)
        return {"exporter": f"tf2onnx (opset {OPSET})", **folded}


def _rename_io(path: Path, inputs: list[str], outputs: list[str]) -> None:
    """tf2onnx names I/O after the tf.function's args (args_0:0...); use the Keras names."""
    import onnx

    model = onnx.load(str(path))
    renames = dict(zip([i.name for i in model.graph.input], inputs, strict=False)) | dict(
        zip([o.name for o in model.graph.output], outputs, strict=False)
    )
    for node in model.graph.node:
        node.input[:] = [renames.get(n, n) for n in node.input]
        node.output[:] = [renames.get(n, n) for n in node.output]
    for value in [*model.graph.input, *model.graph.output]:
        value.name = renames.get(value.name, value.name)
    onnx.save(model, str(path))
