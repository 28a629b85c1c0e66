"""Channel orders for pair-safe int8 weights (backends.onnx.channel_order): the float model's outputs kept, pair sums
closer to the largest weight, and a space left alone where an op cannot follow a reordering."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgekit.backends.onnx.channel_order import _pair_ratios, pair_order, reorder
from edgekit.quantization.channel_order import restore

pytest.importorskip("onnxruntime")


def _outputs(path, image: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: image})[0]


def _weights(path) -> dict[str, np.ndarray]:
    import onnx

    return {i.name: numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}


def test_the_trained_classifier_keeps_its_outputs_and_pairs_large_weights_with_small(fashion_onnx, small_test_npz, tmp_path):
    out = tmp_path / "ordered.onnx"
    notes = reorder(fashion_onnx["fp32"], out)
    # FashionCNN's one free space is its hidden layer (Linear -> ReLU -> Linear); the convolutions' inputs feed 3x3
    # kernels (7-bit, no pairs) and the last one's output is flattened with its 3x3 positions: pinned
    (space,) = notes["spaces"]
    assert space["tensors"] == ["linear", "relu_3"] and sorted(space["order"]) == list(range(128))
    before, after = space["pair_ratio_median"]
    assert after < before - 0.2 and after < 1.1  # 1.49 -> 1.06 (1: plain 8-bit steps)
    old, new, order = _weights(fashion_onnx["fp32"]), _weights(out), np.array(space["order"])
    assert np.array_equal(new["classifier.1.weight"], old["classifier.1.weight"][order])  # the writer's outputs
    assert np.array_equal(new["classifier.1.bias"], old["classifier.1.bias"][order])
    assert np.array_equal(new["classifier.3.weight"], old["classifier.3.weight"][:, order])  # the reader's inputs
    with np.load(small_test_npz) as data:
        images = data["image"][:200]
    np.testing.assert_allclose(_outputs(out, images), _outputs(fashion_onnx["fp32"], images), rtol=0, atol=1e-4)


def test_the_order_makes_every_row_finer_on_heavy_tailed_weights():
    rng = np.random.default_rng(0)
    rows = rng.standard_t(3, (64, 256))  # a few large weights per output channel, as trained layers have
    order = pair_order(rows)
    assert sorted(order) == list(range(256))
    before, after = _pair_ratios(rows), _pair_ratios(rows[:, order])
    assert np.median(after) < 1.1 < np.median(before) and after.mean() < before.mean()
    value = rng.normal(size=(2, 256, 3))
    assert np.array_equal(restore(value[:, order], order), value)


def _layer(name: str, x: str, y: str, cin: int, cout: int, rng, group: int = 1) -> tuple:
    weight = numpy_helper.from_array((0.2 * rng.standard_t(3, (cout, cin // group, 1, 1))).astype(np.float32), f"{name}.w")
    return helper.make_node("Conv", [x, weight.name], [y], name=name, group=group), weight


def test_ops_that_cannot_follow_leave_their_space_as_it_is(tmp_path):
    """x -> a -> relu -> b -> (b_out) -> concat with x -> c: b's output is read by a Concat (pinned), a's by b (free);
    d and e share one weight: their spaces stay."""
    rng = np.random.default_rng(1)
    a, wa = _layer("a", "x", "a_out", 8, 16, rng)
    relu = helper.make_node("Relu", ["a_out"], ["r"], name="relu")
    b, wb = _layer("b", "r", "b_out", 16, 8, rng)
    concat = helper.make_node("Concat", ["b_out", "x"], ["cat"], name="cat", axis=1)
    c, wc = _layer("c", "cat", "c_out", 16, 16, rng)
    d = helper.make_node("Conv", ["c_out", "shared"], ["d_out"], name="d")
    e = helper.make_node("Conv", ["d_out", "shared"], ["y"], name="e")
    shared = numpy_helper.from_array((0.2 * rng.standard_t(3, (16, 16, 1, 1))).astype(np.float32), "shared")
    graph = helper.make_graph(
        [a, relu, b, concat, c, d, e],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 4, 4])],
        [wa, wb, wc, shared],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    source, out = tmp_path / "g.onnx", tmp_path / "ordered.onnx"
    import onnx

    onnx.save(model, str(source))
    notes = reorder(source, out)
    assert [s["tensors"] for s in notes["spaces"]] == [["a_out", "r"]]
    x = rng.normal(size=(1, 8, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(_outputs(out, x), _outputs(source, x), rtol=1e-4, atol=1e-4)
    old, new = _weights(source), _weights(out)
    assert all(np.array_equal(old[k], new[k]) for k in ("c.w", "shared"))


def test_a_reordering_that_changed_the_outputs_is_not_kept(fashion_onnx, demo_data, small_test_npz, tmp_path, monkeypatch):
    """Fault injected: the readers' inputs left in the old order (a rule that missed an op would do the same). The
    conversion checks the float outputs on calibration samples and quantizes the model as it was."""
    from edgekit.backends.onnx import channel_order, quantize
    from edgekit.conversion import CalibrationOptions, ConvertOptions
    from edgekit.converters.pipeline import convert
    from edgekit.memo import Kept
    from edgekit.source import open_source

    real_apply = channel_order._apply

    def writers_only(space, order, weights):
        space.readers = []
        real_apply(space, order, weights)

    monkeypatch.setattr(channel_order, "_apply", writers_only)
    monkeypatch.setattr(quantize, "_kept_orders", Kept(entries=1))  # a process keeps orders by data, not by code
    options = ConvertOptions("int8", (), CalibrationOptions(str(demo_data[1]), 300), for_target="x86-avx2")
    result = convert(open_source(str(fashion_onnx["fp32"])), "onnx", tmp_path / "avx2.onnx", options)
    notes = result.meta["provenance"]["quantization"]["channel_order"]
    assert notes["spaces"] == [] and "left as it was" in notes["note"]
    with np.load(small_test_npz) as data:
        images = data["image"][:500]
    agree = np.mean(_outputs(result.path, images).argmax(1) == _outputs(fashion_onnx["fp32"], images).argmax(1))
    assert agree >= 0.99  # written from the model as it was, not from the broken reordering
