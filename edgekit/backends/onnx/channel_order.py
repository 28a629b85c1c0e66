"""Channel orders that pair-safe int8 weights quantize finer (x86 without VNNI: quantization.pair_safe).

Pair-safe weights give each output channel of a 1x1 Conv or a Gemm the scale set by its largest sum of two adjacent
input channels' |w|, not by its largest |w|: where a large weight sits beside another large one, every weight of that
output channel gets coarser steps (up to 2x). The order of a tensor's channels is free wherever every op that writes
or reads it treats its channels alike, so this pass reorders them before quantization: the output channels of the
layers that write the tensor, the parameters of the channelwise ops on its way (depthwise Conv, BatchNormalization,
activations, pools, residual Adds) and the input channels of the layers that read it, together. The float model's
outputs stay what they were (up to the order of float sums), and each pair can hold one large weight and one small.

Order chosen per channel space (the tensors that must share one order): the consumers' |w|, each output channel
scaled to its largest, are paired greedily, largest first, each with the partner that raises the consumers' largest
pair sums the least. A space stays as it is where an op could not follow a reordering (a Concat, a Reshape that
mixes channels, a graph input or output, a MatMul, a shared weight).

The orders are recorded (`notes["spaces"]`) so that `edgekit debug` compares each reordered tensor channel by
channel with its reference (edgekit.quantization.channel_order.restore).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgekit.backends.onnx.loader import node_attribute
from edgekit.quantization import pair_safe

ELEMENTWISE = {
    "Relu",
    "Clip",
    "LeakyRelu",
    "Sigmoid",
    "HardSigmoid",
    "HardSwish",
    "Tanh",
    "Identity",
    "Elu",
    "Selu",
    "Softplus",
    "Neg",
    "Abs",
}
BINARY = {"Add", "Sub", "Mul", "Div", "Max", "Min"}
POOLS = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}
REDUCTIONS = {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum"}
FLATTENS = {"Reshape", "Flatten", "Squeeze"}


@dataclass
class Space:
    """Tensors whose channels must share one order, and the weights that follow it."""

    tensors: list[str] = field(default_factory=list)
    writers: list = field(default_factory=list)  # Conv (group 1) / Gemm nodes whose output channels are this space
    channelwise: list = field(default_factory=list)  # depthwise Conv / BatchNormalization nodes inside it
    readers: list = field(default_factory=list)  # Conv (group 1) / Gemm nodes whose input channels are this space
    pinned: bool = False


def reorder(model_path: Path, out: Path) -> dict:
    """Write `model_path` with its free channel spaces reordered for pair-safe weights to `out`; the notes say what
    moved (each space's tensors and order, and the consumers' median largest-pair / largest-weight before and after)."""
    import onnx

    model = onnx.load(str(model_path))
    weights = Weights(model)
    spaces = [s for s in _spaces(model, weights) if not s.pinned and any(_pairs_reader(n, weights) for n in s.readers)]
    moved = []
    for space in spaces:
        rows = _reader_rows(space, weights)
        order = pair_order(rows)
        before, after = _pair_ratios(rows), _pair_ratios(rows[:, order])
        if after.mean() >= before.mean():  # no finer on the whole: leave the space as it is
            continue
        _apply(space, order, weights)
        median = [round(float(np.median(r)), 3) for r in (before, after)]
        moved.append({"tensors": space.tensors, "order": order.tolist(), "pair_ratio_median": median})
    weights.write_back()
    onnx.save(model, str(out))
    return {
        "spaces": moved,
        "note": "channels reordered so that adjacent input channels pair a large weight with a small one (backends.onnx.channel_order)",
    }


def pair_order(rows: np.ndarray) -> np.ndarray:
    """An order of the K columns of `rows` (R x K weights of the readers) that keeps each row's largest adjacent pair
    sum of |w| close to its largest |w|: columns taken largest first, each paired with the column that adds least to the
    rows' largest pair sums so far (each row scaled to its largest |w|)."""
    a = np.abs(np.asarray(rows, np.float64))
    a /= np.maximum(a.max(1, keepdims=True), np.finfo(np.float64).tiny)
    free = np.ones(a.shape[1], bool)
    largest = np.ones(a.shape[0])  # each row's largest pair sum so far (its largest weight, 1, is in some pair)
    order = []
    for first in np.argsort(-a.max(0), kind="stable"):
        if not free[first]:
            continue
        free[first] = False
        order.append(first)
        candidates = np.flatnonzero(free)
        if not len(candidates):
            break
        sums = a[:, [first]] + a[:, candidates]
        partner = candidates[int(np.argmin(np.maximum(sums - largest[:, None], 0).sum(0)))]
        largest = np.maximum(largest, a[:, first] + a[:, partner])
        free[partner] = False
        order.append(partner)
    return np.asarray(order)


