"""PT2E int8 for mobile CNNs, whatever the backend's quantizer (litert-torch's for LiteRT, XNNPACK's for ExecuTorch):
the steps both backends run.

`quantize()` runs them in order: export, fold pads, record the spans concatenations read, prepare with the backend's
quantizer (its patterns: backends.torch.pt2e_patterns), calibrate, convert, fit the weight codes, correct the biases
(backends.torch.pt2e_weights); `int8()` calls it once with the layers to keep float, or once per trial of the
sensitivity search (`int8_keeping_sensitive`: the same search for both backends). A process keeps a module's
calibrated observers and float layer means by its weights and the batches (`_kept_passes`): the search's later trials
and each step of LiteRT's accuracy control take them instead of calibrating again. The activation observer follows
--calib-method, the weight scheme --per-tensor (`static_config`). Import lazily (it imports torch and torchao).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib

import torch
from torch.fx import GraphModule

from edgekit.artifact import fixed_batch
from edgekit.backends.torch.loader import exported_batch
from edgekit.backends.torch.pt2e_patterns import BOX_DECODING, fold_zero_pads, record_concat_spans
from edgekit.backends.torch.pt2e_weights import SAMPLES_FOR_MEANS, correct_biases, fit_weight_rounding, float_output_means, quantized_layers
from edgekit.memo import Kept

_kept_passes: Kept[dict] = Kept(entries=2)  # observers after calibration and float layer means, by module and batches

# --calib-method -> the activation observer PT2E calibrates with, and what it computes (for the provenance)
OBSERVERS = {
    "minmax": ("MinMaxObserver", "the minimum and maximum over all calibration samples"),
    "histogram": ("HistogramObserver", "the range that minimises the L2 quantization error of a histogram of the activations"),
}


def static_config(make_config, options) -> tuple:
    """The backend's static int8 config (`make_config(is_per_channel=...)`, litert-torch's or XNNPACK's
    get_symmetric_quantization_config) with --per-tensor and --calib-method applied; (config, provenance entry)."""
    from torchao.quantization.pt2e import observer as observers

    method = options.calibration.method  # one of OBSERVERS: the converters declare them (calib_methods), the pipeline refuses others
    name, what = OBSERVERS[method]
    config = make_config(is_per_channel=not options.per_tensor)
    observer = getattr(observers, name).with_args(eps=2**-12)
    activation = dataclasses.replace(config.input_activation, observer_or_fake_quant_ctr=observer)
    config = dataclasses.replace(config, input_activation=activation, output_activation=activation)
    return config, {
        "weights": f"int8 symmetric, {'per-tensor' if options.per_tensor else 'per-channel'} (min/max of the weights)",
        "activations": f"int8 per-tensor affine, calib_method {method}: torchao {name} ({what})",
    }


def quantize(module, args, quantizer, batches: list, fold_quantize: bool) -> tuple:
    """torch.export, zero pads folded, PT2E prepare with `quantizer`, one pass over `batches` (tuples of input tensors),
    convert, weight codes fitted, biases corrected empirically; (the quantized GraphModule, provenance notes).
    `fold_quantize` folds the weights' quantize ops into int8 constants afterwards (what ExecuTorch's lowering expects;
    litert-torch folds them itself)."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    # a copy: the export shares parameters with `module` (a Linear's bias, which correct_biases edits in place), and
    # accuracy control and the sensitivity search quantize the same module again
    exported = torch.export.export(copy.deepcopy(module), args).module()
    folded = fold_zero_pads(exported)  # before quantize/dequantize pairs hide the pad from the backends' own folding
    record_concat_spans(exported, batches[:SAMPLES_FOR_MEANS])  # what float_uneven_concats decides from
    prepared = prepare_pt2e(exported, quantizer)
    kept = _kept_passes.get_or_make(_content_key(module, batches), dict)
    _calibrate(prepared, batches, kept.setdefault("observers", {}))
    converted = convert_pt2e(prepared, fold_quantize=False)  # the fit edits the float weights the quantize ops read
    means = _float_means(converted, batches, kept.setdefault("means", {}))  # before the fit edits the weights
    notes = {"calibration_samples": len(batches), "zero_pads_folded": folded, "weight_rounding": fit_weight_rounding(converted, batches)}
    notes["box_decoding_in_float"] = [n.name for n in prepared.graph.nodes if n.meta.get(BOX_DECODING)]
    notes["bias_correction"] = correct_biases(converted, batches, means)
    if fold_quantize:
        _fold_weight_quantize(converted)
    return converted, notes


