"""A .pt2 exported at a fixed batch of 4 (torch.export without dynamic_shapes): every artifact keeps that batch, PT2E
calibrates it (ExecuTorch, LiteRT) and ONNX Runtime quantizes it in batches of 4, and validation against the .pt2 feeds
both batches of 4 (10 samples: 4 + 4 + 2 real and 2 repeated)."""

import importlib.util

import pytest

import edgekit
from tests.unit.backends.fixed_batch import fixed_batch_pt2

CALIB, TEST = "zoo:fashion-mnist-calib", "zoo:fashion-mnist-test"
ROUTES = [
    pytest.param("onnx", "onnx", id="onnx"),
    pytest.param(
        "executorch",
        "executorch",
        id="executorch",
        marks=pytest.mark.skipif(not importlib.util.find_spec("executorch"), reason="no executorch"),
    ),
    pytest.param(
        "tflite",
        "litert_torch",
        id="tflite",
        marks=pytest.mark.skipif(not importlib.util.find_spec("litert_torch"), reason="no litert-torch"),
    ),
]


@pytest.fixture(scope="module")
def batch4(tmp_path_factory):
    return fixed_batch_pt2(tmp_path_factory.mktemp("pt2"), 4)


@pytest.mark.parametrize(("to", "package"), ROUTES)
def test_int8_of_a_pt2_fixed_at_4_keeps_its_batch_and_validates(batch4, to, package, tmp_path):
    suffix = {"onnx": ".onnx", "executorch": ".pte", "tflite": ".tflite"}[to]
    int8 = edgekit.convert(
        str(batch4), to, tmp_path / f"int8{suffix}", precision="int8", calib=CALIB, calib_samples=10, keep_sensitive=False
    )
    assert int8.inputs[0]["shape"][0] == 4
    report = edgekit.validate(str(int8.path), reference=str(batch4), data=TEST, limit=10, runs=2, warmup=0)
    assert report.accuracy["samples"] == 10 and report.fidelity[0].cosine_mean > 0.99
    assert report.latency.latency.batch == 4
