"""PyTorch, ONNX and Keras -> OpenVINO IR: fp32, fp16, int8 (ONNX Runtime's QDQ for a CNN on x86, else NNCF), weight-only
int8, accuracy-controlled int8.

A PyTorch module is read by the first of TORCH_ROUTES that converts it: OpenVINO's PyTorch frontend on a TorchScript
trace, then on torch.export's program, then through ONNX (edgekit's ONNX export and OpenVINO's ONNX frontend), for an
op the PyTorch frontend lacks. The notes list every route tried ("routes": route, result "failed" | "taken", why).
"""

from __future__ import annotations

import dataclasses
import logging
import re
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

from edgekit.backends.openvino.loader import root_logger_kept
from edgekit.backends.torch.export_errors import plain
from edgekit.conversion import ConversionData, Converter, ConvertOptions, plan
from edgekit.errors import ConversionError, EdgekitError
from edgekit.fileio import work_folder

log = logging.getLogger("edgekit")


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
            ov_model = _to_openvino(model, specs)
        ov_model = _name_tensors(ov_model, specs)
        if options.precision == "int8" and _quantized_onnx(model):
            notes["openvino"]["int8"] = "the ONNX's Q/DQ scales and weight codes as they are (no NNCF)"
        elif options.precision == "int8" and _onnx_runtime_route(ov_model, options):
            notes["openvino"]["int8"] = ONNX_RUNTIME_ROUTE
            return notes | _through_onnx_runtime(model, specs, out, options, data)
        elif options.precision == "int8":
            sensitivity = _sensitive_layers(model, ov_model, data, specs, options)
            fp32 = ov_model.clone() if data.validation is not None else None  # accuracy control's reference
            ov_model, notes["quantization"] = _nncf_int8(ov_model, data, options, sensitivity)
        elif options.precision == "int8-weights":
            ov_model, notes["quantization"] = _weights_int8(ov_model)
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
#   layer (OverflowFix.ENABLE): 90.2 / 88.2 / 91.0%; the pair-safe QDQ (backends.onnx.pair_safe) 97.5 / 93.5 / 95.3%
#   (cosine 0.9986 vs 0.994), as fast.
# Accuracy control (--val) goes the same way: ONNX Runtime's loop (quantize.accuracy) with every step scored on
# OpenVINO, and the IR validated again. Transformers keep NNCF's transformer scheme (SmoothQuant, attention-aware);
# so does --exclude (which names OpenVINO's layers), and so do the classes where ONNX Runtime's scheme is u8 x u8
# (x86-avx512, x86-sse: slow on OpenVINO) or unmeasured on OpenVINO (Arm).
ONNX_RUNTIME_CLASSES = ("x86-amx", "x86-vnni", "x86-avx2")
ONNX_RUNTIME_ROUTE = "ONNX Runtime's static int8 QDQ for the target's ISA class, read by OpenVINO as it is (no NNCF)"
VALIDATED_ON = "openvino:cpu"  # where the ONNX Runtime route's accuracy control scores its steps, and both routes the IR


def _onnx_runtime_route(ov_model, options: ConvertOptions) -> bool:
    """Quantize through ONNX Runtime's scheme for the target class rather than NNCF (see ONNX_RUNTIME_ROUTE)."""
    if not _route_allowed(options):
        return False
    if (options.model_type or detect_model_type(ov_model)) != "transformer":
        return True
    if options.calibration.method in set(ToOpenVino.calib_methods_for(options)) - set(ToOpenVino.calib_methods):
        raise EdgekitError(
            f"--calib-method {options.calibration.method} is not available for a transformer: OpenVINO quantizes it with "
            "NNCF, which has no entropy (KL) calibration",
            hint=f"use {' or '.join(ToOpenVino.calib_methods)}, or quantize through ONNX (--to onnx)",
        )
    return False


def _route_allowed(options: ConvertOptions) -> bool:
    """The options leave the ONNX Runtime route open: the target's ISA class is one of ONNX_RUNTIME_CLASSES, and
    --exclude (OpenVINO's layer names) does not ask for NNCF."""
    from edgekit.devices.isa_class import class_for

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
        ov.save_model(_name_tensors(_to_openvino(work / "int8.onnx", specs), specs), str(out), compress_to_fp16=False)
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
    from edgekit.quantize.accuracy import Limit, Validator, on_target, score_text

    validator, limit = Validator(fp32, data.validation, on_target(VALIDATED_ON)), Limit.of(options)
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


