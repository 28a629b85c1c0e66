"""Per-channel int8 ranges around depthwise convs, in the per-tensor int8 that ONNX Runtime runs.

A depthwise conv reads each input channel alone. Where the convs around it fold BatchNorms whose channels differ by
orders of magnitude (PicoDet's LCNet backbone: 500x between one conv's channels), one int8 range per tensor leaves the
small channels a step or two, and the depthwise weights, large exactly there, amplify that rounding: the real PicoDet
kept 0.37 of its fp32 detections on ONNX Runtime. NNCF quantizes such inputs per channel on OpenVINO (a [1, C, 1, 1]
FakeQuantize); ONNX Runtime's QLinearConv takes one scale per activation. The same ranges, in ops it runs, exact in
float:

    producer conv, its weights and bias divided by a_y   -> int8 output, its channels of equal range
    Mul(a_y) -> the elementwise ops between (HardSwish's Add, Clip, Mul, Div) -> Mul(1 / a_x), all three in float
    depthwise conv, its weights multiplied by a_x        -> int8 input, its channels of equal range

where a_y and a_x are the channels' peaks over the calibration probe, relative to the tensor's largest (floored at
FLOOR). The producer side is taken where the depthwise input is computed, through elementwise ops only, from one
Conv with constant weights; otherwise only the depthwise side is. A depthwise conv is rewritten only where per-tensor
ranges cost its output more than LOSS_DB of SQNR against per-channel ones, estimated from the channel spans and the
depthwise weights: sum_c |w_c|^2 (span_c / span_max)^2 / sum_c |w_c|^2. On 4-8 calibration samples, PicoDet's 37
depthwise convs lose 10-44 dB (34 rewritten: 0.37 -> 0.96 of its fp32 detections), PP-OCRv4's 7-22, det_small's 6-15,
EfficientNet-Lite0's 1-13 (docs/tasks.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgekit.backends.onnx.channel_order import Weights
from edgekit.backends.onnx.loader import node_attribute

LOSS_DB = 12.0  # two bits: the SQNR per-tensor ranges may cost a depthwise output before its ranges become per channel
FLOOR = 1e-3  # the smallest relative channel scale: a channel that never fires is not scaled up without bound
ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Clip", "Relu", "LeakyRelu", "HardSigmoid", "HardSwish", "Sigmoid", "Tanh", "PRelu"})


@dataclass
class Depthwise:
    """A depthwise conv, the elementwise ops that compute its input from one producer conv's output, and that conv."""

    conv: object
    chain: list = field(default_factory=list)
    producer: object | None = None


def depthwise_plans(model, weights: Weights) -> list[Depthwise]:
    """Each named depthwise Conv of `model` (group = channels, its own constant [C, 1, k, k] weights) with its way back
    to a producer. The rewrite scales weights in place, so it takes only weights no other node reads."""
    producers = {out: node for node in model.graph.node for out in node.output}
    return [_plan(node, producers, weights) for node in model.graph.node if _depthwise(node, weights)]


def _depthwise(node, weights: Weights) -> bool:
    if node.op_type != "Conv" or not node.name or not weights.own(node, 1):
        return False
    shape = weights.get(node.input[1]).shape
    return len(shape) == 4 and shape[1] == 1 and node_attribute(node, "group", 1) == shape[0] > 1


def _plan(conv, producers, weights: Weights) -> Depthwise:
    """The elementwise ancestors of the conv's input; the producer where they all start from one Conv's output."""
    chain, seen, roots, stack = [], set(), set(), [conv.input[0]]
    while stack:
        tensor = stack.pop()
        node = producers.get(tensor)
        if not tensor or tensor in weights.initializers or (node is not None and node.op_type == "Constant"):
            continue
        if node is not None and node.op_type in ELEMENTWISE:
            if id(node) not in seen:
                seen.add(id(node))
                chain.append(node)
                stack.extend(node.input)
        else:
            roots.add(tensor)  # a graph input, or another op's output
    producer = producers.get(next(iter(roots))) if len(roots) == 1 else None
    if _scalable(producer, weights) and all(node.name for node in chain):
        return Depthwise(conv, chain, producer)
    return Depthwise(conv)


def _scalable(producer, weights: Weights) -> bool:
    """A named Conv whose weights (and bias) are constants only it reads: its output channels can be scaled."""
    return (
        producer is not None
        and producer.op_type == "Conv"
        and bool(producer.name)
        and all(weights.own(producer, index) for index, name in enumerate(producer.input) if index > 0 and name)
    )


def tensors_to_measure(plans: list[Depthwise]) -> list[str]:
    """The tensors whose channel ranges the rewrite needs: each depthwise input and each producer's output."""
    names = [p.conv.input[0] for p in plans] + [p.producer.output[0] for p in plans if p.producer is not None]
    return list(dict.fromkeys(names))


def channel_peaks(batches) -> dict[str, np.ndarray]:
    """{tensor: its largest |value| per channel (axis 1)} over the batches ({name: array} each)."""
    peaks: dict[str, np.ndarray] = {}
    for values in batches:
        for name, value in values.items():
            if value.ndim != 4:
                continue
            peak = np.abs(value).max(axis=(0, 2, 3))
            peaks[name] = np.maximum(peaks[name], peak) if name in peaks else peak
    return peaks


