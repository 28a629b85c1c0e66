"""Accuracy-aware int8 on LiteRT from PyTorch (backends.tflite.accuracy): layers return to float until the limit holds."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.conversion import CalibrationOptions, ConvertOptions
from edgekit.converters.pipeline import convert

pytest.importorskip("litert_torch")


def _float_kernels(path) -> list[list[int]]:
    """Sorted shapes of the float32 4-D tensors with a 3x3 in them (convolution kernels left in float) of a .tflite."""
    from ai_edge_litert.interpreter import Interpreter

    details = Interpreter(model_path=str(path)).get_tensor_details()
    shapes = [sorted(int(d) for d in t["shape"]) for t in details if t["dtype"] == np.float32 and len(t["shape"]) == 4]
    return [s for s in shapes if s.count(3) == 2]


@pytest.fixture
def dark_calibration(tmp_path, demo_data) -> tuple[CalibrationOptions, str]:
    """Calibration on 100 images 100x too dark (ranges 100x too small), and 300 unlabelled validation images."""
    garbage, unlabelled = tmp_path / "garbage.npz", tmp_path / "val.npz"
    with np.load(demo_data[1]) as npz:
        np.savez(garbage, image=npz["image"][:100] * 0.01)
    with np.load(demo_data[0]) as npz:
        np.savez(unlabelled, image=npz["image"][:300])
    return CalibrationOptions(str(garbage), 100), str(unlabelled)


def test_min_agreement_returns_the_worst_layer_to_float(tmp_path, fashion_source, dark_calibration):
    """Calibration ranges 100x too small: plain int8 agrees with fp32 on ~62% of images; the stem conv back in float
    (its input is then not clipped) brings ~77%, over the 70% asked. Scored on LiteRT itself, step by step."""
    calibration, unlabelled = dark_calibration
    options = ConvertOptions("int8", (), calibration, validation_data=unlabelled, min_agreement=70.0)
    result = convert(fashion_source, "tflite", tmp_path / "ac.tflite", options)
    control = result.meta["provenance"]["tflite"]["accuracy_control"]
    first, *steps = control["steps"]
    assert first["kept_in_float"] is None and first["agreement"] < 70.0  # plain int8 misses the limit
    assert control["reverted_to_float"] == ["features.0.0"] and steps[0]["agreement_gain"] > 5
    assert control["final"]["agreement"] >= 70.0 and control["final"]["accuracy"] is None
    assert _float_kernels(result.path) == [[1, 3, 3, 32]]  # the stem conv (1 -> 32, 3x3), and only it, runs in float
    from edgekit.cli.render.convert import print_how_made
    from edgekit.cli.render.table import console

    with console.capture() as printed:  # what `edgekit convert` and `edgekit info` print of it
        print_how_made(result.meta["provenance"])
    assert "accuracy control (agreement >= 70" in printed.get() and "1 layer(s) kept in float: features.0.0" in printed.get()


def test_min_cosine_returns_layers_to_float_until_the_outputs_are_that_close(tmp_path, fashion_source, dark_calibration):
    """The same calibration: plain int8 keeps cosine ~0.87 with fp32 on LiteRT; --min-cosine 0.99 returns layers to
    float until the outputs are that close, each step scored on LiteRT."""
    calibration, unlabelled = dark_calibration
    options = ConvertOptions("int8", (), calibration, validation_data=unlabelled, min_cosine=0.99)
    control = convert(fashion_source, "tflite", tmp_path / "ac.tflite", options).meta["provenance"]["tflite"]["accuracy_control"]
    first, *steps = control["steps"]
    assert control["min_cosine"] == 0.99 and first["cosine"] < 0.99 <= control["final"]["cosine"]
    assert control["reverted_to_float"] == [step["kept_in_float"] for step in steps if step["kept"]]


def test_a_middle_layer_kept_in_float_runs_in_float_in_the_tflite(tmp_path, demo_data):
    """A layer between int8 ones, left out of PT2E's annotation, is float in the written .tflite: its input edge is float
    too (through the max pool, to the conv before it, which runs in float as well), else litert-torch fuses dequantize ->
    float conv -> quantize back into an int8 conv with round-to-nearest weights."""
    from edgekit.backends.tflite.from_torch import _converted, _int8_static, export
    from edgekit.backends.torch.loader import example_tensors
    from edgekit.calibration import load_samples
    from edgekit.conversion import ConversionData, load_for_conversion
    from edgekit.source import open_source

    module, specs = load_for_conversion(open_source("zoo:fashion-cnn"), [])
    data = ConversionData(load_samples(str(demo_data[1]), specs=specs, limit=50))
    options = ConvertOptions("int8", (), CalibrationOptions(str(demo_data[1]), 50, "histogram"))
    args = example_tensors(specs, 1)
    for keep, name in (((), "all_int8.tflite"), (("features.2.0",), "middle_float.tflite")):
        export(_converted(lambda keep=keep: _int8_static(module, args, options, data, specs, {}, keep)), tmp_path / name)
    assert _float_kernels(tmp_path / "all_int8.tflite") == []
    assert sorted(_float_kernels(tmp_path / "middle_float.tflite")) == [[1, 3, 3, 32], [3, 3, 32, 64]]  # the second conv and the first
