"""--max-fallback: the share of the graph outside the NPU or delegate, from whichever the conversion recorded."""

from __future__ import annotations

from edgekit.metrics.gate import Thresholds, check_row, failures
from edgekit.validation.validate import fallback_of, summary_row
from tests.conftest import run_cli


def _report(provenance: dict) -> dict:
    return {"artifact": {"format": "x", "precision": "int8", "meta": {"provenance": provenance}}, "fidelity": [], "warnings": []}


DELEGATE = {"fallback": {"where": "the XNNPACK delegate", "percent": 12.5, "delegated_ops": {"conv": 7}, "not_delegated_ops": {"topk": 1}}}
NPU = {"npu": {"device": "ethos-u55-128", "cpu_fallback_percent": 40.0}}


def test_a_delegate_split_is_gated():
    row = summary_row(_report(DELEGATE))
    assert row["fallback"] == 12.5
    assert [f.metric for f in failures(check_row(row, Thresholds(max_fallback=10)))] == ["fallback"]
    assert failures(check_row(row, Thresholds(max_fallback=12.5))) == []


def test_an_npu_split_is_the_same_gate():
    row = summary_row(_report(NPU))
    assert row["fallback"] == row["npu_fallback"] == 40.0
    assert fallback_of(NPU)["where"] == "the ethos-u55-128 NPU"
    assert [f.metric for f in failures(check_row(row, Thresholds(max_fallback=25)))] == ["fallback"]


def test_no_split_recorded_is_not_a_failure():
    row = summary_row(_report({}))
    assert row["fallback"] is None
    assert check_row(row, Thresholds(max_fallback=0)) == []


def test_the_old_flag_is_an_alias():
    help_text = run_cli("validate", "--help").stdout
    assert "--max-fallback" in help_text and "--max-npu-fallback" in help_text
