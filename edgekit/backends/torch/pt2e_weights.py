"""A converted PT2E model's weights fitted to its own activations, whatever the backend's quantizer: the weight codes
fitted (`fit_weight_rounding`, edgekit.quantization.rounding's algorithm), then each bias moved so the layer's mean
output on the calibration samples is the float model's, layer by layer through the quantized model
(`correct_biases`). Import lazily (it imports torch).
"""

from __future__ import annotations

import numpy as np
import torch
from torch.fx import GraphModule, Node

from edgekit.backends.torch.layer_inputs import input_moments
from edgekit.backends.torch.pt2e_patterns import CONVS
from edgekit.quantization import rounding

_aten = torch.ops.aten


def fit_weight_rounding(model: GraphModule, batches) -> dict:
    """edgekit.quantization.rounding on a converted PT2E model: each conv/linear weight that goes through a quantize/dequantize
    pair is replaced by its fitted codes times its scale (the quantize op then reproduces those codes) and its float
    bias absorbs the mean output error. `batches`: tuples of input tensors; the statistics come from the model's own
    (quantized) activations. Returns the provenance entry."""
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
    """{conv/linear node: rounding.LayerStats} of its input over the first SAMPLES batches."""
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
            gram, mean_sum, rows = input_moments(x.float(), tuple(weight.shape), _geometry(node, layer.conv), rounding.POSITIONS, rng)
            if node in stats:
                s = stats[node]
                s.gram, s.mean, s.rows = s.gram + gram, s.mean + mean_sum, s.rows + rows
            else:
                stats[node] = rounding.LayerStats(gram, mean_sum, rows)
    for s in stats.values():
        s.gram, s.mean = s.gram / max(s.rows, 1), s.mean / max(taken, 1)
    return stats


def _geometry(node: Node, conv: bool) -> dict | None:
    """A conv2d's pads (top, left, bottom, right), strides, dilations and groups, as input_moments reads them; None for
    a linear."""
    if not conv:
        return None
    stride, padding, dilation, groups = _conv2d_params(node)
    top, left = padding
    return {"pads": (top, left, top, left), "strides": list(stride), "dilations": list(dilation), "groups": groups}


def _conv2d_params(conv: Node) -> tuple:
    """aten.conv2d's (stride, padding, dilation, groups), defaults filled in."""
    given = list(conv.args[3:7])
    return tuple(given + [[1, 1], [0, 0], [1, 1], 1][len(given) :])


def quantized_layers(model: GraphModule) -> list[Node]:
    """The conv/linear nodes of a converted PT2E model whose weights go through a quantize/dequantize pair."""
    return [layer.node for node in model.graph.nodes if (layer := _QuantizedLayer.of(model, node)) is not None]


def float_output_means(model: GraphModule, batches) -> dict:
    """{conv/linear node: per-channel mean of its output} in float: the converted graph run with every quantize and
    dequantize as identity (the fp32 model, its zero pads folded; call it before fit_weight_rounding edits weights)."""
    layers = quantized_layers(model)
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
