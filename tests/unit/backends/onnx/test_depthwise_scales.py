"""Depthwise convs whose input channels differ by orders of magnitude get per-channel int8 ranges on ONNX Runtime
(backends.onnx.depthwise_scales): the float model is unchanged, and the int8 keeps its output where per-tensor
ranges lose it. The shape is PicoDet's LCNet block: 1x1 conv (a folded BatchNorm spanning 500x) -> HardSwish, as
Paddle exports it (Add, Clip, Mul, Div) -> depthwise 3x3 (the fold's inverse) -> 1x1 conv."""

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import edgekit
from edgekit.backends.onnx import depthwise_scales
from edgekit.backends.onnx.depthwise_scales import equalize
from edgekit.calibration.samples import Samples
from tests.conftest import run_cli

CHANNELS = 16
SPREAD = np.logspace(0, -2.7, CHANNELS).astype(np.float32)  # the producer's output channels: 1 .. 1/500


def _block() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    pointwise = rng.normal(size=(CHANNELS, 8, 1, 1)).astype(np.float32) * SPREAD[:, None, None, None]
    depthwise = rng.normal(size=(CHANNELS, 1, 3, 3)).astype(np.float32) / SPREAD[:, None, None, None]
    head = rng.normal(size=(4, CHANNELS, 1, 1)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "pw", "pw_bias"], ["y"], name="pointwise"),
        helper.make_node("Add", ["y", "three"], ["y3"], name="hswish_add"),
        helper.make_node("Clip", ["y3", "zero", "six"], ["gate"], name="hswish_clip"),
        helper.make_node("Mul", ["y", "gate"], ["yg"], name="hswish_mul"),
        helper.make_node("Div", ["yg", "six"], ["h"], name="hswish_div"),
        helper.make_node("Conv", ["h", "dw"], ["d"], name="depthwise", group=CHANNELS, pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["d", "head"], ["out"], name="head"),
    ]
    constants = {"pw": pointwise, "pw_bias": 0.1 * SPREAD, "dw": depthwise, "head": head}
    constants |= {"three": np.float32(3), "zero": np.float32(0), "six": np.float32(6)}
    graph = helper.make_graph(
        nodes,
        "lcnet_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 16, 16])],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in constants.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _inputs(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(count, 1, 8, 16, 16)).astype(np.float32)


def _outputs(path, inputs: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(None, {"x": x})[0] for x in inputs])


def _sqnr_db(reference: np.ndarray, other: np.ndarray) -> float:
    return float(10 * np.log10((reference**2).sum() / ((reference - other) ** 2).sum()))


def test_the_block_is_rewritten_with_its_producer_and_the_float_model_is_unchanged(tmp_path):
    path = tmp_path / "block.onnx"
    onnx.save(_block(), str(path))
    inputs = _inputs(4, 1)
    before = _outputs(path, inputs)
    keep_float, notes = equalize(path, Samples({"x": inputs[:, 0]}))
    [rewritten] = notes["rewritten"]
    assert rewritten["conv"] == "depthwise" and rewritten["producer"] == "pointwise"
    assert rewritten["per_tensor_loss_db"] > depthwise_scales.LOSS_DB
    assert {"hswish_add", "hswish_clip", "hswish_mul", "hswish_div"} <= set(keep_float) and len(keep_float) == 6
    np.testing.assert_allclose(_outputs(path, inputs), before, rtol=1e-4, atol=1e-4 * np.abs(before).max())


def test_int8_keeps_the_block_where_per_tensor_ranges_lose_it(tmp_path, monkeypatch):
    path = tmp_path / "block.onnx"
    onnx.save(_block(), str(path))
    np.savez(tmp_path / "calib.npz", x=_inputs(32, 2)[:, 0])
    inputs = _inputs(8, 3)
    reference = _outputs(path, inputs)

    def int8_sqnr(name: str) -> tuple[float, dict]:
        out = tmp_path / f"{name}.onnx"
        converted = edgekit.convert(str(path), "onnx", out, precision="int8", calib=str(tmp_path / "calib.npz"))
        return _sqnr_db(reference, _outputs(out, inputs)), converted.provenance["quantization"]

    scaled, notes = int8_sqnr("scaled")
    assert notes["depthwise_channel_scales"]["rewritten"][0]["conv"] == "depthwise"
    printed = run_cli("info", tmp_path / "scaled.onnx").stdout
    assert "per-channel int8 ranges for 1 of 1 depthwise convs" in printed and "6 ops kept float" in printed
    monkeypatch.setattr(depthwise_scales, "LOSS_DB", float("inf"))  # the pass off: one range per tensor
    per_tensor, notes = int8_sqnr("per_tensor")
    assert "depthwise_channel_scales" not in notes
    assert scaled >= 25.0 and scaled >= per_tensor + 10.0, (scaled, per_tensor)