def _to_openvino(model, specs):
    """An ov.Model from a torch module, an .onnx path or a Keras SavedModel folder, batch dim dynamic."""
    import openvino as ov

    try:
        if isinstance(model, (str, Path)):
            return ov.convert_model(str(model))
        if hasattr(model, "export_saved_model"):  # a KerasModel: OpenVINO reads the SavedModel it exports
            with tempfile.TemporaryDirectory() as tmp:
                return ov.convert_model(str(model.export_saved_model(Path(tmp) / "saved_model")))
        return _torch_to_openvino(model, specs)
    except EdgekitError:
        raise
    except Exception as exc:  # the frontends raise OpConversionFailure and friends
        onnx_input = isinstance(model, (str, Path))
        raise ConversionError(
            f"OpenVINO cannot convert the model: {_openvino_reason(exc)}",
            hint="this ONNX has an op OpenVINO lacks (see the cause below): run it on onnxruntime:cpu, or replace the op"
            if onnx_input
            else "an op OpenVINO lacks (listed below): try --to onnx first, then convert that .onnx",
            cause=str(exc),
        ) from None


def _torch_to_openvino(module, specs):
    """Trace with example inputs; modules that cannot be traced (a .pt2's GraphModule) go through torch.export."""
    try:
        return _traced_to_openvino(module, specs)
    except Exception as exc:  # tracing fails on GraphModules and some control flow
        log.info("OpenVINO tracing failed (%s); converting through torch.export", _openvino_reason(exc))
    return _exported_to_openvino(module, specs)


def _input_shapes(module, specs) -> tuple[tuple, list]:
    """(example inputs at the export batch, OpenVINO's (shape, type) of each input: the batch dynamic, or a .pt2's
    fixed batch)."""
    import openvino as ov

    from edgekit.backends.torch.loader import batch_dynamic_shapes, example_tensors, export_batch

    args = example_tensors(specs, export_batch(module, 2))
    batch = -1 if batch_dynamic_shapes(module, specs) is not None else export_batch(module, 1)  # a .pt2's fixed batch stays
    # Positional (forward() argument names may differ from the specs'); _name_tensors names them after.
    return args, [(ov.PartialShape([batch, *s.concrete_shape(1)[1:]]), ov.Type(s.dtype)) for s in specs]


def _traced_to_openvino(module, specs):
    """OpenVINO's PyTorch frontend on a TorchScript trace of `module`."""
    import openvino as ov

    args, shapes = _input_shapes(module, specs)
    return ov.convert_model(module, example_input=args, input=shapes)


def _exported_to_openvino(module, specs):
    """OpenVINO's PyTorch frontend on torch.export's program of `module`."""
    import openvino as ov
    import torch

    from edgekit.backends.torch.loader import batch_dynamic_shapes

    args, shapes = _input_shapes(module, specs)
    program = torch.export.export(module, args, dynamic_shapes=batch_dynamic_shapes(module, specs))
    ov_model = ov.convert_model(program)
    # The exported-program frontend leaves every dim dynamic; only the batch should be.
    ov_model.reshape({port: shape for port, (shape, _) in zip(ov_model.inputs, shapes, strict=True)})
    return ov_model


@dataclasses.dataclass(frozen=True)
class Route:
    """One way from a torch module to an ov.Model: its name (for the notes), how: (module, specs, work folder,
    options, data) -> (the ov.Model, what the route's entry in the notes adds), and whether it applies to a module."""

    name: str
    convert: Callable[..., tuple[object, dict]]
    applies: Callable[[object], bool] = lambda module: True


def _own_route(read: Callable) -> Callable[..., tuple[object, dict]]:
    return lambda module, specs, work, options, data: (read(module, specs), {})


def _via_onnx(module, specs, work: Path, options: ConvertOptions, data: ConversionData) -> tuple[object, dict]:
    """edgekit's ONNX export of `module` (its own routes, in the entry) read by OpenVINO's ONNX frontend."""
    import openvino as ov

    from edgekit.backends.onnx.from_torch import TorchToOnnx

    onnx = work / "via-onnx" / "model.onnx"
    onnx.parent.mkdir()
    exported = TorchToOnnx().convert(module, specs, onnx, dataclasses.replace(options, precision="fp32"), data)
    try:
        ov_model = ov.convert_model(str(onnx))
    except Exception as exc:
        raise ConversionError(f"OpenVINO cannot read the exported ONNX: {_openvino_reason(exc)}") from exc
    return ov_model, {"exporter": exported["exporter"], "onnx_routes": exported["routes"]}