def _pair_ratios(rows: np.ndarray) -> np.ndarray:
    """Per row, its largest adjacent pair sum of |w| over its largest |w|: how much coarser than plain 8-bit pair-safe
    steps are (1: as fine, 2: as coarse as 7-bit)."""
    a = np.abs(np.asarray(rows, np.float64))
    return pair_safe.pair_sums(a).max(1) / np.maximum(a.max(1), np.finfo(np.float64).tiny)


class Weights:
    """The model's initializers as arrays, each read when first asked for, edited in place and written back once
    (this pass and backends.onnx.depthwise_scales)."""

    def __init__(self, model) -> None:
        from onnx import numpy_helper

        self.model = model
        self.initializers = {i.name: i for i in model.graph.initializer}
        self.arrays: dict[str, np.ndarray] = {}
        self.constants = {  # Constant nodes' values: read, never reordered
            n.output[0]: numpy_helper.to_array(n.attribute[0].t)
            for n in model.graph.node
            if n.op_type == "Constant" and n.attribute[0].name == "value"
        }
        self.uses: dict[str, int] = {}
        for node in model.graph.node:
            for name in node.input:
                self.uses[name] = self.uses.get(name, 0) + 1
        self.changed: set[str] = set()

    def get(self, name: str) -> np.ndarray | None:
        if name not in self.arrays and name in self.initializers:
            from onnx import numpy_helper

            self.arrays[name] = numpy_helper.to_array(self.initializers[name]).copy()
        return self.arrays.get(name)

    def value(self, name: str) -> np.ndarray | None:
        """An initializer's or a Constant node's value; None for an activation."""
        return self.get(name) if name in self.initializers else self.constants.get(name)

    def own(self, node, index: int) -> bool:
        """The node's input `index` is an initializer that no other input reads."""
        return len(node.input) > index and node.input[index] in self.initializers and self.uses[node.input[index]] == 1

    def take(self, name: str, order: np.ndarray, axis: int) -> None:
        self.put(name, np.take(self.get(name), order, axis=axis))

    def put(self, name: str, array: np.ndarray) -> None:
        """Replace an initializer's values (kept in its dtype), written back by write_back."""
        self.arrays[name] = array.astype(self.get(name).dtype, copy=False)
        self.changed.add(name)

    def write_back(self) -> None:
        from onnx import numpy_helper

        for name in self.changed:
            self.initializers[name].CopyFrom(numpy_helper.from_array(self.arrays[name], name))


def _spaces(model, weights: Weights) -> list[Space]:
    """The channel spaces of the model's activations: a union of tensors per space, pinned where an op cannot follow."""
    parent: dict[str, str] = {}

    def root(t: str) -> str:
        parent.setdefault(t, t)
        while parent[t] != t:
            parent[t] = parent[parent[t]]
            t = parent[t]
        return t

    def union(a: str, b: str) -> None:
        parent[root(a)] = root(b)

    shapes = _shapes(model)
    roles: list[tuple[str, str, object]] = []  # (tensor, the Space list its node goes to, node)
    pinned: set[str] = {v.name for v in (*model.graph.input, *model.graph.output)}
    for node in model.graph.node:
        activations = [t for t in node.input if t and weights.value(t) is None]
        role = _role(node, weights, shapes)
        if role == "layer":
            roles += [(node.input[0], "readers", node), (node.output[0], "writers", node)]
        elif role == "channelwise":
            union(node.input[0], node.output[0])
            roles.append((node.output[0], "channelwise", node))
        elif role == "follows":
            for t in (*activations, node.output[0]):
                union(t, node.output[0])
        else:
            pinned.update((*activations, *node.output))
        for t in (*activations, *node.output):
            root(t)
    spaces: dict[str, Space] = {}
    for t in parent:
        spaces.setdefault(root(t), Space()).tensors.append(t)
    for t, role, node in roles:
        getattr(spaces[root(t)], role).append(node)
    for t in pinned:
        if t in parent:
            spaces[root(t)].pinned = True
    for space in spaces.values():
        space.pinned = space.pinned or not space.writers
    return list(spaces.values())


