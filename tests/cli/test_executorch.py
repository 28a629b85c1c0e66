"""ExecuTorch from the command line: the trained FashionCNN to an int8 .pte (PT2E, XNNPACK), validated on real
Fashion-MNIST images with its accuracy drop and delegate split; a damaged .pte is one clear error."""

from __future__ import annotations

import json

import pytest

from tests.conftest import assert_clean_error, run_cli

pytest.importorskip("executorch", reason="pip install edgekit[executorch]")


@pytest.fixture(scope="module")
def int8_pte(tmp_path_factory):
    out = tmp_path_factory.mktemp("executorch") / "fashion.int8.pte"
    result = run_cli("convert", "zoo:fashion-cnn", "--to", "executorch", "-p", "int8", "--calib", "zoo:fashion-mnist-calib", "-o", out)
    assert result.code == 0, result.stderr
    assert "(executorch, int8," in result.stdout
    assert "fallback: 0.0% of ops ran outside the XNNPACK delegate" in result.stdout, result.stdout
    return out


def test_int8_validates_with_its_accuracy_drop(int8_pte, tmp_path):
    report = tmp_path / "r.json"
    args = ("-r", "zoo:fashion-cnn", "-d", "zoo:fashion-mnist-test", "--limit", "1000", "--runs", "5", "--report", report)
    result = run_cli("validate", int8_pte, *args, "--max-drop", "1", "--max-fallback", "0")
    assert result.code == 0, result.stdout + result.stderr
    assert "executorch:cpu" in result.stdout and "accuracy: reference" in result.stdout
    data = json.loads(report.read_text())
    assert data["target"] == "executorch:cpu"
    assert abs(data["accuracy"]["drop_points"]) <= 1.0 and data["accuracy"]["artifact"] > 85
    assert data["artifact"]["meta"]["provenance"]["fallback"]["percent"] == 0.0
    assert data["latency"]["threads"] >= 1 and data["latency"]["peak_rss_mb"] > 0


def test_info_shows_the_delegate_split(int8_pte):
    result = run_cli("info", int8_pte)
    assert result.code == 0, result.stderr
    assert "XnnpackBackend delegate:" in result.stdout and "on the CPU: none" in result.stdout, result.stdout
    assert "1x1x28x28" in result.stdout


def test_a_truncated_pte_is_refused(int8_pte, tmp_path):
    bad = tmp_path / "cut.pte"
    bad.write_bytes(int8_pte.read_bytes()[: int8_pte.stat().st_size // 3])
    assert_clean_error(run_cli("info", bad), "cut.pte")
