"""OpenVINO int8 through NNCF: static int8 (the ISA class's overflow fix, --calib-method as NNCF's range estimator,
--per-tensor weights, full bias correction for a CNN, the transformer scheme where the IR has attention), accuracy
control on top-1, on agreement or on cosine with fp32 (SmoothQuant off under it), the sensitivity outliers of a
PyTorch source kept float, and weight-only int8.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter
from pathlib import Path

import numpy as np

from edgekit.conversion import ConversionData, ConvertOptions
from edgekit.devices.isa_class import class_for
from edgekit.errors import EdgekitError
from edgekit.quantization.box_decoding import CONV, END, LAYOUT, SOFTMAX, WEIGHTED, Graph
from edgekit.quantization.box_decoding import box_decoding as decoding_ops


def detect_model_type(ov_model) -> str | None:
    """'transformer' when the graph has attention, else None (CNN defaults). OpenVINO's frontends (PyTorch and ONNX)
    fuse MatMul + Softmax + MatMul into one ScaledDotProductAttention op; unfused, it is Softmax beside >= 4 MatMul."""
    ops = Counter(op.get_type_name() for op in ov_model.get_ops())
    fused = ops["ScaledDotProductAttention"] > 0
    return "transformer" if fused or (ops["Softmax"] and ops["MatMul"] >= 4) else None


def _overflow_fix(for_target: str):
    """NNCF's overflow fix for the ISA class: 7-bit weights where u8 x s8 sums saturate (x86 without VNNI)."""
    from nncf.quantization.advanced_parameters import OverflowFix

    isa, source = class_for(for_target)
    saturates = isa.name in ("x86-avx2", "x86-avx512", "x86-sse")
    fix = OverflowFix.ENABLE if saturates else OverflowFix.FIRST_LAYER
    why = (
        "no VNNI: 7-bit weights in every layer keep VPMADDUBSW's int16 sums from saturating"
        if saturates
        else "VNNI/AMX/Arm accumulate in int32; NNCF's default (7-bit weights in the first layer only)"
    )
    return fix, {"isa_class": isa.name, "isa_from": source, "overflow_fix": fix.value, "overflow_fix_reason": why}


def sensitive_layers(model, ov_model, data: ConversionData, specs, options: ConvertOptions) -> dict:
    """The sensitivity outliers (quantization.sensitivity), measured on a PyTorch source and named as OpenVINO
    names their convolutions; other sources are not measured (the provenance says so)."""
    from edgekit.backends.torch.sensitivity import torch_sensitivity
    from edgekit.quantization.sensitivity import outliers, provenance

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


OV_KINDS = {  # OpenVINO op types as the box-decoding walk reads them (quantization.box_decoding)
    "Softmax": SOFTMAX,
    "Convolution": CONV,
    "Result": END,
    **dict.fromkeys(("GroupConvolution", "ConvolutionBackpropData", "MatMul"), WEIGHTED),
    **dict.fromkeys(("Transpose", "Reshape", "Squeeze", "Unsqueeze"), LAYOUT),
}


def box_decoding(ov_model) -> list[str]:
    """The friendly names of the ops of a detector's box decoding (quantization.box_decoding: the rule, and why), in
    graph order; NNCF leaves them float."""
    graph = Graph(
        nodes=list(ov_model.get_ordered_ops()),
        readers=lambda op: [target.get_node() for output in op.outputs() for target in output.get_target_inputs()],
        kind=lambda op: OV_KINDS.get(op.get_type_name(), ""),
        kernel=_static_shape,
        key=lambda op: op.get_friendly_name(),
    )
    return [op.get_friendly_name() for op in decoding_ops(graph)]


def _static_shape(op) -> tuple | None:
    """The shape of `op`'s second input (a convolution's weights), where it is static."""
    shape = op.input(1).get_partial_shape() if op.get_input_size() > 1 else None
    return tuple(d.get_length() for d in shape) if shape is not None and shape.is_static else None


def static_int8(ov_model, data: ConversionData, options: ConvertOptions, sensitivity: dict, *, dense: bool = False):
    """NNCF's static int8 of `ov_model`; `dense`: a detector's or a map's outputs (convert.dense_outputs), which take
    NNCF's mixed preset (asymmetric activations, NNCF's advice for HardSwish/SiLU activations). 32 rendered pages each,
    against fp32 (x86-vnni): CDLA PicoDet 0.957 -> 0.987, PP-OCRv4 map F1 0.990 -> 0.993, YOLOv8n-DocLayNet 0.991 ->
    0.997, det_small 0.975 -> 0.991."""
    import nncf

    from edgekit.backends.openvino.calibration import nncf_dataset
    from edgekit.quantization.accuracy import Limit

    samples = data.calibration
    decoding = box_decoding(ov_model)  # always float: int8 moves boxes by a pixel (backends.onnx.box_decoding)
    ignored = list(dict.fromkeys([*excluded_ops(ov_model, options.exclude), *sensitivity.pop("ov_names"), *decoding]))
    model_type = options.model_type or detect_model_type(ov_model)
    mixed = dense and model_type != "transformer"  # a transformer takes NNCF's mixed preset already
    overflow_fix, isa_notes = _overflow_fix(options.for_target)
    ranges, scheme_notes = _nncf_scheme(options)
    common = {
        "subset_size": len(samples),
        # CNNs: BiasCorrection, layer by layer through the quantized model (EfficientNet-Lite0 +0.8 pt of agreement
        # with fp32 over the fast variant); transformers keep the fast one (BiasCorrection's per-layer runs grow with depth)
        "fast_bias_correction": model_type == "transformer",
        "model_type": nncf.ModelType.TRANSFORMER if model_type == "transformer" else None,
        "preset": nncf.QuantizationPreset.MIXED if mixed else None,
        "ignored_scope": nncf.IgnoredScope(names=ignored) if ignored else None,
    }
    advanced = nncf.AdvancedQuantizationParameters(overflow_fix=overflow_fix, **ranges)
    notes = {
        "mode": "static",
        "tool": "nncf",
        "model_type": model_type or "cnn",
        "preset": "mixed (asymmetric activations: a detector's or a map's outputs)" if mixed else "NNCF's default for the model type",
        **scheme_notes,
        "bias_correction": "fast" if model_type == "transformer" else "full",
        "samples": len(samples),
        "excluded": ignored,
        "box_decoding_in_float": decoding,
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
    from edgekit.quantization.accuracy import MAX_STEPS

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
    from edgekit.quantization.accuracy import check_top1

    if limit.count() > 1:
        raise EdgekitError(
            "OpenVINO's accuracy control holds one limit: --max-drop, --min-agreement or --min-cosine, not two",
            hint="keep one of them, or use --to onnx, which checks them all",
        )
    if limit.min_kept is not None:
        raise EdgekitError(
            "OpenVINO's accuracy control through NNCF (transformers, or --exclude) holds top-1 and cosine limits, not --min-map-kept",
            hint="use --to onnx, whose accuracy control reads the task's metric, or hold the outputs with --min-cosine",
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


def weights_int8(ov_model):
    import nncf

    return nncf.compress_weights(ov_model, mode=nncf.CompressWeightsMode.INT8_ASYM), {
        "mode": "weights-only",
        "tool": "nncf.compress_weights",
        "weights": "int8 asymmetric, per-channel",
        "note": "activations stay float; for large (transformer) models where weights dominate memory",
    }