def _traceable(module) -> bool:
    """Not an exported program's module (a .pt2's): it refuses eval() (torch.export replaces it on the instance), and
    OpenVINO's trace calls it."""
    return "eval" not in vars(module)


TORCH_ROUTES = (
    Route("openvino", _own_route(_traced_to_openvino), _traceable),
    Route("openvino-export", _own_route(_exported_to_openvino)),
    Route("via-onnx", _via_onnx),
)
# what OpenVINO's errors showed -> the hint naming that cause ({0}: what the pattern caught)
OPENVINO_HINTS = (
    (
        re.compile(r"No conversion rule found for operations: ([^\n]+)"),
        "OpenVINO has no conversion for {0}: rewrite it with ops it converts",
    ),
)


def torch_by_routes(module, specs, work: Path, options: ConvertOptions, data: ConversionData) -> tuple[object, list[dict]]:
    """The ov.Model of the first of TORCH_ROUTES that converts `module`, and every route tried ({"route", "result":
    "failed" | "taken", "why"}). All failing: a ConversionError naming each route's failure, with the hints for the
    causes their errors showed."""
    from edgekit.backends.torch.export_errors import HINTS, model_code, quiet, reason, routes_hint

    routes: list[dict] = []
    failures: list[BaseException] = []
    for route in (r for r in TORCH_ROUTES if r.applies(module)):
        if routes:
            log.warning("OpenVINO: %s failed (%s); trying %s", routes[-1]["route"], routes[-1]["why"], route.name)
        try:
            with quiet(), root_logger_kept():  # so the warning before the next route shows
                ov_model, entry = route.convert(module, specs, work, options, data)
        except EdgekitError as exc:
            if not isinstance(exc, ConversionError):
                raise  # the inputs, not the route: every route would say the same
            routes.append({"route": route.name, "result": "failed", "why": " ".join(exc.message.split())})
            failures.append(exc)
            continue
        except Exception as exc:  # the frontends and torch raise many types; the next route is the point
            why = _openvino_reason(exc) if _from_openvino(exc) else reason(exc, model_code(module))  # torch's: where in the model
            routes.append({"route": route.name, "result": "failed", "why": why})
            failures.append(exc)
            log.info("%s route failed:\n%s", route.name, exc)
            continue
        routes.append({"route": route.name, "result": "taken", "why": None, **entry})
        return ov_model, routes
    frontend = next((str(exc) for exc in failures if _from_openvino(exc)), "")  # its list of the ops it lacks
    raise ConversionError(
        "OpenVINO cannot convert the model by any route: " + "; ".join(f"{r['route']}: {r['why']}" for r in routes),
        hint=routes_hint(failures, (*HINTS, *OPENVINO_HINTS)),
        cause=plain(frontend),
    )


