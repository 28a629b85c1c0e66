"""ONNX -> ONNX precision passes: fp16, dynamic int8, static int8 (QDQ) with calibration.

The int8 scheme is chosen for the CPU class (edgekit.isa) or accelerator the model is meant for, and
the reason is recorded: u8 x s8 where VNNI/AMX accumulate it in int32 (the fast path), u8 x u8 where
u8 x s8 would saturate (x86 without VNNI), s8 x s8 on Arm, symmetric s8 for TensorRT.
"""

from __future__ import annotations

import contextlib
import io
import logging
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from edgekit.converters import ConversionData, Converter, ConvertOptions
from edgekit.errors import ConversionError, EdgekitError

log = logging.getLogger("edgekit")


@dataclass(frozen=True)
class Int8Scheme:
    """Activation/weight types and symmetry for static int8, and why."""

    activations: str  # "uint8" | "int8"
    weights: str
    symmetric_activations: bool
    reason: str
    quantize_bias: bool = True  # int32 bias DequantizeLinear (ONNX Runtime fuses it); TensorRT keeps float biases
    isa_class: str | None = None  # the CPU class the scheme was chosen for (None: not a CPU target)
    isa_from: str | None = None  # where that class came from: this host, --for-target, a device

    def to_dict(self) -> dict:
        return asdict(self)


def for_tensorrt(target: str) -> bool:
    """tensorrt:cuda, or ONNX Runtime's TensorRT provider (onnxruntime:tensorrt)."""
    runtime, _, device = target.partition(":")
    return runtime == "tensorrt" or device == "tensorrt"


def choose_scheme(for_target: str) -> Int8Scheme:
    """The int8 scheme for `--for-target`: TensorRT's, or the one for the ISA class the model will run on
    (a target on this host, a class name, a device preset or an inventory device; see edgekit.isa)."""
    from edgekit.isa import class_for

    if for_tensorrt(for_target):
        return Int8Scheme(
            "int8", "int8", True, "TensorRT's explicit quantization takes symmetric int8 Q/DQ (zero-point 0) only, biases in float", False
        )
    isa, source = class_for(for_target)
    return Int8Scheme(isa.activations, isa.weights, False, f"{isa.name}: {isa.reason}", isa_class=isa.name, isa_from=source)


class OnnxQuantizer(Converter):
    """fp16 (onnxconverter-common), int8-dynamic and static int8 QDQ (onnxruntime.quantization)."""

    sources = ("onnx",)
    target_format = "onnx"
    precisions = {"fp32": False, "fp16": False, "int8": True, "int8-dynamic": False}
    package = "onnxruntime"
    import_name = "onnxruntime"

    def convert(self, model: Path, specs, out: Path, options: ConvertOptions, data: ConversionData) -> dict:
        passes = {"fp32": _copy, "fp16": _to_fp16, "int8-dynamic": _int8_dynamic, "int8": _int8_static}
        try:
            return passes[options.precision](Path(model), out, options, data.calibration, specs)
        except EdgekitError:
            raise
        except Exception as exc:  # onnxruntime.quantization raises plain exceptions for unsupported graphs
            raise ConversionError(
                f"{options.precision} quantization failed: {str(exc).splitlines()[0][:300]}",
                hint="exclude the failing node with --exclude NODE, or try another precision",
            ) from None


def _copy(model: Path, out: Path, options: ConvertOptions, samples, specs) -> dict:
    shutil.copyfile(model, out)
    return {}


def _to_fp16(model: Path, out: Path, options: ConvertOptions, samples, specs) -> dict:
    import onnx
    from onnxconverter_common import float16

    converted = float16.convert_float_to_float16(
        onnx.load(str(model)), keep_io_types=options.keep_io_types, node_block_list=list(options.exclude) or None
    )
    onnx.save(converted, str(out))
    return {
        "fp16": {
            "keep_io_types": options.keep_io_types,
            "note": "fp16 halves size; on CPUs without fp16 arithmetic ONNX Runtime computes many ops through casts, so it is rarely faster there",
        }
    }


