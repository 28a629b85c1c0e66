"""ONNX models whose batch is fixed (at 1, at 4): int8 calibration, accuracy control and validation on ONNX Runtime
feed them batches of exactly that size, the last one filled up with repeated samples whose outputs are dropped
(10 samples: 4 + 4 + 2 real and 2 repeated)."""

import pytest

import edgekit
from tests.unit.backends.fixed_batch import fixed_batch_onnx

CALIB, TEST = "zoo:fashion-mnist-calib", "zoo:fashion-mnist-test"


@pytest.fixture(scope="module")
def fixed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fixed")
    return {batch: fixed_batch_onnx(folder, batch) for batch in (1, 4)}


@pytest.mark.parametrize("batch", [1, 4])
def test_int8_of_a_fixed_batch_onnx_calibrates_and_validates_in_that_batch(fixed, batch, tmp_path):
    int8 = edgekit.convert(str(fixed[batch]), "onnx", tmp_path / "int8.onnx", precision="int8", calib=CALIB, calib_samples=10)
    assert int8.inputs[0]["shape"] == [batch, 1, 28, 28]
    report = edgekit.validate(str(int8.path), reference=str(fixed[batch]), data=TEST, limit=10, runs=2, warmup=0)
    assert report.data["samples"] == 10 and report.accuracy["samples"] == 10  # the repeated samples' outputs dropped
    assert report.accuracy["drop_points"] <= 10 and report.fidelity[0].cosine_mean > 0.99
    assert report.latency.latency.batch == batch  # timed in the batch the model takes, whatever --batch says


def test_accuracy_control_scores_a_fixed_batch_on_every_validation_sample(fixed, tmp_path):
    out = edgekit.convert(
        str(fixed[4]), "onnx", tmp_path / "ac.onnx", precision="int8", calib=CALIB, calib_samples=10, val=TEST, val_samples=10, max_drop=5.0
    )
    control = out.provenance["quantization"]["accuracy_control"]
    assert control["validation_samples"] == 10 and control["final"]["drop_points"] <= 5.0
    assert control["reference_accuracy"] in {i * 10.0 for i in range(11)}  # a share of 10 samples, none counted twice


def test_a_batch_fixed_at_1_with_dynamic_height_and_width_takes_them_from_the_data(tmp_path):
    model = fixed_batch_onnx(tmp_path, 1, dynamic_image=True)  # input [1, 1, height, width]: a detector's [1, 3, H, W]
    int8 = edgekit.convert(
        str(model), "onnx", tmp_path / "hw.int8.onnx", precision="int8", calib=CALIB, calib_samples=6, inputs=["image:1x1x28x28"]
    )
    report = edgekit.validate(str(int8.path), reference=str(model), data=TEST, limit=6, runs=2, warmup=0)
    assert report.accuracy["samples"] == 6 and report.fidelity[0].cosine_mean > 0.99
