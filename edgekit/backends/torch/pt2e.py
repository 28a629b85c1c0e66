"""PT2E int8 for mobile CNNs, whatever the backend's quantizer (litert-torch's for LiteRT, XNNPACK's for ExecuTorch).

What the stock PT2E quantizers miss on EfficientNet-Lite / MobileNet, and the steps both backends run:

- conv + ReLU6 (aten.hardtanh) as one pattern, observed after the clamp. The stock quantizers fuse conv + ReLU only, so
  a ReLU6 shared the conv's pre-clamp observer: EfficientNet-Lite0's stem got a 0.72 scale, ~8 levels for its 0..6 output.
- a residual add written `x + y` (litert-torch finds adds by their source function, which a non-strict torch.export
  does not record, so those adds stayed float).
- a concatenation shares one observer over all its inputs (`annotate_concats`; litert-torch misses `cat` as it misses
  adds, and its converter then requantized the other inputs into the last one's scale); where the inputs' calibrated
  spans differ a lot (a detector's boxes in pixels beside its class probabilities) it runs in float, with the weightless
  ops computing its inputs (`float_uneven_concats`).
- softmax and sigmoid outputs read in int8 get the config's fixed qparams where it declares them (`fix_bounded_outputs`:
  litert-torch's 1/256, which TFLite's kernels demand; its own annotator misses those after a view left float).
- a constant zero pad shares its input's observer (zeros are inside any ReLU range), so no requantize after it; a
  symmetric one is folded into the convolution that reads it (`fold_zero_pads`).
- the weight codes fitted to the quantized model's own activations, and biases corrected (`fit_weight_rounding`,
  backends.onnx.int8_rounding's algorithm), then each bias moved so the layer's mean output on the calibration samples is
  the float model's, layer by layer through the quantized model (`correct_biases`).
- the activation observer follows --calib-method, the weight scheme --per-tensor (`static_config`).

`quantize()` runs them in order: export, fold pads, record the spans concatenations read, prepare with the backend's
quantizer, calibrate, convert, fit, correct; `int8()` calls it once with the layers to keep float, or once per trial of
the sensitivity search (`int8_keeping_sensitive`: the same search for both backends).
The quantizer configs of litert-torch and XNNPACK are both dataclasses with input_activation, output_activation,
weight and bias specs: that is all this module reads. Import lazily (it imports torch and torchao).
"""

from __future__ import annotations

import copy
import dataclasses
import math

import torch
from torch.fx import GraphModule, Node
from torchao.quantization.pt2e.quantizer import QuantizationAnnotation, SharedQuantizationSpec

from edgekit.artifact import fixed_batch
from edgekit.backends.torch.loader import exported_batch

_aten = torch.ops.aten
CONVS = (_aten.conv1d.default, _aten.conv2d.default, _aten.convolution.default)
CLAMPS = (_aten.hardtanh.default, _aten.hardtanh_.default)  # nn.ReLU6 and F.hardtanh
ADDS = (_aten.add.Tensor, _aten.add_.Tensor)
PADS = (_aten.pad.default, _aten.constant_pad_nd.default)
CATS = (_aten.cat.default, _aten.concat.default)
BOUNDED = (_aten.sigmoid.default, _aten._softmax.default, _aten.softmax.int)  # outputs in [0, 1] whatever the input
SPAN = "edgekit_span"  # node.meta key: (min, max) of the node's output on calibration samples (record_concat_spans)
UNEVEN = 8.0  # a concatenation input this many times narrower than all its inputs together keeps its own scale
WEIGHTED = (*CONVS, _aten.linear.default)  # the layers a kept layer's float producers stop at


