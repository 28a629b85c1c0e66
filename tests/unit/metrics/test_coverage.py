"""metrics.coverage: the shares, the text a report prints, and what "size only" is explained by."""

import pytest

from edgekit.metrics.coverage import FLOAT, INT8, Island, Layer, coverage_text, share, summarize, why_size_only
from edgekit.report.tables import cells, row_notes


def _coverage(head_precision: str = FLOAT) -> dict:
    layers = [Layer("conv1", "QLinearConv", INT8, 900), Layer("conv2", "QLinearConv", INT8, 600), Layer("fc", "Gemm", head_precision, 500)]
    return summarize(layers, [Island("fc", "Gemm", 500), Island("softmax", "Softmax")], "test graph")


def test_shares_of_macs_and_layers_and_the_float_layers_by_macs():
    coverage = _coverage()
    assert coverage["macs_share"] == pytest.approx(0.75) and coverage["layers_share"] == pytest.approx(2 / 3)
    assert [x["name"] for x in coverage["float_layers"]] == ["fc"] and coverage["float_layers"][0]["macs_share"] == 0.25
    text = coverage_text(coverage)
    assert text.startswith("int8 coverage 75.0% of MACs (2/3 layers); float: fc (Gemm, 25.0%)")
    assert "float islands: softmax (Softmax)" in text and "fc (Gemm)" not in text.split("float islands")[1]  # named once
    assert share(summarize([Layer("a", "MatMul", INT8), Layer("b", "MatMul", FLOAT)], [], "x")) == 0.5  # MACs unknown: layers
    assert share(None) is None and share(summarize([], [], "x")) is None


def test_size_only_is_explained_by_the_float_share_or_by_the_kernels():
    assert why_size_only(_coverage()).startswith("only 75% of its MACs run in int8")
    assert "the int8 kernels themselves are no faster" in why_size_only(_coverage(INT8))


def test_the_report_row_shows_coverage_and_names_what_stayed_float():
    row = {
        "format": "onnx", "precision": "int8", "target": "onnxruntime:cpu", "status": "ok", "p50_ms": 1.0, "p90_ms": 1.2,
        "size_bytes": 1000, "speedup": 1.5, "int8_coverage": 0.75, "int8_coverage_detail": _coverage(),
    }  # fmt: skip
    assert "75.0%" in cells(row)
    assert row_notes({"rows": [row]}) == [f"onnx int8 on onnxruntime:cpu: {coverage_text(_coverage())}"]
    assert row_notes({"rows": [{**row, "int8_coverage": 1.0}]}) == []
