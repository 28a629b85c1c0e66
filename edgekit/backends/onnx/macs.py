"""Multiply-accumulates per layer of an ONNX graph, per sample: from ONNX shape inference with the batch set to 1.

A layer is a Conv, ConvTranspose, Gemm or MatMul (float or quantized: QLinearConv, ConvInteger, MatMulInteger, ...);
its weight is the constant it multiplies by (an initializer, or one behind a DequantizeLinear), by which ONNX
Runtime's optimized graph names the same layer again (backends/onnx/coverage.py).
"""

from __future__ import annotations

import numpy as np

from edgekit.backends.onnx.loader import read_onnx

# op -> (index of the activation input, index of the weight input)
LAYER_INPUTS = {
    "Conv": (0, 1),
    "ConvTranspose": (0, 1),
    "Gemm": (0, 1),
    "MatMul": (0, 1),
    "ConvInteger": (0, 1),
    "MatMulInteger": (0, 1),
    "QLinearConv": (0, 3),
    "QLinearMatMul": (0, 3),
}


def layer_macs(model) -> list[dict]:
    """[{"node", "op", "weight", "macs"}] for every layer of `model` (an onnx.ModelProto); macs None where a shape is unknown."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(_batch_one(model))
    shapes = {v.name: _dims(v) for v in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]}
    constants = {i.name: tuple(i.dims) for i in model.graph.initializer}
    behind_dq = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in constants}
    layers = []
    for node in model.graph.node:
        if node.op_type not in LAYER_INPUTS:
            continue
        data, weight = LAYER_INPUTS[node.op_type]
        name = node.input[weight] if len(node.input) > weight else ""
        constant = behind_dq.get(name, name if name in constants else None)
        weight_shape = constants.get(constant) if constant else shapes.get(name)
        layers.append(
            {
                "node": node.name,
                "op": node.op_type,
                "weight": constant,
                "macs": _macs(node, shapes.get(node.output[0]), weight_shape, shapes.get(node.input[data])),
            }
        )
    return layers


def total_macs(model) -> int | None:
    """The model's MACs per sample (None when a layer's shape is unknown)."""
    macs = [layer["macs"] for layer in layer_macs(model)]
    return None if any(m is None for m in macs) else int(sum(macs))


def _macs(node, out: tuple | None, weight: tuple | None, data: tuple | None) -> int | None:
    """Output elements x the multiplies behind each: a convolution's weight size over its output channels, a
    matrix product's inner dimension."""
    if not out or any(d is None for d in out):
        return None
    elements = int(np.prod(out))
    if node.op_type in ("Conv", "ConvInteger", "QLinearConv"):
        return elements * int(np.prod(weight)) // weight[0] if weight else None
    if node.op_type == "ConvTranspose":
        return elements * int(np.prod(weight[1:])) * _group(node) // out[1] if weight and len(out) > 1 else None
    trans_a = any(a.name == "transA" and a.i for a in node.attribute)
    inner = (data[-2] if trans_a else data[-1]) if data else None
    return elements * inner if inner else None


def _group(node) -> int:
    return next((a.i for a in node.attribute if a.name == "group"), 1)


def _dims(value) -> tuple | None:
    t = value.type.tensor_type
    if not t.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)


def _batch_one(model):
    """A copy whose inputs' symbolic first dimension is 1 (a batch: MACs are per sample)."""
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for value in copy.graph.input:
        dims = value.type.tensor_type.shape.dim
        if dims and not dims[0].HasField("dim_value"):
            dims[0].dim_value = 1
    return copy


def file_macs(path) -> int | None:
    """The MACs per sample of the ONNX file at `path` (the registry's `macs` for ONNX)."""
    return total_macs(read_onnx(path))
