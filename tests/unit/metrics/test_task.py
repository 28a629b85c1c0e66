"""Task inference decides which metrics apply; outputs pair by name where both sides name them."""

import numpy as np
import pytest

from edgekit.errors import EdgekitError
from edgekit.metrics.compare import compare_output
from edgekit.metrics.gate import Thresholds, check_row, failures
from edgekit.metrics.task import pair_outputs, resolve_task

RNG = np.random.default_rng(0)


def test_the_task_is_inferred_and_says_from_what():
    logits, labels = RNG.normal(size=(20, 10)), RNG.integers(0, 10, 20)
    assert resolve_task(None, [logits], ["logits"], labels).name == "classification"
    unit = RNG.normal(size=(20, 384))
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    assert resolve_task(None, [unit], ["output"], None).why == "[N, 384] rows of unit length"
    assert resolve_task(None, [RNG.normal(size=(20, 384))], ["sentence_embedding"], None).name == "embedding"
    assert resolve_task(None, [RNG.normal(size=(2, 7, 384))], ["y"], None).name == "embedding"
    assert resolve_task(None, [RNG.normal(size=(2, 21, 64, 64))], ["out"], None).name == "segmentation"
    assert resolve_task(None, [RNG.normal(size=(2, 100, 4)), RNG.normal(size=(2, 100))], ["boxes", "scores"], None).name == "detection"
    assert resolve_task(None, [RNG.normal(size=(20, 1))], ["price"], None).name == "regression"
    given = resolve_task("embedding", [logits], ["logits"], labels)
    assert (given.name, given.inferred) == ("embedding", False)
    with pytest.raises(EdgekitError, match="unknown task 'ranking'"):
        resolve_task("ranking", [logits], ["logits"], None)


def test_top1_agreement_applies_to_classification_only():
    ref = RNG.normal(size=(50, 384))
    art = ref + RNG.normal(scale=0.3, size=ref.shape)
    assert compare_output("e", ref, art, classification=False).top1_agreement is None
    assert compare_output("e", ref, art, classification=True).top1_agreement < 100
    (missing,) = failures(check_row({"top1_agreement": None, "task": "embedding"}, Thresholds(min_agreement=99)))
    assert "were not read by a task metric" in missing.reason


def test_outputs_pair_by_name_else_by_position():
    assert pair_outputs(["b", "a"], ["a", "b"]) == (
        [1, 0],
        [{"artifact": "b", "reference": "b", "by": "name"}, {"artifact": "a", "reference": "a", "by": "name"}],
    )
    order, pairing = pair_outputs(["Identity:0", "Identity_1:0"], ["a", "b"])
    assert order == [0, 1] and {p["by"] for p in pairing} == {"position"}
