"""The README's demo, end to end, on the real trained models and all 10,000 Fashion-MNIST test images."""

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.e2e


def _rows(tmp_path, *extra):
    result = run_cli("demo", "--workdir", tmp_path, "--runs", "30", *extra)
    assert result.code == 0, result.stderr
    for header in (
        "format",
        "precision",
        "status",
        "metric",
        "vs labels",
        "drop (pts)",
        "vs reference",
        "p50 ms",
        "speed-up",
        "int8 coverage",
        "size",
        "gates",
    ):
        assert header in result.stdout
    assert "gates passed" in result.stdout
    for name in ("report.md", "report.html", "junit.xml"):
        assert (tmp_path / name).exists()
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["kind"] == "matrix" and report["passed"]
    return {(r["format"], r["precision"]): r for r in report["rows"]}


def _check(rows, reference_floor):
    assert set(rows) == {(f, p) for f in ("onnx", "openvino", "tflite") for p in ("fp32", "fp16", "int8")}
    assert all(r["status"] == "ok" and r["passed"] for r in rows.values()), [r["status"] for r in rows.values() if r["status"] != "ok"]
    for (fmt, precision), row in rows.items():
        assert row["reference_accuracy"] > reference_floor  # the committed model is really trained
        limit = {"fp32": 0.02, "fp16": 0.1, "int8": 0.5}[precision]  # int8: within half a point on the 10k test set
        assert row["drop_points"] <= limit, (fmt, precision, row["drop_points"])
        assert row["p50_ms"] > 0 and row["threads"] >= 1
        if precision == "int8":  # read from each runtime: every convolution and matrix product runs in int8
            assert row["int8_coverage"] == 1.0, (fmt, row["int8_coverage_detail"])
    for fmt in ("onnx", "openvino", "tflite"):
        assert _weight_bytes(rows[(fmt, "int8")]) < _weight_bytes(rows[(fmt, "fp32")]) / 3
        assert rows[(fmt, "int8")]["top1_agreement"] >= 99.0


def _weight_bytes(row) -> int:
    """The bytes that hold the weights: the file, or an IR's .bin (its .xml is the graph as text: 35 KB for NNCF's int8
    FashionCNN, 51 KB for the one read from ONNX Runtime's Q/DQ on x86-avx2, whose Q/DQ pairs make more nodes)."""
    path = Path(row["artifact"])
    return (path.with_suffix(".bin") if path.suffix == ".xml" else path).stat().st_size


def test_pytorch_demo_keeps_accuracy_everywhere(tmp_path):
    _check(_rows(tmp_path), 90.0)


def test_keras_demo_keeps_accuracy_everywhere(tmp_path):
    _check(_rows(tmp_path, "--keras"), 88.0)
