"""Accuracy control in the task's own metric (--min-map-kept): the limit, how outputs are read, and the validation
samples held back from the calibration samples when no --val is given."""

import numpy as np
import pytest

from edgekit.calibration.samples import Samples
from edgekit.conversion import CalibrationOptions, ConvertOptions
from edgekit.converters.pipeline import HELD_BACK, MIN_HELD_BACK, held_back
from edgekit.errors import EdgekitError
from edgekit.quantization.accuracy import Limit, Reading


def _score(agreement: float) -> dict:
    return {"accuracy": None, "drop_points": None, "agreement": agreement, "cosine": 0.99}


def test_min_map_kept_is_a_fraction_of_the_fp32_results_held_in_percent_points():
    limit = Limit(None, None, None, 0.97)
    assert limit.holds(_score(97.0)) and not limit.holds(_score(96.99))
    assert limit.count() == 1 and limit.on_task_metric()
    assert limit.text() == "kept >= 0.97 of fp32's"
    assert Limit.recorded(limit.notes()) == limit  # what the provenance records reads back as the same limit
    assert not Limit(None, None, 0.999).on_task_metric()


def test_a_decoder_given_means_detection_and_a_language_model_task_is_not_read():
    options = ConvertOptions("int8", (), postprocess="decoders:picodet", mask_threshold=0.3)
    assert Reading.of(options) == Reading("detection", "decoders:picodet", 0.3)
    assert Reading.of(ConvertOptions("int8", (), task="segmentation", mask_threshold=0.3)) == Reading("segmentation", None, 0.3)
    assert Reading.of(ConvertOptions("int4-weights", (), task="text-generation")).task is None


def test_validation_samples_are_held_back_from_calibration_never_calibrated_on():
    rows = np.arange(40, dtype=np.float32).reshape(40, 1)
    calibration, validation = held_back(Samples({"x": rows}, provenance={"source": "calib.npz"}))
    assert len(validation) == 40 // HELD_BACK and len(calibration) == 40 - 40 // HELD_BACK
    assert not set(calibration.arrays["x"][:, 0]) & set(validation.arrays["x"][:, 0])
    assert calibration.provenance["held_back_for_validation"] == len(validation)
    assert validation.provenance["source"] == "calib.npz" and "held_back_from" in validation.provenance
    too_few = Samples({"x": rows[: HELD_BACK * MIN_HELD_BACK - 1]})
    with pytest.raises(EdgekitError, match="leave 7 \\(at least 8 are needed\\)") as refused:
        held_back(too_few)
    assert "--calib-samples" in refused.value.hint


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"min_map_kept": 1.5}, "--min-map-kept 1.5 is not a fraction"),
        ({"max_drop": 1.0}, "--max-drop measures accuracy against labels, which calibration data does not hold"),
        ({"validation_data": "val.npz"}, "--val is the data of accuracy control, which needs a limit"),
        ({"task": "ranking"}, "convert --task takes classification, .*, not 'ranking'"),  # a recipe's convert.task too
    ],
)
def test_a_limit_that_cannot_be_held_is_refused_before_any_work(tmp_path, options, message):
    from edgekit.converters.pipeline import convert
    from edgekit.source import open_source

    calib = CalibrationOptions(str(tmp_path / "calib.npz"), 64)  # never read: the options are refused first
    with pytest.raises(EdgekitError, match=message):
        convert(open_source("zoo:fashion-cnn"), "onnx", tmp_path / "x.onnx", ConvertOptions("int8", (), calib, **options))
    assert not (tmp_path / "x.onnx").exists()


def test_a_regression_has_no_agreement_with_fp32_to_hold():
    from edgekit.quantization.accuracy import Validator

    samples = Samples({"x": np.zeros((4, 3), np.float32)})

    def values(model, fed):  # the outputs a runtime returns for the reference: one value per sample
        return {"y": np.arange(4, dtype=np.float32).reshape(4, 1)}

    validator = Validator("reference.onnx", samples, values, Reading("regression"))
    with pytest.raises(EdgekitError, match="no agreement with fp32's to hold") as refused:
        validator.check(Limit(None, None, None, 0.97))
    assert "--min-cosine" in refused.value.hint
    validator.check(Limit(None, None, 0.999))  # its outputs themselves can be held


def test_max_drop_reads_a_zoo_detection_sets_boxes_and_refuses_data_without_labels(tmp_path):
    """--max-drop on a detector is its mAP drop against the zoo set's boxes, kept beside the images (not a `labels`
    array): the validation data is taken; an unlabelled .npz is refused with one line."""
    from edgekit.converters.pipeline import validation_samples

    boxes = ConvertOptions("int8", (), validation_data="zoo:fashion-det-test", validation_samples=20, max_drop=1.0)
    assert len(validation_samples(boxes, []).ids) == 20
    bare = tmp_path / "bare.npz"
    np.savez(bare, image=np.zeros((4, 1, 96, 96), np.float32))
    with pytest.raises(EdgekitError, match="has no labels"):
        validation_samples(ConvertOptions("int8", (), validation_data=str(bare), max_drop=1.0), [])
