"""A conversion counts as written only once the artifact and its source agree on the same inputs (converters.verify)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from edgekit.artifact import TensorSpec
from edgekit.converters.verify import LARGE, probe_samples
from tests.conftest import assert_clean_error, run_cli

CORRUPTED = f"{Path(__file__).parent / 'corrupted_export.py'}:corrupted"


def test_an_export_that_differs_from_its_source_fails_with_exit_1_and_writes_nothing(tmp_path):
    result = run_cli("convert", CORRUPTED, "--to", "onnx", "-o", tmp_path / "out" / "m.onnx")
    assert_clean_error(result, "output 'output' max abs diff", "--no-verify")
    assert "0.0099 of its largest value" in result.stderr or "0.01 of its largest value" in result.stderr  # the 1.01 scale
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_no_verify_writes_it_and_says_so_in_the_provenance(tmp_path):
    result = run_cli("convert", CORRUPTED, "--to", "onnx", "--no-verify", "-o", tmp_path / "m.onnx")
    assert result.code == 0, result.stderr
    assert "not verified against" in result.stderr
    provenance = json.loads((tmp_path / "m.onnx.edgekit.json").read_text())
    assert provenance["verified"] == {"result": "skipped", "why": "--no-verify"} and provenance["options"]["verify"] is False


def test_probes_exercise_signs_zeros_and_large_values_per_dtype():
    specs = [TensorSpec("x", ("batch", 3)), TensorSpec("ids", ("batch", 5), "int64")]
    samples = probe_samples(specs)
    x, ids = samples.arrays["x"], samples.arrays["ids"]
    assert x.dtype == np.float32 and x.shape == (6, 3) and ids.dtype == np.int64 and ids.shape == (6, 5)
    np.testing.assert_array_equal(x[2:4], -x[0:2])  # each normal probe and its negation
    assert not x[4].any() and np.abs(x[5]).max() > 10 * np.abs(x[:2]).max() and np.abs(x[5]).mean() > LARGE / 10
    assert set(np.unique(ids)) == {0, 1}  # valid ids of any vocabulary
    half = probe_samples(specs, large=False)
    assert len(half) == 5 and np.abs(half.arrays["x"]).max() < 10  # fp16: no input past its range
