"""Two int8 conversions of one model in one process order its channels (pair-safe schemes), calibrate it and measure
its layer inputs once (edgekit.memo): the second writes the same model as the first, and other calibration samples
are calibrated afresh."""

import onnx

from edgekit.backends.onnx import int8_rounding, quantize
from edgekit.conversion import CalibrationOptions, ConvertOptions
from edgekit.converters.pipeline import convert
from edgekit.quantization.scheme import choose_scheme
from edgekit.source import open_source
from tests.conftest import INPUTS


def _int8(fp32, out, calib, samples):
    return onnx.load(
        str(convert(open_source(str(fp32)), "onnx", out, ConvertOptions("int8", INPUTS, CalibrationOptions(calib, samples))).path)
    )


def test_a_second_int8_conversion_reuses_the_calibration_and_writes_the_same_model(fashion_onnx, demo_data, tmp_path, monkeypatch):
    calibrations, statistics, orders = [], [], []
    histogram, measured, reordered = quantize.StaticQuantizer._histogram_ranges, int8_rounding._measured_statistics, quantize._reordered
    monkeypatch.setattr(quantize, "_reordered", lambda *a: orders.append(1) or reordered(*a))
    monkeypatch.setattr(quantize.StaticQuantizer, "_histogram_ranges", lambda self: calibrations.append(1) or histogram(self))
    monkeypatch.setattr(int8_rounding, "_measured_statistics", lambda *a: statistics.append(1) or measured(*a))
    reorders = int(choose_scheme("onnxruntime:cpu").pair_safe_weights)  # this host's scheme keeps weight pairs (x86-avx2): reordered
    quantize._kept_calibrations.clear()
    quantize._kept_orders.clear()
    int8_rounding._kept_statistics.clear()

    first = _int8(fashion_onnx["fp32"], tmp_path / "a.onnx", str(demo_data[1]), 120)
    second = _int8(fashion_onnx["fp32"], tmp_path / "b.onnx", str(demo_data[1]), 120)
    assert (len(calibrations), len(statistics), len(orders)) == (1, 1, reorders)
    assert first.graph == second.graph  # channel order, ranges, codes and biases alike

    other = _int8(fashion_onnx["fp32"], tmp_path / "c.onnx", str(demo_data[1]), 60)
    assert (len(calibrations), len(statistics)) == (2, 2) and other.graph != first.graph