def _from_openvino(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("openvino")


def _openvino_reason(exc: Exception) -> str:
    """OpenVINO's messages start with 'Exception from src/...cpp:N:'; the reason is the next line."""
    text = plain(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("Exception from")]
    unconverted = [ln.removeprefix("-- ") for ln in lines if "No conversion rule found" in ln]
    lines = unconverted or [ln for ln in lines if not ln.startswith("Check '")] or lines
    return " ".join((lines[0] if lines else text).split())[:300]


def _name_tensors(ov_model, specs):
    """Name inputs after `specs` and unnamed outputs `output`/`output_i`, as the ONNX path does."""
    for port, spec in zip(ov_model.inputs, specs, strict=False):
        port.get_tensor().set_names({spec.name})
    for i, port in enumerate(ov_model.outputs):
        if not port.get_names():
            port.get_tensor().set_names({"output" if len(ov_model.outputs) == 1 else f"output_{i}"})
    return ov_model


def detect_model_type(ov_model) -> str | None:
    """'transformer' when the graph has attention, else None (CNN defaults). OpenVINO's frontends (PyTorch and ONNX)
    fuse MatMul + Softmax + MatMul into one ScaledDotProductAttention op; unfused, it is Softmax beside >= 4 MatMul."""
    ops = Counter(op.get_type_name() for op in ov_model.get_ops())
    fused = ops["ScaledDotProductAttention"] > 0
    return "transformer" if fused or (ops["Softmax"] and ops["MatMul"] >= 4) else None


def _overflow_fix(for_target: str):
    """NNCF's overflow fix for the ISA class: 7-bit weights where u8 x s8 sums saturate (x86 without VNNI)."""
    from nncf.quantization.advanced_parameters import OverflowFix

    from edgekit.devices.isa_class import class_for

    isa, source = class_for(for_target)
    saturates = isa.name in ("x86-avx2", "x86-avx512", "x86-sse")
    fix = OverflowFix.ENABLE if saturates else OverflowFix.FIRST_LAYER
    why = (
        "no VNNI: 7-bit weights in every layer keep VPMADDUBSW's int16 sums from saturating"
        if saturates
        else "VNNI/AMX/Arm accumulate in int32; NNCF's default (7-bit weights in the first layer only)"
    )
    return fix, {"isa_class": isa.name, "isa_from": source, "overflow_fix": fix.value, "overflow_fix_reason": why}


def _sensitive_layers(model, ov_model, data: ConversionData, specs, options: ConvertOptions) -> dict:
    """The sensitivity outliers (quantize.sensitivity), measured on a PyTorch source and named as OpenVINO
    names their convolutions; other sources are not measured (the provenance says so)."""
    from edgekit.quantize.sensitivity import outliers, provenance, torch_sensitivity

    if not options.keep_sensitive or data.validation is not None:
        return {"kept_in_float": [], "ov_names": []}
    if isinstance(model, (str, Path)) or hasattr(model, "export_saved_model"):
        return {"kept_in_float": [], "ov_names": [], "note": "measured on PyTorch sources only; convert from the PyTorch model"}
    from edgekit.backends.torch.loader import exported_batch

    ranked, total = torch_sensitivity(model, data.calibration, specs, fixed=exported_batch(model))
    kept = outliers(ranked)
    notes = provenance(ranked, kept, min(len(data.calibration), 16), total)
    notes["ov_names"] = _ov_convolutions(model, ov_model, data.calibration, specs, [s.name for s in kept])
    if kept and not notes["ov_names"]:
        notes["kept_in_float"], notes["note"] = [], "the outliers could not be matched to OpenVINO's convolutions: all int8"
    return notes


def _ov_convolutions(module, ov_model, samples, specs, module_names: list[str]) -> list[str]:
    """OpenVINO's names of the convolutions of the torch modules `module_names`, matched by execution order
    (OpenVINO renames convolutions when it folds batch norm into them); [] when the counts differ."""
    import torch

    from edgekit.backends.torch.loader import exported_batch

    order: list[str] = []
    convs = [(name, m) for name, m in module.named_modules() if isinstance(m, torch.nn.Conv2d)]
    hooks = [m.register_forward_hook(lambda *_, name=name: order.append(name)) for name, m in convs]
    try:
        with torch.no_grad():
            feeds = next(samples.batches(1, exported_batch(module)))  # a .pt2 exported at a fixed batch takes that batch only
            module(*[torch.from_numpy(np.ascontiguousarray(feeds[s.name])) for s in specs])
    finally:
        for hook in hooks:
            hook.remove()
    ov_convs = [op.get_friendly_name() for op in ov_model.get_ordered_ops() if op.get_type_name() in ("Convolution", "GroupConvolution")]
    if len(ov_convs) != len(order) or len(set(order)) != len(order):
        return []
    return [ov_convs[order.index(name)] for name in module_names if name in order]


def excluded_ops(ov_model, names) -> list[str]:
    """--exclude names as the IR names its ops: the op of that name and those it became (`node_linear/WithoutBiases`,
    the MatMul of an ONNX Gemm); a name no op has is refused, with names that are there."""
    ops = [op.get_friendly_name() for op in ov_model.get_ordered_ops()]
    found = []
    for name in names:
        matched = [op for op in ops if op == name or op.startswith(f"{name}/")]
        if not matched:
            layers = [op.get_friendly_name() for op in ov_model.get_ordered_ops() if op.get_type_name() in ("Convolution", "MatMul")]
            raise EdgekitError(
                f"--exclude {name}: the model has no op of that name", hint=f"its layers are named like: {', '.join(layers[:6])}"
            )
        found += matched
    return found


def _nncf_int8(ov_model, data: ConversionData, options: ConvertOptions, sensitivity: dict):
    import nncf

    from edgekit.backends.openvino.calibration import nncf_dataset
    from edgekit.quantize.accuracy import Limit

    samples = data.calibration
    ignored = [*excluded_ops(ov_model, options.exclude), *sensitivity.pop("ov_names")]
    model_type = options.model_type or detect_model_type(ov_model)
    overflow_fix, isa_notes = _overflow_fix(options.for_target)
    ranges, scheme_notes = _nncf_scheme(options)
    common = {
        "subset_size": len(samples),
        # CNNs: BiasCorrection, layer by layer through the quantized model (EfficientNet-Lite0 +0.8 pt of agreement
        # with fp32 over the fast variant); transformers keep the fast one (BiasCorrection's per-layer runs grow with depth)
        "fast_bias_correction": model_type == "transformer",
        "model_type": nncf.ModelType.TRANSFORMER if model_type == "transformer" else None,
        "ignored_scope": nncf.IgnoredScope(names=ignored) if ignored else None,
    }
    advanced = nncf.AdvancedQuantizationParameters(overflow_fix=overflow_fix, **ranges)
    notes = {
        "mode": "static",
        "tool": "nncf",
        "model_type": model_type or "cnn",
        **scheme_notes,
        "bias_correction": "fast" if model_type == "transformer" else "full",
        "samples": len(samples),
        "excluded": ignored,
        "sensitivity": sensitivity,
        **isa_notes,
    }
    if data.validation is None:
        return nncf.quantize(ov_model, nncf_dataset(samples, ov_model), advanced_parameters=advanced, **common), notes
    limit = Limit.of(options)
    _check_nncf_limit(ov_model, limit)
    if model_type == "transformer":  # NNCF's reverts would undo SmoothQuant's weights only (_without_smooth_quant)
        advanced = _without_smooth_quant(advanced)
    quantized = nncf.quantize(ov_model.clone(), nncf_dataset(samples, ov_model), advanced_parameters=advanced, **common)
    controlled = _accuracy_controlled(ov_model, data, options, common, advanced)
    notes |= {
        "accuracy_control": {
            **limit.notes(),
            "validation_samples": len(data.validation),
            "reverted_to_float": reverted_layers(quantized, controlled),
            **({"smooth_quant": SMOOTH_QUANT_OFF} if model_type == "transformer" else {}),
        }
    }
    return controlled, notes


# --calib-method -> NNCF's activation range estimator (weights always take their own min/max). minmax is NNCF's
# default: per-tensor ranges from the mean over the samples of each one's min and max, per-channel ones (the inputs
# of depthwise convolutions) from the global min and max. Naming MEAN_MINMAX would average the per-channel ones too:
# EfficientNet-Lite0 then agrees with fp32 on 58% of the photo crops; the global extremes everywhere (MINMAX) lost
# 0.5 pt (docs/int8-schemes.md).
RANGE_ESTIMATORS = {
    "minmax": (None, "per-tensor: mean over the samples of each one's min and max; per-channel: global min and max"),
    "percentile": ("MEAN_QUANTILE", "mean over the samples of each one's 0.01% and 99.99% quantiles"),
    "histogram": ("HISTOGRAM", "the range that minimises the quantization error of a histogram of each activation"),
}


def _nncf_scheme(options: ConvertOptions) -> tuple[dict, dict]:
    """NNCF's AdvancedQuantizationParameters for --calib-method and --per-tensor, and what the provenance records."""
    from nncf.quantization.advanced_parameters import QuantizationParameters
    from nncf.quantization.range_estimator import RangeEstimatorParametersSet

    estimator, how = RANGE_ESTIMATORS[options.calibration.method]
    params = {"activations_range_estimator_params": getattr(RangeEstimatorParametersSet, estimator)} if estimator else {}
    if options.per_tensor:
        params["weights_quantization_params"] = QuantizationParameters(per_channel=False)
    notes = {
        "method": options.calibration.method,
        "activation_ranges": f"{how} (NNCF {estimator or 'default'})",
        "per_channel": not options.per_tensor,
        "weights": f"int8 symmetric, {'per-tensor' if options.per_tensor else 'per-channel'}",
    }
    return params, notes


def _accuracy_controlled(ov_model, data: ConversionData, options: ConvertOptions, common: dict, advanced):
    """NNCF's accuracy control on top-1 accuracy (--max-drop, labels), on top-1 agreement with the fp32 model
    (--min-agreement: the fp32 model agrees 100% with itself, so the allowed drop is 100 - the minimum) or on the mean
    cosine of the first output with fp32's (--min-cosine: the allowed drop is 1 - the minimum)."""
    import nncf
    from nncf.quantization.advanced_parameters import AdvancedAccuracyRestorerParameters

    from edgekit.backends.openvino.calibration import nncf_dataset, nncf_outputs_check, nncf_validation
    from edgekit.quantize.accuracy import MAX_STEPS

    if options.max_drop is not None:
        validation, validation_fn, max_drop = nncf_validation(data.validation, ov_model), _top1_validation, options.max_drop / 100.0
    else:
        validation = nncf_outputs_check(data.validation, ov_model)
        if options.min_agreement is not None:
            validation_fn, max_drop = _fidelity_validation(ov_model, _agreed), (100.0 - options.min_agreement) / 100.0
        else:
            validation_fn, max_drop = _fidelity_validation(ov_model, _cosine), 1.0 - options.min_cosine
    return nncf.quantize_with_accuracy_control(
        ov_model,
        nncf_dataset(data.calibration, ov_model),
        validation,
        validation_fn=validation_fn,
        max_drop=max_drop,
        drop_type=nncf.DropType.ABSOLUTE,
        advanced_quantization_parameters=advanced,
        # as many layers back to float as ONNX Runtime's loop tries (NNCF's default is all of them: 31 layers and 22
        # minutes on EfficientNet-Lite0, still under the limit on other crops)
        advanced_accuracy_restorer_parameters=AdvancedAccuracyRestorerParameters(max_num_iterations=MAX_STEPS),
        **common,
    )


def _check_nncf_limit(ov_model, limit) -> None:
    """What NNCF's accuracy control can hold, checked before any quantization: one limit, and a top-1 limit only on
    class scores."""
    from edgekit.quantize.accuracy import check_top1

    if limit.count() > 1:
        raise EdgekitError(
            "OpenVINO's accuracy control holds one limit: --max-drop, --min-agreement or --min-cosine, not two",
            hint="keep one of them, or use --to onnx, which checks them all",
        )
    check_top1(limit, [d.get_length() if d.is_static else -1 for d in ov_model.output(0).get_partial_shape()])


SMOOTH_QUANT_OFF = (
    "off: NNCF's accuracy control returns a layer to float with the model's own weights, SmoothQuant's division of its "
    "input left in place (zoo:fashion-vit, ranges 100x too small, --min-cosine 0.99: 0.924 with SmoothQuant, 0.998 without)"
)


def _without_smooth_quant(advanced):
    """NNCF's parameters with SmoothQuant off. Under accuracy control it must be: NNCF 3.4 reverts a layer to float by
    restoring the weights of the model it was given, while SmoothQuant's scaling of the layer's input (a Multiply
    before it) stays, so every reverted MatMul that SmoothQuant had smoothed computes (x / s) W instead of x W."""
    from nncf.quantization.advanced_parameters import AdvancedSmoothQuantParameters

    return dataclasses.replace(advanced, smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=-1, convolution=-1))


