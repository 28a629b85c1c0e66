"""litert-torch's PT2E quantizer, with the patterns it misses on mobile CNNs (EfficientNet-Lite, MobileNet):

- conv + ReLU6 (aten.hardtanh) as one pattern, observed after the clamp. litert-torch fuses conv + ReLU only, so a
  ReLU6 shared the conv's pre-clamp observer: EfficientNet-Lite0's stem got a 0.72 scale, ~8 levels for its 0..6 output.
- a residual add written `x + y` in the model: litert-torch finds adds by their source function, which a non-strict
  torch.export does not record, so those adds stayed float (DEQUANTIZE, float ADD, QUANTIZE in the .tflite).
- a constant pad shares its input's observer (zeros are inside any ReLU range), so no requantize after it.

Built on litert-torch's public pieces: a PT2EQuantizer subclass whose annotate() adds these before and after the
stock patterns. Import lazily (it imports torch and litert-torch).
"""

from __future__ import annotations

import torch
from litert_torch.quantize.pt2e_quantizer import PT2EQuantizer
from litert_torch.quantize.pt2e_quantizer_utils import (
    get_bias_qspec,
    get_input_act_qspec,
    get_output_act_qspec,
    get_weight_qspec,
)
from torch.fx import GraphModule, Node
from torchao.quantization.pt2e.quantizer import QuantizationAnnotation, SharedQuantizationSpec

_aten = torch.ops.aten
CONVS = (_aten.conv1d.default, _aten.conv2d.default, _aten.convolution.default)
CLAMPS = (_aten.hardtanh.default, _aten.hardtanh_.default)  # nn.ReLU6 and F.hardtanh
ADDS = (_aten.add.Tensor, _aten.add_.Tensor)
PADS = (_aten.pad.default, _aten.constant_pad_nd.default)


class LiteRTQuantizer(PT2EQuantizer):
    """PT2EQuantizer plus conv+ReLU6, activation adds and pad sharing (static int8 with a global config).

    `keep_float`: module names (as `named_modules()` gives them) whose ops stay float (accuracy control)."""

    keep_float: tuple[str, ...] = ()

    def annotate(self, model: GraphModule) -> GraphModule:
        config = self.global_config
        static = config is not None and config.input_activation is not None
        if static:
            annotate_conv_clamp(model, config)
        model = super().annotate(model)
        if static:
            annotate_activation_adds(model, config)
            share_pad_observers(model)
        unannotate_modules(model, self.keep_float)
        return model


def unannotate_modules(model: GraphModule, modules: tuple[str, ...]) -> None:
    """Drop the quantization annotations of the ops that `modules` (named_modules() names) own: they run in float,
    reading the dequantized output of the op before them."""
    for node in model.graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if stack and list(stack.values())[-1][0] in modules:
            node.meta.pop("quantization_annotation", None)


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
        inputs = {conv.args[0]: get_input_act_qspec(config), conv.args[1]: get_weight_qspec(config)}
        if bias is not None:
            inputs[bias] = get_bias_qspec(config)
        conv.meta["quantization_annotation"] = QuantizationAnnotation(input_qspec_map=inputs, _annotated=True)
        clamp.meta["quantization_annotation"] = QuantizationAnnotation(output_qspec=get_output_act_qspec(config), _annotated=True)
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
            input_qspec_map={left: get_input_act_qspec(config), right: get_input_act_qspec(config)},
            output_qspec=get_output_act_qspec(config),
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
    """converters.int8_rounding on a converted PT2E model: each conv/linear weight that goes through a quantize/dequantize
    pair is replaced by its fitted codes times its scale (the quantize op then reproduces those codes) and its float
    bias absorbs the mean output error. `batches`: tuples of input tensors; the statistics come from the model's own
    (quantized) activations. Returns the provenance entry."""
    import numpy as np

    from edgekit.converters import int8_rounding as rounding

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
    """A conv2d/linear whose weight is dequantize_per_channel(quantize_per_channel(float attribute))."""

    def __init__(self, model: GraphModule, node: Node, quantize: Node, conv: bool) -> None:
        self.model, self.node, self.quantize, self.conv = model, node, quantize, conv

    @classmethod
    def of(cls, model: GraphModule, node: Node):
        conv = node.target == _aten.conv2d.default
        if node.op != "call_function" or not (conv or node.target == _aten.linear.default) or len(node.args) < 2:
            return None
        dq = node.args[1]
        qd = torch.ops.quantized_decomposed
        if not isinstance(dq, Node) or dq.target != qd.dequantize_per_channel.default:
            return None
        quantize = dq.args[0]
        if not isinstance(quantize, Node) or quantize.target != qd.quantize_per_channel.default or quantize.args[0].op != "get_attr":
            return None
        return cls(model, node, quantize, conv)

    def _attr(self, node: Node) -> torch.Tensor:
        owner, _, name = node.target.rpartition(".")
        return getattr(self.model.get_submodule(owner) if owner else self.model, name)

    def rows(self):
        import numpy as np

        weight, scale, zero, axis, low, high = (self.quantize.args[i] for i in range(6))
        w = self._attr(weight).detach().double().numpy()
        assert axis == 0
        w2 = w.reshape(len(w), -1)
        s2 = self._attr(scale).double().numpy().reshape(-1, 1)
        z2 = self._attr(zero).double().numpy().reshape(-1, 1)
        return w2, np.broadcast_to(s2, (len(w2), 1)), np.broadcast_to(z2, (len(w2), 1)), (low, high)

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


def _layer_statistics(model: GraphModule, layers: list[_QuantizedLayer], batches) -> dict:
    """{conv/linear node: int8_rounding.LayerStats} of its input over the first SAMPLES batches."""
    import numpy as np
    from onnx import helper

    from edgekit.converters import int8_rounding as rounding

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