def per_tensor_loss_db(weights: np.ndarray, peaks: np.ndarray) -> float:
    """The SQNR, in dB, that one int8 range for the whole input costs a depthwise output against one range per
    channel: each output channel's rounding noise grows by (span_max / span_c)^2, weighted by its weights' energy."""
    energy = (weights.reshape(len(peaks), -1).astype(np.float64) ** 2).sum(axis=1)
    relative = peaks / max(float(peaks.max()), 1e-30)
    kept = float((energy * relative**2).sum() / max(float(energy.sum()), 1e-30))
    return float(-10 * np.log10(max(kept, 1e-30)))


def rewrite(model, plans: list[Depthwise], peaks: dict[str, np.ndarray], weights: Weights) -> tuple[list[str], list[dict]]:
    """Rewrite `model` (a ModelProto; its weights through `weights`, written back by the caller) for the plans whose
    per-tensor loss exceeds LOSS_DB; returns the names of the nodes to keep in float (the Muls and the chains between
    them) and one note per rewritten conv."""
    keep_float, notes, scaled_producers = [], [], set()
    for plan in plans:
        source = plan.conv.input[0]
        if not _measured(peaks, source):
            continue
        loss = per_tensor_loss_db(weights.get(plan.conv.input[1]), peaks[source])
        if loss <= LOSS_DB:
            continue
        producer = plan.producer if plan.producer is not None and _measured(peaks, plan.producer.output[0]) else None
        if producer is not None:
            if producer.name not in scaled_producers:
                keep_float.append(_scale_producer(model, producer, _relative(peaks[producer.output[0]]), weights))
                scaled_producers.add(producer.name)
            keep_float += [node.name for node in plan.chain]
        keep_float.append(_scale_depthwise(model, plan.conv, _relative(peaks[source]), weights))
        notes.append({"conv": plan.conv.name, "per_tensor_loss_db": round(loss, 1), "producer": getattr(producer, "name", None)})
    return list(dict.fromkeys(keep_float)), notes


def _measured(peaks: dict[str, np.ndarray], tensor: str) -> bool:
    """Whether the tensor's channel peaks were measured (a 4-D activation) and any channel is ever non-zero."""
    return tensor in peaks and float(peaks[tensor].max()) > 0


def _relative(peaks: np.ndarray) -> np.ndarray:
    return np.maximum(peaks / max(float(peaks.max()), 1e-30), FLOOR).astype(np.float32)


def _scale_producer(model, conv, scale: np.ndarray, weights: Weights) -> str:
    """conv's weights and bias divided by `scale` per output channel, then Mul(scale) giving its old output: the
    int8 output between them has channels of equal range. Returns the Mul's name."""
    kernel = weights.get(conv.input[1])
    weights.put(conv.input[1], kernel / scale.reshape(-1, *[1] * (kernel.ndim - 1)))
    if len(conv.input) > 2 and conv.input[2]:
        weights.put(conv.input[2], weights.get(conv.input[2]) / scale)
    output = conv.output[0]
    conv.output[0] = f"{output}_equalized"
    return _insert_mul(model, conv, conv.output[0], scale, output, f"{conv.name}_channel_scale", after=True)


def _scale_depthwise(model, conv, scale: np.ndarray, weights: Weights) -> str:
    """conv's weights multiplied by `scale` per channel, and Mul(1 / scale) before it. Returns the Mul's name."""
    weights.put(conv.input[1], weights.get(conv.input[1]) * scale.reshape(-1, 1, 1, 1))
    scaled = f"{conv.input[0]}_equalized_for_{conv.name}"
    name = _insert_mul(model, conv, conv.input[0], 1 / scale, scaled, f"{conv.name}_channel_scale", after=False)
    conv.input[0] = scaled
    return name


def _insert_mul(model, anchor, source: str, scale: np.ndarray, output: str, name: str, after: bool) -> str:
    from onnx import helper, numpy_helper

    model.graph.initializer.append(numpy_helper.from_array(scale.astype(np.float32).reshape(1, -1, 1, 1), f"{name}_value"))
    mul = helper.make_node("Mul", [source, f"{name}_value"], [output], name=name)
    index = next(i for i, node in enumerate(model.graph.node) if node is anchor)
    model.graph.node.insert(index + 1 if after else index, mul)
    return name


def equalize(pre: Path, probe) -> tuple[list[str], dict | None]:
    """Rewrite the ONNX model at `pre` in place where a depthwise conv's per-tensor ranges cost it more than LOSS_DB
    on the samples `probe`; returns the nodes to keep in float and the notes, or ([], None) where none does."""
    import onnx

    from edgekit.backends.onnx.sensitivity import tensor_batches

    model = onnx.load(str(pre))
    weights = Weights(model)
    plans = depthwise_plans(model, weights)
    if not plans:
        return [], None
    names = tensors_to_measure(plans)
    peaks = channel_peaks({k: v for k, v in batch.items() if k in names} for batch in tensor_batches(model, names, probe))
    keep_float, rewritten = rewrite(model, plans, peaks, weights)
    if not rewritten:
        return [], None
    weights.write_back()
    onnx.save(model, str(pre))
    notes = {
        "rewritten": rewritten,
        "of": len(plans),
        "float_nodes": len(keep_float),
        "why": f"per-tensor int8 ranges cost these depthwise convs' outputs more than {LOSS_DB:g} dB of SQNR against per-channel ones: their inputs (and their producers' outputs) are scaled to channels of equal range, the scales undone in float Muls and in the weights (backends.onnx.depthwise_scales)",
    }
    return keep_float, notes
