"""Keras / SavedModel -> TFLite: fp32, fp16, dynamic-range int8, full int8 with a representative dataset."""

from __future__ import annotations

import tempfile
from pathlib import Path

from edgekit.backends.keras.batchnorm import with_batchnorm_folded
from edgekit.conversion import ConversionData, Converter, ConvertOptions
from edgekit.errors import ConversionError, EdgekitError
from edgekit.native import stderr_silenced


class KerasToTflite(Converter):
    """tf.lite.TFLiteConverter; full int8 can take integer I/O (--io-dtype) for integer-only NPUs."""

    sources = ("keras",)
    target_format = "tflite"
    precisions = {"fp32": False, "fp16": False, "int8-dynamic": False, "int8": True}
    # full int8 weights per tensor with --per-tensor (the converter's _experimental_disable_per_channel); its range
    # estimation is its own (min/max), with no choice of method: --calib-method is refused
    honours = frozenset({"per_tensor"})
    package = "tensorflow-cpu"
    import_name = "tensorflow"

    def convert(self, model, specs, out: Path, options: ConvertOptions, data: ConversionData) -> dict:

        from edgekit.backends.keras.loader import quiet_tensorflow

        if options.per_tensor and options.precision != "int8":  # the converter's switch applies to full int8 only
            raise EdgekitError(
                f"--per-tensor is not available for TFLite {options.precision} from Keras", hint="drop --per-tensor, or use -p int8"
            )
        tf = quiet_tensorflow()
        model, folded = with_batchnorm_folded(model)
        with tempfile.TemporaryDirectory() as tmp:
            # An NPU needs constant shapes: a dynamic batch leaves SHAPE ops it cannot run.
            batch = 1 if options.device else None
            converter = tf.lite.TFLiteConverter.from_saved_model(str(model.export_saved_model(Path(tmp) / "saved_model", batch)))
            notes = configure(converter, options, data, specs)
            try:
                with stderr_silenced():  # the MLIR converter logs its settings from C++
                    flatbuffer = converter.convert()
                out.write_bytes(flatbuffer)
            except Exception as exc:  # the MLIR converter raises ConverterError and friends
                raise ConversionError(
                    f"TFLite conversion failed: {str(exc).strip().splitlines()[0][:300]}",
                    hint="an op may lack a TFLite kernel; try another precision",
                ) from None
        return {"tflite": notes, **folded}


def configure(converter, options: ConvertOptions, data: ConversionData, specs) -> dict:
    """Set a TFLiteConverter up for `options.precision`; returns what was chosen."""
    import tensorflow as tf

    from edgekit.backends.tflite.calibration import tflite_representative

    precision = options.precision
    if precision == "fp32":
        return {"precision": "fp32"}
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if precision == "fp16":
        converter.target_spec.supported_types = [tf.float16]
        return {"precision": "fp16", "note": "fp16 weights, dequantized to fp32 at load on CPUs"}
    if precision == "int8-dynamic":
        return {"precision": "int8-dynamic", "note": "int8 weights; activations quantized at run time"}
    converter.representative_dataset = tflite_representative(data.calibration, specs)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    io = {"float32": tf.float32, "int8": tf.int8, "uint8": tf.uint8}[options.io_dtype]
    converter.inference_input_type = io
    converter.inference_output_type = io
    converter._experimental_disable_per_channel = options.per_tensor  # the only switch TFLiteConverter has for it
    return {
        "precision": "int8",
        "io_dtype": options.io_dtype,
        "ops": "int8 builtins only (full integer)",
        "samples": len(data.calibration),
        "weights": f"int8 symmetric, {'per-tensor' if options.per_tensor else 'per-channel'}",
        "activations": "int8 per-tensor, the TFLite calibrator's min/max over the samples (no other method there)",
    }