def _content_key(module, batches: list) -> str:
    """What a calibration pass's results follow from: the module's weights and buffers, and the batches' bytes."""
    return content_digest([*module.state_dict().items(), *((str(i), t) for i, b in enumerate(batches) for t in b)]).hexdigest()


def content_digest(named: list[tuple[str, object]], digest=None):
    """`digest` (a new sha256) updated with each name and its value's bytes (a tensor's; else its repr): a module's
    state_dict().items() and whatever else a result follows from."""
    digest = digest or hashlib.sha256()
    for name, value in named:
        digest.update(name.encode())
        digest.update(value.detach().cpu().contiguous().numpy().tobytes() if torch.is_tensor(value) else repr(value).encode())
    return digest


def _calibrate(prepared: GraphModule, batches: list, kept: dict) -> None:
    """One pass of `batches` through the prepared model's observers, or none where each of them is in `kept` (observers
    after an earlier pass over the same module and batches): the sensitivity search and accuracy control quantize one
    module again with a few layers float, and its observers then see the same float values (PT2E calibrates in float).
    An observer is matched by its kind and settings and by every tensor it observes."""
    sites = _observer_sites(prepared)
    observers = _observers(prepared, sites)
    if observers and all(key in kept for key in observers):
        for key, names in observers.items():
            observer = copy.deepcopy(kept[key])
            for name in names:
                setattr(prepared, name, observer)
        return
    _observe(prepared, batches, sites)
    kept.update({key: copy.deepcopy(getattr(prepared, names[0])) for key, names in observers.items()})


def _observe(prepared: GraphModule, batches: list, sites: dict) -> None:
    """`batches` through the prepared model; an observer of weights alone (a constant: each batch would show it the
    same values) sees the first, and passes the others through (nn.Identity in its place). `sites`: _observer_sites."""
    held = {
        name: getattr(prepared, name)
        for names, sources in sites.values()
        if all(source.op == "get_attr" for source in sources)
        for name in names
    }
    for index, tensors in enumerate(batches):
        prepared(*tensors)
        if index == 0:
            for name in held:
                setattr(prepared, name, torch.nn.Identity())
    for name, observer in held.items():
        setattr(prepared, name, observer)


def _observers(prepared: GraphModule, sites: dict) -> dict[tuple, list[str]]:
    """{(an observer's kind and settings, the tensors it observes): the attributes it is held under} of a PT2E-prepared
    model, from its _observer_sites."""
    return {
        (_settings(getattr(prepared, names[0])), tuple(sorted({source.name for source in sources}))): names
        for names, sources in sites.values()
    }


def _observer_sites(prepared: GraphModule) -> dict[int, tuple[list[str], list]]:
    """{observer: (the attributes it is held under, the nodes whose values it observes)}: an observer shared between
    tensors is one, under one or more attributes."""
    sites: dict[int, tuple[list[str], list]] = {}
    for node in prepared.graph.nodes:
        if node.op == "call_module" and node.target.startswith("activation_post_process"):
            source = node.args[0]
            while source.op == "call_module" and source.target.startswith("activation_post_process"):
                source = source.args[0]
            names, sources = sites.setdefault(id(getattr(prepared, node.target)), ([], []))
            names.append(node.target)
            sources.append(source)
    return sites


def _settings(observer) -> tuple:
    attributes = ("dtype", "qscheme", "quant_min", "quant_max", "ch_axis", "bins", "eps", "reduce_range")
    return (type(observer).__name__, *(str(getattr(observer, a, None)) for a in attributes))


def _float_means(converted: GraphModule, batches: list, kept: dict) -> dict:
    """float_output_means of `converted`, from `kept` (by node name: the float model is the same whichever layers stay
    float) where an earlier quantization of the module over the same batches measured each of its layers."""
    layers = quantized_layers(converted)
    if not all(node.name in kept for node in layers):
        kept.update({node.name: mean for node, mean in float_output_means(converted, batches).items()})
    return {node: kept[node.name] for node in layers}


