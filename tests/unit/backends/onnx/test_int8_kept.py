"""Two int8 conversions of one model in one process calibrate it and measure its layer inputs once (edgekit.memo):
the second writes the same model as the first, and other calibration samples are calibrated afresh."""

import onnx

from edgekit.backends.onnx import int8_rounding, quantize
from edgekit.conversion import CalibrationOptions, ConvertOptions
from edgekit.converters.pipeline import convert
from edgekit.source import open_source
from tests.conftest import INPUTS


def _int8(fp32, out, calib, samples):
    return onnx.load(
        str(convert(open_source(str(fp32)), "onnx", out, ConvertOptions("int8", INPUTS, CalibrationOptions(calib, samples))).path)
    )


def test_a_second_int8_conversion_reuses_the_calibration_and_writes_the_same_model(fashion_onnx, demo_data, tmp_path, monkeypatch):
    calibrations, statistics = [], []
    histogram, measured = quantize.StaticQuantizer._histogram_ranges, int8_rounding._measured_statistics
    monkeypatch.setattr(quantize.StaticQuantizer, "_histogram_ranges", lambda self: calibrations.append(1) or histogram(self))
    monkeypatch.setattr(int8_rounding, "_measured_statistics", lambda *a: statistics.append(1) or measured(*a))
    quantize._kept_calibrations.clear()
    int8_rounding._kept_statistics.clear()

    first = _int8(fashion_onnx["fp32"], tmp_path / "a.onnx", str(demo_data[1]), 120)
    second = _int8(fashion_onnx["fp32"], tmp_path / "b.onnx", str(demo_data[1]), 120)
    assert (len(calibrations), len(statistics)) == (1, 1)
    assert first.graph == second.graph  # ranges, codes and biases alike

    other = _int8(fashion_onnx["fp32"], tmp_path / "c.onnx", str(demo_data[1]), 60)
    assert (len(calibrations), len(statistics)) == (2, 2) and other.graph != first.graph