def _role(node, weights: Weights, shapes: dict[str, list]) -> str:
    """How a node treats the channels (axis 1) of its activations: 'layer' (reads and writes channels through its own
    weight), 'channelwise' (one parameter per channel, channels kept), 'follows' (channels kept, nothing to reorder),
    or 'pins' (anything else)."""
    op = node.op_type
    if op == "Conv" and weights.own(node, 1) and (len(node.input) < 3 or weights.own(node, 2)):
        group = node_attribute(node, "group", 1)
        shape = weights.get(node.input[1]).shape
        if group == 1:
            return "layer"
        return "channelwise" if group == shape[0] and shape[1] == 1 else "pins"
    if (
        op == "Gemm"
        and weights.own(node, 1)
        and node_attribute(node, "transA", 0) == 0
        and (len(node.input) < 3 or _vector_bias(node, weights))
    ):
        return "layer"
    if op == "BatchNormalization" and all(weights.own(node, i) for i in range(1, 5)):
        return "channelwise"
    if op in ELEMENTWISE:
        return "follows" if all(_scalar(weights.value(t)) for t in node.input[1:] if t) else "pins"
    if op in BINARY:
        constants = [weights.value(t) for t in node.input if weights.value(t) is not None]
        ranks = {len(shapes[t]) if t in shapes else None for t in (*node.input, node.output[0]) if weights.value(t) is None}
        return "follows" if len(ranks) == 1 and None not in ranks and min(ranks) >= 2 and all(map(_scalar, constants)) else "pins"
    if op in POOLS:
        return "follows"
    if op in REDUCTIONS:
        return "follows" if _keeps_channels(node, weights, shapes) else "pins"
    if op in FLATTENS:
        return "follows" if _spatial_one(node, shapes) else "pins"
    return "pins"


def _keeps_channels(node, weights: Weights, shapes: dict[str, list]) -> bool:
    """A reduction over spatial axes only (the batch and channel axes kept in place)."""
    axes = node_attribute(node, "axes", None)
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = weights.value(node.input[1])
    rank = len(shapes[node.input[0]]) if node.input[0] in shapes else None
    if axes is None or rank is None:
        return False
    return all(int(a) % rank >= 2 for a in np.ravel(axes))


def _spatial_one(node, shapes: dict[str, list]) -> bool:
    """A reshape from [N, C, 1, ..., 1] to [N, C]: the channels keep their place."""
    shape, out = shapes.get(node.input[0]), shapes.get(node.output[0])
    return bool(shape and out and len(out) == 2 and len(shape) > 2 and all(d == 1 for d in shape[2:]) and shape[1] == out[1] is not None)


def _shapes(model) -> dict[str, list]:
    """Each value's shape (None for a dynamic dimension) where shape inference recorded it."""
    result: dict[str, list] = {}
    for value in (*model.graph.input, *model.graph.output, *model.graph.value_info):
        tensor = value.type.tensor_type
        if tensor.HasField("shape"):
            result[value.name] = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
    return result


def _scalar(value: np.ndarray | None) -> bool:
    return value is not None and value.size == 1


def _vector_bias(node, weights: Weights) -> bool:
    bias = weights.get(node.input[2])
    return weights.own(node, 2) and bias is not None and bias.ndim == 1


def _pairs_reader(node, weights: Weights) -> bool:
    """A reader whose input channels pair up in pair-safe weights (quantization.pair_safe.kind: a Gemm, or a 1x1 Conv)."""
    return pair_safe.kind(node.op_type, weights.get(node.input[1]).shape, node_attribute(node, "group", 1)) == "pairs"


def _reader_rows(space: Space, weights: Weights) -> np.ndarray:
    """The pair-safe readers' weights as rows over the space's channels (R x K)."""
    rows = []
    for node in space.readers:
        if not _pairs_reader(node, weights):
            continue
        w = weights.get(node.input[1])
        if node.op_type == "Conv":
            rows.append(w.reshape(w.shape[0], w.shape[1]))
        else:
            rows.append(w if node_attribute(node, "transB", 0) else w.T)
    return np.concatenate(rows, 0)


def _apply(space: Space, order: np.ndarray, weights: Weights) -> None:
    """Reorder the space's channels: writers' outputs, channelwise parameters, readers' inputs."""
    for node in space.writers:
        out_axis = 0 if node.op_type == "Conv" or node_attribute(node, "transB", 0) else 1
        weights.take(node.input[1], order, out_axis)
        if len(node.input) > 2 and node.input[2]:
            weights.take(node.input[2], order, 0)
    for node in space.channelwise:
        for name in node.input[1:]:
            if name:
                weights.take(name, order, 0)
    for node in space.readers:
        in_axis = 1 if node.op_type == "Conv" or node_attribute(node, "transB", 0) else 0
        weights.take(node.input[1], order, in_axis)