def int8(module, args, make_quantizer, samples, specs, *, fold_quantize: bool, search: bool, layout: str = "nchw", keep_float=()) -> tuple:
    """PT2E static int8 of `module` (`quantize`) with a backend's quantizer, calibrated on `samples` (calibration.Samples):
    the `keep_float` modules stay float, or with `search` the prefix of the sensitivity outliers that the search picks
    (`int8_keeping_sensitive`). `make_quantizer(keep_float)` -> (quantizer, scheme). Returns (the quantized
    GraphModule, its quantizer, the provenance entry)."""
    batches = list(calibration_batches(samples, specs, layout))
    if search:
        return int8_keeping_sensitive(module, args, make_quantizer, batches, samples, specs, fold_quantize)
    return int8_module(module, args, make_quantizer, batches, tuple(keep_float), fold_quantize)


def int8_module(module, args, make_quantizer, batches: list, keep_float: tuple[str, ...], fold_quantize: bool) -> tuple:
    """One PT2E int8 quantization with `keep_float` modules float: (GraphModule, quantizer, provenance entry)."""
    quantizer, scheme = make_quantizer(keep_float)
    converted, done = quantize(module, args, quantizer, batches, fold_quantize)
    return converted, quantizer, {**scheme, **done}


def int8_keeping_sensitive(module, args, make_quantizer, batches: list, samples, specs, fold_quantize: bool) -> tuple:
    """PT2E int8 keeping in float the prefix of the sensitivity outliers (most sensitive first, as ONNX Runtime's
    default does) that brings the quantized model's outputs closest to fp32 on the ranking's samples, all-int8
    included: layers interact. Each trial is a PT2E quantization (calibrated once: `_calibrate`); only the closest is
    held. EfficientNet-Lite0's three outliers kept (with the ops that feed them: `unannotate_modules`), 600 photo crops against fp32 (x86-vnni):
    LiteRT 96.00 -> 97.17%, ExecuTorch 95.50 -> 97.67%, cosine 0.9981 -> 0.9989 (docs/int8-schemes.md)."""
    from edgekit.backends.torch.sensitivity import torch_sensitivity
    from edgekit.quantization.sensitivity import SAMPLES, losses_by_kept, outliers, output_loss, provenance

    ranked, total = torch_sensitivity(module, samples, specs, fixed=exported_batch(module))
    candidates = outliers(ranked)
    probe = batches[:SAMPLES]
    reference = first_outputs(module, probe)
    losses, best = [], None
    for count in range(len(candidates) + 1):
        trial = int8_module(module, args, make_quantizer, batches, tuple(s.name for s in candidates[:count]), fold_quantize)
        losses.append(output_loss(reference, first_outputs(trial[0], probe)))
        if best is None or losses[-1] < losses[best[0]]:  # ties keep fewer layers float
            best = (count, trial)
    count, (converted, quantizer, entry) = best
    sensitivity = provenance(ranked, candidates[:count], len(probe), total)
    sensitivity["output_loss_by_kept"] = losses_by_kept(candidates, losses)
    return converted, quantizer, {**entry, "sensitivity": sensitivity}


def first_outputs(model, batches: list) -> list:
    """The model's first output on each batch (tuples of input tensors), as arrays."""
    from edgekit.backends.torch.sensitivity import first_output

    with torch.no_grad():
        return [first_output(model(*b)) for b in batches]


def calibration_batches(samples, specs, layout: str = "nchw"):
    """The calibration samples as tuples of input tensors (batch 1, as exported; a .pt2 exported at a fixed batch, that
    batch, the last one filled up with repeated samples), for PT2E observers (LiteRT, ExecuTorch)."""
    for feeds in samples.batches(1, fixed_batch(specs)):
        tensors = [torch.from_numpy(feeds[s.name]) for s in specs]
        if layout == "nhwc":
            tensors = [t.permute(0, 2, 3, 1).contiguous() if t.dim() == 4 else t for t in tensors]
        yield tuple(tensors)


def _fold_weight_quantize(model: GraphModule) -> None:
    """Constant-fold get_attr -> quantize into int8 constants, as convert_pt2e(fold_quantize=True) does."""
    from torchao.quantization.pt2e.constant_fold import constant_fold

    qd = torch.ops.quantized_decomposed
    quantize_ops = (qd.quantize_per_tensor.default, qd.quantize_per_channel.default)
    constant_fold(model, lambda n: n.op == "call_function" and n.target in quantize_ops)
