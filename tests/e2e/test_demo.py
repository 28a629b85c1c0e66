"""The README's demo, end to end, on the real trained models and a seeded 2,000 of the 10,000 Fashion-MNIST test images
(`demo --limit`: validating all 10,000 cost each test about as much as its nine conversions)."""

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.e2e
SAMPLES = 2000
# Net samples lost vs the reference, at most: the limits of the 10,000 (0.02, 0.1 and 0.5 points) counted in samples of
# the 2,000 (a sample is 0.05 points), where fp32's 0.02 is less than one: one near-tie may flip there. Counted, not
# compared in points: two samples are 0.10000000000000853 points. (fp16 loses 1 here, x86-avx2, 2026-11-29.)
LOST = {"fp32": 1, "fp16": 2, "int8": 10}


def _rows(tmp_path, *extra):
    result = run_cli("demo", "--workdir", tmp_path, "--runs", "30", "--limit", str(SAMPLES), *extra)
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
        assert row["samples"] == SAMPLES  # a real subset, not the whole test set
        lost = round(row["drop_points"] * SAMPLES / 100)  # net samples the artifact gets wrong that the reference got right
        assert lost <= LOST[precision], (fmt, precision, row["drop_points"])
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
