"""PT2E patterns for mobile CNNs, whatever the backend's quantizer (litert-torch's for LiteRT, XNNPACK's for ExecuTorch):
what the stock PT2E quantizers miss on EfficientNet-Lite / MobileNet, added around their own annotation by
`MobilePatterns` (backends.torch.pt2e runs them).

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
- a detector's box decoding (the box bins' softmax, their expectation in a [1, K, 1, 1] conv, the weightless ops after
  it) runs in float (`float_box_decoding`; backends.onnx.box_decoding says why).
- a constant zero pad shares its input's observer (zeros are inside any ReLU range), so no requantize after it; a
  symmetric one is folded into the convolution that reads it (`fold_zero_pads`).
- `keep_float` modules left unannotated, with the ops that compute their inputs (`unannotate_modules`).

The quantizer configs of litert-torch and XNNPACK are both dataclasses with input_activation, output_activation,
weight and bias specs: that is all this module reads. Import lazily (it imports torch and torchao).
"""

from __future__ import annotations

import math

import torch
from torch.fx import GraphModule, Node
from torchao.quantization.pt2e.quantizer import QuantizationAnnotation, SharedQuantizationSpec

from edgekit.quantization.box_decoding import CONV, END, SOFTMAX, Graph
from edgekit.quantization.box_decoding import LAYOUT as LAYOUT_OP
from edgekit.quantization.box_decoding import WEIGHTED as WEIGHTED_OP
from edgekit.quantization.box_decoding import box_decoding as decoding_nodes

_aten = torch.ops.aten
CONVS = (_aten.conv1d.default, _aten.conv2d.default, _aten.convolution.default)
CLAMPS = (_aten.hardtanh.default, _aten.hardtanh_.default)  # nn.ReLU6 and F.hardtanh
ADDS = (_aten.add.Tensor, _aten.add_.Tensor)
PADS = (_aten.pad.default, _aten.constant_pad_nd.default)
CATS = (_aten.cat.default, _aten.concat.default)
SOFTMAXES = (_aten._softmax.default, _aten.softmax.int)
BOUNDED = (_aten.sigmoid.default, *SOFTMAXES)  # outputs in [0, 1] whatever the input
LAYOUT = (
    _aten.view.default,
    _aten.reshape.default,
    _aten.transpose.int,
    _aten.permute.default,
    _aten.squeeze.dim,
    _aten.unsqueeze.default,
)  # move values, compute none
BOX_DECODING = "edgekit_box_decoding"  # node.meta key: the op is a detector's box decoding, left float (float_box_decoding)
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
        float_box_decoding(model)


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


def float_box_decoding(model: GraphModule) -> None:
    """A detector's box decoding stays float (quantization.box_decoding: the rule, and why): each softmax read (through
    views) by a conv with a [1, K, 1, 1] kernel, that conv and the weightless ops downstream of it. In int8 they moved
    zoo:fashion-det's boxes by about a pixel: mAP@0.5:0.95 0.788 on LiteRT and 0.781 on ExecuTorch, 0.835 in fp32."""
    graph = Graph(nodes=list(model.graph.nodes), readers=lambda node: list(node.users), kind=_kind, kernel=_kernel, key=lambda node: node)
    for node in decoding_nodes(graph):
        node.meta.pop("quantization_annotation", None)
        node.meta[BOX_DECODING] = True
        _unannotate_sharing(model, node)


def _kind(node: Node) -> str:
    if node.op != "call_function":
        return END
    kinds = ((SOFTMAXES, SOFTMAX), (CONVS, CONV), (WEIGHTED, WEIGHTED_OP), (LAYOUT, LAYOUT_OP))
    return next((kind for targets, kind in kinds if node.target in targets), "")


def _kernel(conv: Node) -> tuple | None:
    """A conv's weight shape, from its traced value."""
    weight = conv.args[1] if len(conv.args) > 1 else None
    return tuple(weight.meta["val"].shape) if isinstance(weight, Node) and "val" in weight.meta else None


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
