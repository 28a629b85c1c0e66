"""`edgekit debug` of models whose batch is fixed at 4: both models are fed batches of 4 (6 samples: 4 + 2 real and 2
repeated), every tensor compared sample by sample, the repeated samples left out."""

import pytest

import edgekit
from edgekit.debug import DebugRequest, debug
from edgekit.errors import InputMismatchError
from edgekit.source import open_source
from tests.unit.backends.fixed_batch import fixed_batch_onnx

TEST = "zoo:fashion-mnist-test"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fixed")
    made = {batch: fixed_batch_onnx(folder, batch) for batch in (1, 4, None)}
    made["int8"] = edgekit.convert(str(made[4]), "onnx", folder / "b4.int8.onnx", precision="int8", calib=TEST, calib_samples=8).path
    return made


def _debug(artifact, reference, samples=6) -> dict:
    return debug(DebugRequest(open_source(str(artifact)), open_source(str(reference)), TEST, samples))


def test_an_int8_onnx_fixed_at_4_against_its_fp32(models):
    report = _debug(models["int8"], models[4])
    assert report["data"]["samples"] == 6 and report["matched"] > 5
    assert all(row["shape"][0] == 1 for row in report["rows"])  # compared sample by sample
    assert all(row["sqnr_db"] > 20 for row in report["rows"] if not row["exact"])


def test_a_fixed_batch_against_a_dynamic_one_feeds_both_the_fixed_batch(models):
    report = _debug(models[4], models[None])  # the same weights: every shared tensor equal, the repeated samples aside
    assert report["matched"] > 5 and all(row["cosine"] > 0.999999 and row["shape"][0] == 1 for row in report["rows"])


def test_two_different_fixed_batches_are_refused_in_one_line(models):
    with pytest.raises(InputMismatchError, match="takes batches of 4 only and the reference batches of 1"):
        _debug(models["int8"], models[1])


def test_openvino_ir_fixed_at_4_against_a_dynamic_one(models, tmp_path):
    pytest.importorskip("openvino")
    fixed, dynamic = (edgekit.convert(str(models[b]), "openvino", tmp_path / f"b{b or 'N'}.xml").path for b in (4, None))
    report = _debug(fixed, dynamic)  # the dynamic IR is compiled for the batch fed: 4
    assert report["matched"] > 5 and all(row["cosine"] > 0.999999 and row["shape"][0] == 1 for row in report["rows"])
