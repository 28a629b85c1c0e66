"""A detector's box decoding is found by its shape in ONNX and OpenVINO graphs, as Ultralytics exports it (the bins'
softmax, a transpose, the DFL expectation conv, the arithmetic after it), and nothing is found without an expectation."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgekit.backends.onnx.box_decoding import box_decoding

BINS, ANCHORS = 16, 6


def _head(expectation_channels: int) -> onnx.ModelProto:
    """bins [1, 4, 16, A] -> Transpose -> Softmax over the bins -> Transpose -> Conv (the expectation, `expectation_channels`
    outputs) -> Reshape -> Sub/Add with anchor points -> Concat with class probabilities: Ultralytics' head after its
    last convolutions."""
    weight = np.arange(BINS, dtype=np.float32).reshape(1, BINS, 1, 1).repeat(expectation_channels, 0)
    nodes = [
        helper.make_node("Transpose", ["bins"], ["t"], name="dfl/Transpose", perm=[0, 2, 1, 3]),
        helper.make_node("Softmax", ["t"], ["s"], name="dfl/Softmax", axis=1),
        helper.make_node("Transpose", ["s"], ["s2"], name="dfl/Transpose_1", perm=[0, 1, 2, 3]),
        helper.make_node("Conv", ["s2", "dfl.weight"], ["d"], name="dfl/conv/Conv"),
        helper.make_node("Reshape", ["d", "shape"], ["dist"], name="dfl/Reshape_1"),
        helper.make_node("Sub", ["points", "dist"], ["lt"], name="Sub"),
        helper.make_node("Add", ["points", "dist"], ["rb"], name="Add"),
        helper.make_node("Concat", ["lt", "rb", "probs"], ["output0"], name="Concat", axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "head",
        [
            helper.make_tensor_value_info("bins", TensorProto.FLOAT, [1, 4, BINS, ANCHORS]),
            helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 3, ANCHORS]),
        ],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(weight, "dfl.weight"),
            numpy_helper.from_array(np.array([1, 4 * expectation_channels, ANCHORS], np.int64), "shape"),
            numpy_helper.from_array(np.arange(4 * expectation_channels * ANCHORS, dtype=np.float32).reshape(1, -1, ANCHORS), "points"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_ultralytics_style_decoding_is_found_in_onnx_and_openvino(tmp_path):
    model = _head(1)
    found = box_decoding(model)
    assert found == ["dfl/Softmax", "dfl/Transpose_1", "dfl/conv/Conv", "dfl/Reshape_1", "Sub", "Add", "Concat"]
    ov = pytest.importorskip("openvino")
    from edgekit.backends.openvino.nncf_int8 import box_decoding as ov_box_decoding

    path = tmp_path / "head.onnx"
    onnx.save(model, str(path))
    ov_found = set(ov_box_decoding(ov.convert_model(str(path))))
    assert {"dfl/Softmax", "dfl/conv/Conv", "Sub", "Add"} <= ov_found and "dfl/Transpose" not in ov_found


def test_a_softmax_read_by_a_conv_of_several_outputs_is_not_a_box_decoding():
    assert box_decoding(_head(2)) == []
