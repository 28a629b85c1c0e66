"""Activations of a static int8 QDQ model returned to float, and what rounding each one costs.

An activation's QuantizeLinear -> DequantizeLinear pair is replaced by a Clip to the pair's quantization range:
the same clamp (a ReLU6 that ONNX Runtime fused into its Conv's range keeps it), without the 8-bit rounding. The
ops either side of it then run in float. Accuracy control (quantization.accuracy) returns such activations
to float beside weight layers, ranked by the same measure (quantization.sensitivity): 1 - the mean cosine of the
outputs when only that one tensor is rounded to its int8 grid, everything else float, against the float model
with that tensor clamped to the same range (the clamp stays in float, so only the rounding counts).
"""

from __future__ import annotations

import numpy as np

from edgekit.quantization.accuracy import ACTIVATION
from edgekit.quantization.sensitivity import LayerSensitivity, output_loss


def activation_pairs(model) -> list[tuple]:
    """(QuantizeLinear, DequantizeLinear) pairs on activations (the Q reads a computed tensor, not an initializer)."""
    initializers = {i.name for i in model.graph.initializer}
    producers = {output: node for node in model.graph.node for output in node.output}
    pairs = []
    for node in model.graph.node:
        quantize = producers.get(node.input[0]) if node.op_type == "DequantizeLinear" else None
        if quantize is not None and quantize.op_type == "QuantizeLinear" and quantize.input[0] not in initializers:
            pairs.append((quantize, node))
    return pairs


def quantized_range(graph, quantize) -> tuple[float, float]:
    """The float interval a QuantizeLinear's scale and zero-point (initializers of `graph`) can represent."""
    from onnx import numpy_helper

    inits = {i.name: i for i in graph.initializer}
    scale, zero = (numpy_helper.to_array(inits[name]) for name in quantize.input[1:3])
    bounds = np.iinfo(zero.dtype)
    return tuple(float(np.float32((float(code) - float(zero)) * float(scale))) for code in (bounds.min, bounds.max))  # as stored


def unrounded(model, tensors: list[str]):
    """A copy of the QDQ `model` (ModelProto) with the activations `tensors` (the Q's input names) in float: each
    of their DequantizeLinear replaced, in place, by a Clip of the tensor to its quantization range. A name with
    no pair in `model` (already float there) is passed over."""
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    wanted = set(tensors)
    nodes = list(copy.graph.node)
    for quantize, dequantize in activation_pairs(model):
        if quantize.input[0] not in wanted:
            continue
        clip, bounds = clip_node(
            quantize.input[0], quantized_range(model.graph, quantize), dequantize.output[0], f"{dequantize.output[0]}_unrounded"
        )
        copy.graph.initializer.extend(bounds)
        index = next(i for i, n in enumerate(nodes) if n.output[0] == dequantize.output[0])
        nodes[index] = clip
    read = {name for node in nodes for name in node.input}
    del copy.graph.node[:]  # the Clip takes its DQ's place, so graph order holds; a Q nothing reads any more goes
    copy.graph.node.extend(n for n in nodes if n.op_type != "QuantizeLinear" or n.output[0] in read)
    return copy


def activation_sensitivity(pre, int8, probe, threads: int | None = None) -> list[LayerSensitivity]:
    """Each activation of the QDQ model `int8` (ModelProto) that the float model `pre` (ModelProto) also computes or
    takes as input, with what its rounding alone costs, most sensitive first: 1 - the mean cosine, on the `probe` samples, of `pre`
    with only that tensor rounded to its int8 grid against `pre` with it clamped to the same range. The clamp stays
    when the activation returns to float (`unrounded`), so the ranking leaves it out."""
    from edgekit.backends.onnx.sensitivity import outputs

    inputs = {i.name for i in pre.graph.input} - {i.name for i in pre.graph.initializer}
    computed = ({output for node in pre.graph.node for output in node.output} | inputs) - {o.name for o in pre.graph.output}
    measured = {}
    for quantize, _ in activation_pairs(int8):
        tensor = quantize.input[0]
        if tensor in computed and tensor not in measured:
            clamped, rounded = (
                outputs(_through(pre, int8, quantize, rounding).SerializeToString(), probe, threads) for rounding in (False, True)
            )
            measured[tensor] = LayerSensitivity(tensor, ACTIVATION, 0, output_loss(clamped, rounded))
    return sorted(measured.values(), key=lambda s: s.loss, reverse=True)


def _through(pre, int8, quantize, rounding: bool):
    """A copy of the float `pre` in which the tensor `quantize` reads (a graph input or a computed tensor, not a
    graph output) goes, before its consumers, through that Q and a DequantizeLinear (`rounding`) or a Clip to the same range."""
    import onnx
    from onnx import helper

    copy = onnx.ModelProto()
    copy.CopyFrom(pre)
    tensor, scale, zero = quantize.input[:3]
    through = f"{tensor}_through"
    for node in copy.graph.node:
        node.input[:] = [through if name == tensor else name for name in node.input]
    if rounding:
        inits = {i.name: i for i in int8.graph.initializer}
        copy.graph.initializer.extend(inits[name] for name in (scale, zero))
        added = [
            helper.make_node("QuantizeLinear", [tensor, scale, zero], [f"{tensor}_q"], name=f"{tensor}_q"),
            helper.make_node("DequantizeLinear", [f"{tensor}_q", scale, zero], [through], name=f"{tensor}_dq"),
        ]
    else:
        clip, bounds = clip_node(tensor, quantized_range(int8.graph, quantize), through, through)
        copy.graph.initializer.extend(bounds)
        added = [clip]
    producer = next((i for i, node in enumerate(copy.graph.node) if tensor in node.output), -1)  # -1: a graph input
    for offset, node in enumerate(added, 1):
        copy.graph.node.insert(producer + offset, node)
    return copy


def clip_node(tensor: str, bounds: tuple[float, float], output: str, name: str) -> tuple:
    """(a Clip node `name` of `tensor` to `bounds` writing `output`, the two scalar initializers it reads)."""
    from onnx import helper, numpy_helper

    limits = [
        numpy_helper.from_array(np.array(value, np.float32), f"{name}_{end}") for value, end in zip(bounds, ("low", "high"), strict=True)
    ]
    return helper.make_node("Clip", [tensor, limits[0].name, limits[1].name], [output], name=name), limits
