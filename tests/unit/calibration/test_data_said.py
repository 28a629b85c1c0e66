"""Data is said, never guessed silently: an array fed to an input of another name is named in the provenance and the
headers; class labels outside the model's classes are an error unless declared ignored (--ignore-label)."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.artifact import TensorSpec
from edgekit.calibration import load_samples
from edgekit.calibration.samples import fed_from_text
from edgekit.errors import EdgekitError
from edgekit.metrics.compare import labels_in_range, paired_accuracy

IMAGES = np.random.default_rng(0).random((6, 1, 4, 4), dtype=np.float32)


def test_a_named_array_fed_to_an_input_of_another_name_is_said(tmp_path):
    np.savez(tmp_path / "d.npz", pixels=IMAGES)
    samples = load_samples(str(tmp_path / "d.npz"), specs=[TensorSpec("args_0", ("batch", 1, 4, 4))])  # a converter's name
    assert samples.provenance["fed_from"] == {"args_0": "pixels"}
    assert fed_from_text(samples.provenance) == " (input args_0 <- array pixels)"
    np.save(tmp_path / "d.npy", IMAGES)  # one array without a name: nothing to say
    assert "fed_from" not in load_samples(str(tmp_path / "d.npy"), specs=[TensorSpec("args_0", ("batch", 1, 4, 4))]).provenance


def test_labels_outside_the_classes_are_an_error_naming_them_unless_ignored():
    labels = np.array([0, 1, 2, -3, 1, 7])
    with pytest.raises(EdgekitError, match=r"2 labels are outside the model's 3 classes \[0, 3\): -3, 7") as info:
        labels_in_range(labels, 3, None, "d.npz")
    assert "--ignore-label -3" in info.value.hint
    with pytest.raises(EdgekitError, match=r"1 labels are outside .*\): 7;"):
        labels_in_range(labels, 3, -3, "d.npz")  # only the declared value is ignored
    kept = labels_in_range(np.array([0, 1, 2, -1, 1, 0]), 3, -1, "d.npz")
    logits = np.eye(3)[[0, 1, 2, 2, 0, 0]]
    accuracy = paired_accuracy(logits, logits, kept)
    assert accuracy["samples"] == 5 and accuracy["reference"] == pytest.approx(80.0)  # the -1 sample left out
    assert labels_in_range(np.array([0, 1, 2]), 3, None, "d.npz").tolist() == [0, 1, 2]
