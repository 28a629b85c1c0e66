"""Verdicts that cannot pass garbage: damaged real models fail the gates they must fail, and reports re-gate."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import run_cli


def _damaged(fp32, path, fill: float, tensors=("classifier.3.weight",)):
    """The trained FashionCNN with its last layer's tensors replaced by `fill`."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(fp32))
    for init in model.graph.initializer:
        if init.name in tensors:
            init.CopyFrom(numpy_helper.from_array(np.full_like(numpy_helper.to_array(init), fill), init.name))
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize(
    ("fill", "tensors", "nonfinite"),
    [(np.nan, ("classifier.3.weight",), "20000"), (0.0, ("classifier.3.weight", "classifier.3.bias"), None)],
    ids=["nan", "zero"],
)
def test_nan_and_zero_models_fail_min_cosine(tmp_path, fashion_onnx, small_test_npz, fill, tensors, nonfinite):
    bad = _damaged(fashion_onnx["fp32"], tmp_path / "bad.onnx", fill, tensors)
    report = tmp_path / "r.json"
    result = run_cli(
        "validate", bad, "-r", fashion_onnx["fp32"], "-d", small_test_npz, "--min-cosine", "0.99", "--runs", "3", "--report", report
    )
    assert result.code == 2, result.stdout + result.stderr
    assert "GATE FAILED" in result.stdout and "cosine" in result.stdout
    data = json.loads(report.read_text())
    fidelity = data["fidelity"][0]
    assert fidelity["cosine_mean"] == 0.0 and fidelity["cosine_min"] == 0.0
    if nonfinite:  # 2,000 samples x 10 logits, every one NaN
        assert fidelity["nonfinite"] == 20000 and f"{nonfinite} non-finite" in result.stdout
    else:
        assert fidelity["nonfinite"] == 0 and fidelity["snr_db"] == pytest.approx(0.0)


def test_default_gates_fail_garbage_without_thresholds(tmp_path, fashion_onnx, small_test_npz):
    bad = _damaged(fashion_onnx["fp32"], tmp_path / "bad.onnx", np.nan)
    result = run_cli("validate", bad, "-r", fashion_onnx["fp32"], "-d", small_test_npz, "--runs", "3")
    assert result.code == 2 and "nonfinite_values" in result.stdout, result.stdout + result.stderr
    assert run_cli("validate", bad, "-r", fashion_onnx["fp32"], "-d", small_test_npz, "--runs", "3", "--no-default-gates").code == 0