def _preprocessed(model: Path, workdir: Path) -> Path:
    """ONNX Runtime's quantization pre-processing (shape inference + graph optimisation)."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    model, target = Path(model).resolve(), (workdir / "pre.onnx").resolve()
    # ORT's symbolic shape inference drops sym_shape_infer_temp.onnx into the current folder when it gives up: keep it in workdir
    with contextlib.chdir(workdir):
        try:
            quant_pre_process(str(model), str(target))
        except Exception as exc:  # symbolic shape inference fails on some exporter outputs
            log.info("symbolic shape inference failed (%s); pre-processing without it", str(exc).splitlines()[0][:200])
            quant_pre_process(str(model), str(target), skip_symbolic_shape=True)
    return target


def _int8_dynamic(model: Path, out: Path, options: ConvertOptions, samples, specs) -> dict:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(dir=Path(out).parent, prefix=".work-") as tmp:  # beside the output: swept with it after a kill
        pre = _preprocessed(model, Path(tmp))
        # ConvInteger has u8-weight kernels only on CPU: dynamic int8 covers MatMul/Gemm (Linear, attention, RNN).
        quantize_dynamic(
            str(pre),
            str(out),
            weight_type=QuantType.QInt8,
            per_channel=not options.per_tensor,
            op_types_to_quantize=["MatMul", "Gemm", "Attention", "LSTM", "GRU"],
            nodes_to_exclude=list(options.exclude),
        )
    return {
        "quantization": {
            "mode": "dynamic",
            "weights": "int8",
            "per_channel": not options.per_tensor,
            "ops": "MatMul/Gemm/Attention/RNN",
            "note": "activations are quantized at run time; convolutions stay float (use static int8 for CNNs)",
        }
    }


def _int8_static(model: Path, out: Path, options: ConvertOptions, samples, specs) -> dict:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    from edgekit.calibration.adapters import ort_reader

    scheme = choose_scheme(options.for_target)
    types = {"uint8": QuantType.QUInt8, "int8": QuantType.QInt8}
    methods = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy, "percentile": CalibrationMethod.Percentile}
    with tempfile.TemporaryDirectory(dir=Path(out).parent, prefix=".work-") as tmp, _stdout_to_log():
        pre = _preprocessed(model, Path(tmp))
        quantize_static(
            str(pre),
            str(out),
            ort_reader(samples, _calibration_batch(specs, len(samples))),
            quant_format=QuantFormat.QDQ,
            per_channel=not options.per_tensor,
            activation_type=types[scheme.activations],
            weight_type=types[scheme.weights],
            calibrate_method=methods[options.calibration.method],
            nodes_to_exclude=list(options.exclude),
            extra_options={
                "ActivationSymmetric": scheme.symmetric_activations,
                "WeightSymmetric": True,
                "CalibTensorRangeSymmetric": scheme.symmetric_activations,
                "QuantizeBias": scheme.quantize_bias,
            },
        )
    notes = {
        "quantization": {
            "mode": "static",
            "format": "QDQ",
            "per_channel": not options.per_tensor,
            "method": options.calibration.method,
            "for_target": options.for_target,
            "excluded": list(options.exclude),
            **scheme.to_dict(),
        }
    }
    if for_tensorrt(options.for_target):  # say whether TensorRT would take it
        from edgekit.converters.tensorrt_checks import check_for_tensorrt

        notes["tensorrt_checks"] = [f.to_dict() for f in check_for_tensorrt(out)]
    return notes


@contextlib.contextmanager
def _stdout_to_log():
    """onnxruntime.quantization prints progress to stdout; keep it out of the user's output."""
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        yield
    for line in captured.getvalue().splitlines():
        log.info("onnxruntime.quantization: %s", line)


def _calibration_batch(specs, count: int) -> int:
    """A static batch dim must be fed as is; a dynamic one takes equal batches of at most 16.

    Equal batches, because ONNX Runtime's histogram calibrators (entropy, percentile) fail on a
    smaller last batch (onnxruntime issue #18792).
    """
    first = specs[0].shape[0] if specs and specs[0].shape else None
    if isinstance(first, int):
        return first
    return next(size for size in range(min(16, count), 0, -1) if count % size == 0)