class MobilePatterns:
    """Put first in a stock PT2E quantizer's bases (litert-torch's, XNNPACK's): this module's patterns around the
    quantizer's own annotation (static int8 with a global config), and `keep_float`, the module names (as
    `named_modules()` gives them) whose ops stay float (accuracy control, the sensitivity search)."""

    def __init__(self, keep_float: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.keep_float = tuple(keep_float)

    def annotate(self, model: GraphModule) -> GraphModule:
        annotate_before(model, self.global_config)
        model = super().annotate(model)
        annotate_after(model, self.global_config)
        unannotate_modules(model, self.keep_float)
        return model


def annotate_before(model: GraphModule, config) -> None:
    """The patterns to claim before a stock quantizer annotates (it would take the conv alone)."""
    if is_static(config):
        annotate_conv_clamp(model, config)


def annotate_after(model: GraphModule, config) -> None:
    """The patterns to add after a stock quantizer annotated (its own adds stay as they are)."""
    if is_static(config):
        annotate_activation_adds(model, config)
        share_pad_observers(model)
        annotate_concats(model, config)
        float_uneven_concats(model)
        fix_bounded_outputs(model, config)


def unannotate_modules(model: GraphModule, modules: tuple[str, ...]) -> None:
    """Drop the quantization annotations of the ops that `modules` (named_modules() names) own, so they run in float
    (accuracy control's and the sensitivity search's layers kept in float).

    The ops that feed them go float whole too, back to the conv or linear that computes their input
    (`_float_producers`): neither backend takes a quantized op whose output only float ops read. litert-torch finds
    dequantize -> float conv -> quantize and fuses it back into an int8 op with round-to-nearest weights
    (EfficientNet-Lite0's first depthwise convolution "kept in float" that way: 88.67% of the photo crops, against
    96.00% all-int8); XNNPACK's partitioner takes no quantized conv with a float output ("Missing out variants:
    quantized_decomposed::dequantize_per_channel"). The price: the layer before a kept one runs in float too."""
    kept = {n for n in model.graph.nodes if (stack := n.meta.get("nn_module_stack")) and list(stack.values())[-1][0] in modules}
    for node in kept:
        node.meta.pop("quantization_annotation", None)
    for node in list(kept):
        _float_producers(node, kept)


def _float_producers(node: Node, floats: set) -> None:
    """Unannotate the ops whose output only float ops read, from `node`'s inputs back to the conv or linear that
    computes them (through an add: both branches; through an op no quantizer annotated, as a view). A producer that
    quantized ops read too keeps its int8 output: the float op then reads it dequantized."""
    for producer in node.all_input_nodes:
        if producer.op != "call_function" or producer in floats or not set(producer.users) <= floats:
            continue
        producer.meta.pop("quantization_annotation", None)
        floats.add(producer)
        if producer.target not in WEIGHTED:
            _float_producers(producer, floats)


def is_static(config) -> bool:
    return config is not None and config.input_activation is not None and not config.input_activation.is_dynamic


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
    for tensors in batches:  # one pass through the observers
        prepared(*tensors)
    converted = convert_pt2e(prepared, fold_quantize=False)  # the fit edits the float weights the quantize ops read
    means = float_output_means(converted, batches)  # before the fit edits the weights
    notes = {"calibration_samples": len(batches), "zero_pads_folded": folded, "weight_rounding": fit_weight_rounding(converted, batches)}
    notes["bias_correction"] = correct_biases(converted, batches, means)
    if fold_quantize:
        _fold_weight_quantize(converted)
    return converted, notes


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
    included: layers interact. Each trial is the full PT2E pass; only the closest is held. EfficientNet-Lite0's three
    outliers kept (with the ops that feed them: `unannotate_modules`), 600 photo crops against fp32 (x86-vnni):
    LiteRT 96.00 -> 97.17%, ExecuTorch 95.50 -> 97.67%, cosine 0.9981 -> 0.9989 (docs/int8-schemes.md)."""
    from edgekit.quantize.sensitivity import SAMPLES, losses_by_kept, outliers, output_loss, provenance, torch_sensitivity

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
    from edgekit.quantize.sensitivity import first_output

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


def _is_annotated(node: Node) -> bool:
    annotation = node.meta.get("quantization_annotation")
    return annotation is not None and annotation._annotated


def _is_activation(arg) -> bool:
    return isinstance(arg, Node) and arg.op in ("call_function", "placeholder")


def annotate_conv_clamp(model: GraphModule, config) -> None:
    """Conv followed by hardtanh (ReLU6) as one quantized pattern: the output observer sits after the clamp."""
    for clamp in model.graph.nodes:
        if clamp.op != "call_function" or clamp.target not in CLAMPS:
            continue
        conv = clamp.args[0]
        if not isinstance(conv, Node) or conv.op != "call_function" or conv.target not in CONVS or len(conv.users) != 1:
            continue
        bias = conv.args[2] if len(conv.args) > 2 and isinstance(conv.args[2], Node) else None
        if any(_is_annotated(n) for n in (clamp, conv, conv.args[1], bias) if n is not None):
            continue
        inputs = {conv.args[0]: config.input_activation, conv.args[1]: config.weight}
        if bias is not None:
            inputs[bias] = config.bias
        conv.meta["quantization_annotation"] = QuantizationAnnotation(input_qspec_map=inputs, _annotated=True)
        clamp.meta["quantization_annotation"] = QuantizationAnnotation(output_qspec=config.output_activation, _annotated=True)
        for node in (conv.args[1], bias):
            if node is not None and "quantization_annotation" not in node.meta:
                node.meta["quantization_annotation"] = QuantizationAnnotation(_annotated=True)


def annotate_activation_adds(model: GraphModule, config) -> None:
    """Adds of two activations that the stock source-function matcher left float."""
    for add in model.graph.nodes:
        if add.op != "call_function" or add.target not in ADDS or _is_annotated(add):
            continue
        left, right = add.args[:2]
        if not (_is_activation(left) and _is_activation(right)):
            continue
        add.meta["quantization_annotation"] = QuantizationAnnotation(
            input_qspec_map={left: config.input_activation, right: config.input_activation},
            output_qspec=config.output_activation,
            _annotated=True,
        )


def annotate_concats(model: GraphModule, config) -> None:
    """Concatenations of activations that the stock quantizer left unannotated share one observer over all their inputs,
    as XNNPACK's quantizer annotates them (litert-torch finds `cat` by its source function, as it does adds). Left to it,
    LiteRT's converter gave a concatenation the scale of its last input and requantized the others into it: a detector's
    stride-8 class logits (-27..4) cut to the stride-16 head's calibrated -12..0, every probability above 0.5 lost
    (zoo:fashion-det: 4.7 points of labelled mAP@0.5). `float_uneven_concats` then takes back the uneven ones."""
    for cat in model.graph.nodes:
        if cat.op != "call_function" or cat.target not in CATS or _is_annotated(cat):
            continue
        inputs = list(dict.fromkeys(cat.args[0]))
        if not inputs or not all(_is_activation(arg) for arg in inputs):
            continue
        shared = SharedQuantizationSpec((inputs[0], cat))
        cat.meta["quantization_annotation"] = QuantizationAnnotation(
            input_qspec_map={inputs[0]: config.input_activation, **{arg: shared for arg in inputs[1:]}},
            output_qspec=shared,
            _annotated=True,
        )


def share_pad_observers(model: GraphModule) -> None:
    """A zero pad after a quantized op keeps that op's scale (zero is representable), as litert-torch does for views."""
    for pad in model.graph.nodes:
        if pad.op != "call_function" or pad.target not in PADS or _is_annotated(pad):
            continue
        source = pad.args[0]
        annotation = source.meta.get("quantization_annotation") if isinstance(source, Node) else None
        if annotation is None or annotation.output_qspec is None or not _pads_with_zeros(pad):
            continue
        shared = SharedQuantizationSpec(source)
        pad.meta["quantization_annotation"] = QuantizationAnnotation(input_qspec_map={source: shared}, output_qspec=shared, _annotated=True)


def _pads_with_zeros(pad: Node) -> bool:
    """aten.pad(x, pad, mode="constant", value=None) or aten.constant_pad_nd(x, pad, value=0)."""
    if pad.target == _aten.constant_pad_nd.default:
        value = pad.args[2] if len(pad.args) > 2 else pad.kwargs.get("value", 0)
        return value in (0, 0.0)
    mode = pad.args[2] if len(pad.args) > 2 else pad.kwargs.get("mode", "constant")
    value = pad.args[3] if len(pad.args) > 3 else pad.kwargs.get("value")
    return mode == "constant" and value in (None, 0, 0.0)


def record_concat_spans(model: GraphModule, batches) -> None:
    """node.meta[SPAN]: the (min, max) over `batches` (tuples of input tensors) of each tensor a concatenation reads, in
    float; `float_uneven_concats` decides from them when the quantizer annotates."""
    read = {arg for node in model.graph.nodes if node.target in CATS for arg in node.args[0] if isinstance(arg, Node)}
    if not read:
        return
    spans: dict = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            value = super().run_node(n)
            if n in read:  # at once: an in-place op after it (SiLU(inplace=True)) overwrites the tensor
                low, high = spans.get(n, (math.inf, -math.inf))
                spans[n] = (min(low, float(value.min())), max(high, float(value.max())))
            return value

    with torch.no_grad():
        for tensors in batches:
            Recorder(model).run(*tensors)
    for node, span in spans.items():
        node.meta[SPAN] = span


def float_uneven_concats(model: GraphModule) -> None:
    """A concatenation whose inputs' calibrated spans differ a lot runs in float, where each of its inputs can be float
    too: the op computing it (through views) has no weights and feeds only the concatenation. That op then reads int8 and
    writes float.

    One scale for all the inputs, sized for the widest (the stock quantizers' `cat`, `annotate_concats`), left a
    detector's class probabilities (0..0.96) beside its decoded boxes in input pixels (-4..264) one level of 256: every
    probability rounded to 0 or about 1 (zoo:fashion-det on ExecuTorch: mAP@0.5 0.74 against fp32's detections). An input
    narrower than 1/UNEVEN of the concatenation's span keeps fewer than 32 levels. The inputs must go float as well:
    LiteRT's converter quantizes a concatenation that reads an int8 tensor (through views too) with the scale of its
    last input, whatever the annotation, so a float one there would be worse than the shared scale, which stays. The
    boxes then keep their float resolution, as an ONNX model's outputs do."""
    for cat in model.graph.nodes:
        if cat.op != "call_function" or cat.target not in CATS or not _is_annotated(cat):
            continue
        inputs = list(dict.fromkeys(cat.args[0]))
        spans = [arg.meta.get(SPAN) for arg in inputs]
        if None in spans:
            continue
        whole = max(high for _, high in spans) - min(low for low, _ in spans)
        if whole <= 0 or min(high - low for low, high in spans) * UNEVEN >= whole:
            continue
        paths = [_float_path(arg, cat) for arg in inputs]
        if None in paths:
            continue
        cat.meta.pop("quantization_annotation")
        _unannotate_sharing(model, cat)
        for *views, source in paths:
            for node in views:
                node.meta.pop("quantization_annotation", None)
            if (annotation := source.meta.get("quantization_annotation")) is not None:
                annotation.output_qspec = None
            for node in (*views, source):
                _unannotate_sharing(model, node)


def _float_path(node, reader: Node) -> list[Node] | None:
    """The ops from `node` back through views (ops sharing their input's scale) to the op that computes it, when each
    feeds only the next and that op has no weights; else None (XNNPACK takes no quantized conv with a float output)."""
    path = []
    while isinstance(node, Node) and node.op == "call_function" and set(node.users) == {reader}:
        path.append(node)
        annotation = node.meta.get("quantization_annotation")
        if annotation is None or not isinstance(annotation.output_qspec, SharedQuantizationSpec):
            return None if node.target in WEIGHTED else path
        reader, node = node, node.args[0]
    return None


def _unannotate_sharing(model: GraphModule, node: Node) -> None:
    """Drop the annotations of the ops that share `node`'s scale (a SharedQuantizationSpec of its output or of an edge
    into it), and of the ops that share theirs."""
    for other in model.graph.nodes:
        annotation = other.meta.get("quantization_annotation")
        specs = [annotation.output_qspec, *annotation.input_qspec_map.values()] if annotation is not None else []
        if other is not node and any(_shares_with(spec, node) for spec in specs):
            other.meta.pop("quantization_annotation")
            _unannotate_sharing(model, other)


def _shares_with(spec, node: Node) -> bool:
    if not isinstance(spec, SharedQuantizationSpec):
        return False
    source = spec.edge_or_node
    return source is node or (isinstance(source, tuple) and node in source)


def fix_bounded_outputs(model: GraphModule, config) -> None:
    """Each softmax and sigmoid whose output an annotated op reads in int8 gets the config's fixed qparams, where the
    backend declares them (litert-torch: scale 1/256, zero point -128; TFLite's int8 SOFTMAX and LOGISTIC kernels refuse
    any other output scale). litert-torch fixes them only after an op it annotated: a detector's box-distribution
    softmax read a view of a concatenation left float and took its reader's observer (scale 0.0035), and the .tflite
    failed to load ("SOFTMAX failed to prepare")."""
    fixed = getattr(config, "fixed_qparams", None)
    if fixed is None:
        return
    for node in model.graph.nodes:
        if node.op != "call_function" or node.target not in BOUNDED or _is_annotated(node):
            continue
        readers = [user.meta.get("quantization_annotation") for user in node.users]
        if any(r is not None and node in r.input_qspec_map for r in readers):
            node.meta["quantization_annotation"] = QuantizationAnnotation(output_qspec=fixed, _annotated=True)


def fold_zero_pads(model: GraphModule) -> int:
    """Fold each symmetric zero pad (nn.ZeroPad2d) into the padding of the 2-D convolutions that read it; the count.

    Exact (a convolution's own padding is zeros). litert-torch folds these pads itself in fp32, but not once quantize/
    dequantize pairs sit between pad and conv: each pad then stays in NCHW with a TRANSPOSE either side. A pad
    whose two sides differ (TensorFlow's SAME at stride 2) has no PyTorch conv equivalent and stays.
    """
    folded = 0
    for pad in list(model.graph.nodes):
        if pad.op != "call_function" or pad.target not in PADS or not _pads_with_zeros(pad):
            continue
        widths = list(pad.args[1])
        if len(widths) != 4:
            continue
        left, right, top, bottom = widths
        if left != right or top != bottom or min(left, top) < 0:
            continue
        if not pad.users or not all(_conv2d_reading(conv, pad) for conv in pad.users):
            continue
        for conv in list(pad.users):
            _add_conv_padding(conv, top, left)
        pad.replace_all_uses_with(pad.args[0])
        model.graph.erase_node(pad)
        folded += 1
    if folded:
        model.graph.lint()
        model.recompile()
    return folded


def _conv2d_reading(conv: Node, pad: Node) -> bool:
    """A non-transposed 2-D conv with explicit integer padding whose input (only) is `pad`."""
    if conv.op != "call_function" or conv.args[0] is not pad or pad in conv.args[1:] or conv.kwargs:
        return False
    if conv.target == _aten.conv2d.default:
        padding = conv.args[4] if len(conv.args) > 4 else [0, 0]
    elif conv.target == _aten.convolution.default:
        padding = conv.args[4] if not conv.args[6] else None
    else:
        return False
    return isinstance(padding, (list, tuple)) and len(padding) in (1, 2) and all(isinstance(p, int) for p in padding)


def _add_conv_padding(conv: Node, top: int, left: int) -> None:
    args = list(conv.args)
    if conv.target == _aten.conv2d.default:
        args += [None, [1, 1], [0, 0], [1, 1], 1][len(args) - 2 :]  # defaults: bias, stride, padding, dilation, groups
    padding = list(args[4]) * (2 if len(args[4]) == 1 else 1)
    args[4] = [padding[0] + top, padding[1] + left]
    conv.args = tuple(args)


def fit_weight_rounding(model: GraphModule, batches) -> dict:
    """backends.onnx.int8_rounding on a converted PT2E model: each conv/linear weight that goes through a quantize/dequantize
    pair is replaced by its fitted codes times its scale (the quantize op then reproduces those codes) and its float
    bias absorbs the mean output error. `batches`: tuples of input tensors; the statistics come from the model's own
    (quantized) activations. Returns the provenance entry."""
    import numpy as np

    from edgekit.backends.onnx import int8_rounding as rounding

    layers = [layer for node in model.graph.nodes if (layer := _QuantizedLayer.of(model, node)) is not None]
    stats = _layer_statistics(model, layers, batches)
    before = after = 0.0
    for layer in layers:
        s = stats.get(layer.node)
        w2, s2, z2, bounds = layer.rows()
        codes = np.clip(np.round(w2 / s2) + z2, *bounds)
        if s is None or s.rows < 4 * w2.shape[1]:  # fewer input rows than that would fit the codes to the samples
            continue
        best = rounding.best_codes(w2, codes, s2, z2, s.gram, bounds)
        before += rounding.output_error(w2, codes, s2, z2, s.gram)
        after += rounding.output_error(w2, best, s2, z2, s.gram)
        layer.set_weight((best - z2) * s2, s.mean)
    return {
        "method": "greedy data-aware rounding of int8 weight codes (output error d G d^T) + bias correction",
        "samples": min(rounding.SAMPLES, len(batches)),
        "layers": len(layers),
        "output_error_vs_round_to_nearest": round(after / before, 4) if before else None,
    }


class _QuantizedLayer:
    """A conv2d/linear whose weight is dequantize(quantize(float attribute)), per channel (axis 0) or per tensor."""

    def __init__(self, model: GraphModule, node: Node, quantize: Node, conv: bool) -> None:
        self.model, self.node, self.quantize, self.conv = model, node, quantize, conv

    @classmethod
    def of(cls, model: GraphModule, node: Node):
        conv = node.target == _aten.conv2d.default
        if node.op != "call_function" or not (conv or node.target == _aten.linear.default) or len(node.args) < 2:
            return None
        dq = node.args[1]
        pairs = _weight_quantize_pairs()
        if not isinstance(dq, Node) or dq.target not in pairs:
            return None
        quantize = dq.args[0]
        if not isinstance(quantize, Node) or quantize.target != pairs[dq.target] or quantize.args[0].op != "get_attr":
            return None
        return cls(model, node, quantize, conv)

    def _attr(self, node: Node) -> torch.Tensor:
        return _attribute(self.model, node)

    def _value(self, arg):
        """A scale or zero point: an attribute (per channel) or a number in the graph (per tensor)."""
        return self._attr(arg).double().numpy() if isinstance(arg, Node) else float(arg)

    def rows(self):
        import numpy as np

        per_channel = self.quantize.target == torch.ops.quantized_decomposed.quantize_per_channel.default
        weight, scale, zero = self.quantize.args[:3]
        low, high = self.quantize.args[4:6] if per_channel else self.quantize.args[3:5]
        assert not per_channel or self.quantize.args[3] == 0  # the output-channel axis
        w = self._attr(weight).detach().double().numpy()
        w2 = w.reshape(len(w), -1)
        s2, z2 = (np.broadcast_to(np.reshape(self._value(v), (-1, 1)), (len(w2), 1)) for v in (scale, zero))
        return w2, s2, z2, (low, high)

    def set_weight(self, rows, mean) -> None:
        import numpy as np

        weight = self._attr(self.quantize.args[0])
        fitted = torch.from_numpy(np.ascontiguousarray(rows).reshape(weight.shape)).to(weight.dtype)
        error = fitted - weight.detach()
        with torch.no_grad():
            weight.copy_(fitted)
        bias = self.node.args[2] if len(self.node.args) > 2 else None
        if not isinstance(bias, Node) or bias.op != "get_attr":
            return
        x = torch.from_numpy(np.asarray(mean, np.float32))[None]
        if self.conv:
            stride, padding, dilation, groups = _conv2d_params(self.node)
            shift = torch.nn.functional.conv2d(x, error, None, stride, padding, dilation, groups).mean((0, 2, 3))
        else:
            shift = x.reshape(-1, x.shape[-1]).mean(0) @ error.T
        with torch.no_grad():
            self._attr(bias).sub_(shift.to(self._attr(bias).dtype))


def _attribute(model: GraphModule, node: Node) -> torch.Tensor:
    """The tensor a get_attr node reads."""
    owner, _, name = node.target.rpartition(".")
    return getattr(model.get_submodule(owner) if owner else model, name)


def _weight_quantize_pairs() -> dict:
    """{dequantize op: the quantize op it undoes} for weights."""
    qd = torch.ops.quantized_decomposed
    return {
        qd.dequantize_per_channel.default: qd.quantize_per_channel.default,
        qd.dequantize_per_tensor.default: qd.quantize_per_tensor.default,
    }


def _layer_statistics(model: GraphModule, layers: list[_QuantizedLayer], batches) -> dict:
    """{conv/linear node: int8_rounding.LayerStats} of its input over the first SAMPLES batches."""
    import numpy as np
    from onnx import helper

    from edgekit.backends.onnx import int8_rounding as rounding

    by_node = {layer.node: layer for layer in layers}
    seen: dict = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            if n in by_node:
                args, _ = self.fetch_args_kwargs_from_env(n)
                seen[n] = args[0].detach()
            return super().run_node(n)

    rng = np.random.default_rng(0)
    stats: dict = {}
    taken = 0
    for inputs in batches[: rounding.SAMPLES]:
        with torch.no_grad():
            Recorder(model).run(*inputs)
        taken += len(inputs[0])
        for node, x in seen.items():
            layer = by_node[node]
            weight = layer._attr(layer.quantize.args[0])
            gram, mean_sum, rows = rounding._moments(
                _onnx_like(node, layer.conv, helper), x.float(), tuple(weight.shape), rounding.POSITIONS, rng
            )
            if node in stats:
                s = stats[node]
                s.gram, s.mean, s.rows = s.gram + gram, s.mean + mean_sum, s.rows + rows
            else:
                stats[node] = rounding.LayerStats(gram, mean_sum, rows)
    for s in stats.values():
        s.gram, s.mean = s.gram / max(s.rows, 1), s.mean / max(taken, 1)
    return stats


def _onnx_like(node: Node, conv: bool, helper):
    """The layer described as the ONNX node int8_rounding's statistics read (op type, pads, strides, groups)."""
    if not conv:
        return helper.make_node("Gemm", ["x", "w"], ["y"])
    stride, padding, dilation, groups = _conv2d_params(node)
    top, left = padding
    return helper.make_node(
        "Conv", ["x", "w"], ["y"], pads=[top, left, top, left], strides=list(stride), dilations=list(dilation), group=groups
    )


def _conv2d_params(conv: Node) -> tuple:
    """aten.conv2d's (stride, padding, dilation, groups), defaults filled in."""
    given = list(conv.args[3:7])
    return tuple(given + [[1, 1], [0, 0], [1, 1], 1][len(given) :])


def float_output_means(model: GraphModule, batches) -> dict:
    """{conv/linear node: per-channel mean of its output} in float: the converted graph run with every quantize and
    dequantize as identity (the fp32 model, its zero pads folded; call it before fit_weight_rounding edits weights)."""
    layers = [layer.node for node in model.graph.nodes if (layer := _QuantizedLayer.of(model, node)) is not None]
    means = {}
    _walk(
        model,
        batches[:SAMPLES_FOR_MEANS],
        set(layers),
        lambda node, outs: means.__setitem__(node, _channel_mean(node, outs)),
        quantized=False,
    )
    return means


def correct_biases(model: GraphModule, batches, float_means: dict) -> dict:
    """Empirical bias correction (Nagel et al. 2019, as AIMET does it): layer by layer in graph order, the quantized
    model's own mean output of each conv/linear on the calibration samples is brought to the float model's by its bias,
    so each layer is corrected for the errors of all the layers before it. Returns the provenance entry."""
    shifts = []

    def correct(node, outs):
        bias = node.args[2] if len(node.args) > 2 else None
        if not isinstance(bias, Node) or bias.op != "get_attr" or node not in float_means:
            return
        shift = _channel_mean(node, outs) - float_means[node]
        value = _attribute(model, bias)
        with torch.no_grad():
            value.sub_(shift.to(value.dtype))
        view = [1] * outs[0].dim()
        view[_channel_axis(node, outs[0].dim())] = -1
        outs[:] = [o - shift.reshape(view).to(o.dtype) for o in outs]  # downstream layers see the corrected output
        shifts.append(float(shift.abs().mean()))

    _walk(model, batches[:SAMPLES_FOR_MEANS], set(float_means), correct, quantized=True)
    return {
        "method": "empirical bias correction through the quantized model's own activations, layer by layer",
        "samples": min(SAMPLES_FOR_MEANS, len(batches)),
        "layers": len(shifts),
        "mean_abs_shift": round(sum(shifts) / len(shifts), 6) if shifts else None,
    }


SAMPLES_FOR_MEANS = 32  # calibration samples the per-channel output means are taken over


def _channel_mean(node: Node, outs: list) -> torch.Tensor:
    """Per-channel mean over samples and positions of conv (N, C, H, W) or linear (..., C) outputs."""
    x = torch.cat(outs)
    axis = _channel_axis(node, x.dim())
    return x.double().mean(dim=[d for d in range(x.dim()) if d != axis])


def _channel_axis(node: Node, dims: int) -> int:
    """Where a layer's output channels are: axis 1 of a convolution's output, the last axis of a linear's (a
    transformer's linear outputs (N, tokens, C))."""
    return 1 if node.target in CONVS else dims - 1


def _walk(model: GraphModule, batches, layers: set, visit, quantized: bool) -> None:
    """Run the graph node by node on all `batches` at once (a list of outputs per node), calling visit(node, outputs)
    after each node in `layers`; visit may edit the outputs in place. quantized=False: quantize/dequantize as identity."""
    qd = torch.ops.quantized_decomposed
    identity = (
        set()
        if quantized
        else {
            qd.quantize_per_tensor.default,
            qd.dequantize_per_tensor.default,
            qd.quantize_per_channel.default,
            qd.dequantize_per_channel.default,
        }
    )
    last_use = {}
    for node in model.graph.nodes:
        for source in node.all_input_nodes:
            last_use[source] = node
    interpreter = torch.fx.Interpreter(model)
    env: dict = {}
    count = len(batches)
    inputs = iter(range(len(batches[0])))
    with torch.no_grad():
        for node in model.graph.nodes:
            if node.op == "placeholder":
                i = next(inputs)
                env[node] = [b[i] for b in batches]
            elif node.op == "get_attr":
                env[node] = _Constant(interpreter.fetch_attr(node.target))
            elif node.op == "call_function":
                batched = any(isinstance(env[n], list) for n in node.all_input_nodes)
                if node.target in identity:
                    env[node] = env[node.args[0]]
                elif not batched:
                    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: env[n].value)
                    env[node] = _Constant(node.target(*args, **kwargs))
                else:
                    env[node] = [_call(node, env, k) for k in range(count)]
                if node in layers:
                    visit(node, env[node])
            elif node.op == "output":
                return
            for source in node.all_input_nodes:
                if last_use.get(source) is node:
                    env.pop(source, None)


class _Constant:
    """A value computed from attributes only (a weight, its quantize/dequantize): the same for every sample."""

    def __init__(self, value) -> None:
        self.value = value


def _call(node: Node, env: dict, k: int):
    pick = lambda n: env[n][k] if isinstance(env[n], list) else env[n].value  # noqa: E731
    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), pick)
    return node.target(*args, **kwargs)
