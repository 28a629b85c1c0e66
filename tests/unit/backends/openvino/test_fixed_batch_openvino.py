"""OpenVINO int8 of an ONNX model whose batch is fixed at 4: NNCF's calibration and accuracy control, and ONNX Runtime's
route, feed it batches of 4 (10 samples: 4 + 4 + 2 real and 2 repeated); the IR validates on OpenVINO in that batch."""

import pytest

pytest.importorskip("openvino")
pytest.importorskip("nncf")

import edgekit  # noqa: E402
from tests.unit.backends.fixed_batch import fixed_batch_onnx  # noqa: E402

CALIB, TEST = "zoo:fashion-mnist-calib", "zoo:fashion-mnist-test"


@pytest.fixture(scope="module")
def batch4(tmp_path_factory):
    return fixed_batch_onnx(tmp_path_factory.mktemp("fixed"), 4)


# x86-avx512: NNCF quantizes; x86-vnni: ONNX Runtime's Q/DQ, read by OpenVINO (backends.openvino.convert.ONNX_RUNTIME_CLASSES)
@pytest.mark.parametrize("for_target", ["x86-avx512", "x86-vnni"])
def test_int8_ir_of_a_batch_fixed_at_4_calibrates_and_validates_in_batches_of_4(batch4, for_target, tmp_path):
    ir = edgekit.convert(
        str(batch4), "openvino", tmp_path / "int8.xml", precision="int8", calib=CALIB, calib_samples=10, for_target=for_target
    )
    assert ir.inputs[0]["shape"] == [4, 1, 28, 28]
    report = edgekit.validate(str(ir.path), reference=str(batch4), data=TEST, limit=10, target="openvino:cpu", runs=2, warmup=0)
    assert report.accuracy["samples"] == 10 and report.fidelity[0].cosine_mean > 0.99
    assert report.latency.latency.batch == 4


@pytest.mark.parametrize("limit", [{"max_drop": 5.0}, {"min_cosine": 0.99}])
def test_nncf_accuracy_control_of_a_batch_fixed_at_4(batch4, limit, tmp_path):
    options = {"calib": CALIB, "calib_samples": 10, "val": TEST, "val_samples": 10, "for_target": "x86-avx512", **limit}
    ir = edgekit.convert(str(batch4), "openvino", tmp_path / "ac.xml", precision="int8", **options)
    control = ir.provenance["quantization"]["accuracy_control"]
    assert control["validation_samples"] == 10 and control["final"]["cosine"] > 0.99
    assert control["final"]["accuracy"] in {i * 10.0 for i in range(11)}  # a share of 10 samples, none counted twice
