"""The int4 ONNX's int8 embedding on ONNX Runtime: read row by row, not dequantized whole at every step."""

from __future__ import annotations

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")


def _embedding_graph(rows: int = 300, width: int = 24):
    """NNCF's int8 embedding as it writes it: DequantizeLinear (uint8 codes, one scale and zero point per row) feeding
    the Gather of the token ids, then a MatMul reading the embedded tokens."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    initializers = [
        numpy_helper.from_array(rng.integers(0, 256, (rows, width)).astype(np.uint8), "codes"),
        numpy_helper.from_array(rng.uniform(0.001, 0.02, rows).astype(np.float32), "scale"),
        numpy_helper.from_array(rng.integers(100, 156, rows).astype(np.uint8), "zero"),
        numpy_helper.from_array(rng.normal(size=(width, 8)).astype(np.float32), "w"),
    ]
    nodes = [
        helper.make_node("DequantizeLinear", ["codes", "scale", "zero"], ["table"], axis=0),
        helper.make_node("Gather", ["table", "ids"], ["embedded"]),
        helper.make_node("MatMul", ["embedded", "w"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes, "embedding",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, "T"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, "T", 8])],
        initializers,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _run(model, ids):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"ids": ids})[0]


def test_the_int8_embedding_is_gathered_then_dequantized_with_the_same_numbers():
    from edgekit.backends.onnx.nncf_weights import _gather_before_dequantize

    model = _embedding_graph()
    ids = np.array([[0, 7, 299, 7, 150]], np.int64)
    before = _run(model, ids)
    rewritten = _gather_before_dequantize(_embedding_graph())
    ops = [n.op_type for n in rewritten.graph.node]
    assert "DequantizeLinear" not in ops and ops.count("Gather") == 3  # codes, zero points and scales, by row
    assert {i.name for i in rewritten.graph.initializer} >= {"codes", "codes_row_scale", "codes_row_zero"}
    np.testing.assert_array_equal(_run(rewritten, ids), before)  # DequantizeLinear's arithmetic, exactly