def _fidelity_validation(ov_model, measure):
    """NNCF's validation_fn for a limit against the fp32 model: (the mean over the samples of `measure(output,
    fp32's output)`, the mean per item), with the first output flattened per sample. An item is (feeds, real samples,
    batch): one sample, or a fixed batch whose repeated samples past `real` do not count.

    NNCF calls it on the whole set, on subsets and on single items, so each item's fp32 output is looked up by its
    content (computed once), never by its position."""
    import openvino as ov

    # f32 as NNCF compiles the models it validates: on AVX512-BF16/AMX CPUs OpenVINO would otherwise run bf16
    reference = ov.Core().compile_model(ov_model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    outputs: dict[bytes, np.ndarray] = {}

    def fp32_output(feeds, real: int, size: int) -> np.ndarray:
        key = _content_key(feeds)
        if key not in outputs:
            outputs[key] = _first_output(reference, feeds, real, size)
        return outputs[key]

    def validate(compiled_model, items) -> tuple[float, list[float]]:
        per_sample, per_item = [], []
        for feeds, real, size in items:
            rows = zip(_first_output(compiled_model, feeds, real, size), fp32_output(feeds, real, size), strict=True)
            values = [measure(output, reference_output) for output, reference_output in rows]
            per_sample += values
            per_item.append(sum(values) / len(values))
        return (sum(per_sample) / len(per_sample) if per_sample else 0.0), per_item

    return validate


def _first_output(compiled_model, feeds, real: int, size: int) -> np.ndarray:
    """The first output flattened per sample ([real, -1]): the rows of the `real` samples of a batch of `size` whose
    output holds the batch on axis 0, else the whole output as one row."""
    output = np.asarray(compiled_model(feeds)[compiled_model.output(0)], dtype=np.float64)
    if size > 1 and output.ndim and len(output) == size:
        return output.reshape(size, -1)[:real]
    return output.reshape(1, -1)


def _agreed(output: np.ndarray, reference: np.ndarray) -> float:
    """1.0 where the top-1 class is fp32's."""
    return float(output.argmax() == reference.argmax())


def _cosine(output: np.ndarray, reference: np.ndarray) -> float:
    """The cosine of two outputs, as metrics.compare counts it (a non-finite output: 0)."""
    from edgekit.metrics.compare import compare_output

    return compare_output("output", reference[None], output[None], classification=False).cosine_mean


def _content_key(feeds: dict) -> bytes:
    """A digest of a sample's input arrays."""
    import hashlib

    digest = hashlib.blake2b(digest_size=16)
    for value in feeds.values():
        digest.update(np.ascontiguousarray(value).tobytes())
    return digest.digest()


def _top1_validation(compiled_model, items) -> tuple[float, list[float]]:
    """NNCF's validation_fn: (top-1 accuracy as a fraction, per-item correctness)."""
    from edgekit.metrics.compare import top1_hits

    hits, per_item = [], []
    output = compiled_model.output(0)
    for feeds, label, size in items:  # one sample, or a fixed batch of `size` whose samples past the labels are repeats
        logits = np.asarray(compiled_model(feeds)[output])
        rows = (
            logits.reshape(size, -1)[: len(label)] if size > 1 and logits.ndim and len(logits) == size else logits.reshape(len(label), -1)
        )
        correct = top1_hits(rows, label).astype(float)
        hits += list(correct)
        per_item.append(float(correct.mean()))
    return (sum(hits) / len(hits) if hits else 0.0), per_item


def reverted_layers(quantized, controlled) -> list[str]:
    """Ops fed by a FakeQuantize in plain int8 but not after accuracy control: the layers kept in float."""
    return sorted(_quantized_consumers(quantized) - _quantized_consumers(controlled))


def _quantized_consumers(ov_model) -> set[str]:
    consumers = set()
    for op in ov_model.get_ordered_ops():
        if op.get_type_name() in ("Convolution", "GroupConvolution", "MatMul", "ConvolutionBackpropData"):
            if any(_int8_source(value) for value in op.input_values()):
                consumers.add(op.get_friendly_name())
    return consumers


# ops an int8 value passes through on its way to a layer: shape ops (NNCF puts a ViT's activation FakeQuantize before
# the reshapes into its patch embedding) and the decompression of int8 weights (Constant i8 -> Convert -> Multiply)
INT8_PASSES = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Convert", "Subtract", "Multiply"})


def _int8_source(value) -> bool:
    """Whether a layer input comes from a FakeQuantize or an int8 constant, through shape ops and decompression."""
    import openvino as ov

    node = value.get_node()
    kind = node.get_type_name()
    if kind == "Constant":
        return node.get_element_type() in (ov.Type.i8, ov.Type.u8)
    return kind == "FakeQuantize" or (kind in INT8_PASSES and any(_int8_source(v) for v in node.input_values()))


def _weights_int8(ov_model):
    import nncf

    return nncf.compress_weights(ov_model, mode=nncf.CompressWeightsMode.INT8_ASYM), {
        "mode": "weights-only",
        "tool": "nncf.compress_weights",
        "weights": "int8 asymmetric, per-channel",
        "note": "activations stay float; for large (transformer) models where weights dominate memory",
    }
