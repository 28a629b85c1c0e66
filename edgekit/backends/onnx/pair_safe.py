"""Pair-safe int8 weights (edgekit.quantization.pair_safe) for ONNX Runtime's static quantizer: the weight scales of every
layer that needs them, as TensorQuantOverrides."""

from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from edgekit.backends.onnx.loader import node_attribute
from edgekit.quantization import pair_safe


def overrides(model, per_tensor: bool) -> dict:
    """ONNX Runtime TensorQuantOverrides: the weight scales (zero point 0) of every layer that needs them."""
    inits = {i.name: i for i in model.graph.initializer}
    result = {}
    for node in model.graph.node:
        if len(node.input) < 2 or node.input[1] not in inits:
            continue
        group = node_attribute(node, "group", 1)
        weight = numpy_helper.to_array(inits[node.input[1]])
        layer_kind = pair_safe.kind(node.op_type, weight.shape, group)
        if layer_kind is None:
            continue
        axis = _channel_axis(node)
        rows = np.moveaxis(weight, axis, 0).reshape(weight.shape[axis], -1)
        s = pair_safe.scales(rows, layer_kind)
        if per_tensor:
            result[node.input[1]] = [{"scale": np.float32(s.max()), "zero_point": np.int8(0)}]
        else:
            result[node.input[1]] = [{"axis": axis, "scale": np.float32(v), "zero_point": np.int8(0)} for v in s]
    return result


def _channel_axis(node) -> int:
    """The weight's output-channel axis, as ONNX Runtime quantizes it per channel."""
    if node.op_type == "Conv":
        return 0
    if node.op_type == "Gemm":
        return 0 if node_attribute(node, "transB", 0) else 1
    return 1  # MatMul: (K, N)
