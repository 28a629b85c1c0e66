"""5. Scaling: conversion and calibration time vs model size and calibration sample count."""

from __future__ import annotations

import time

from bench.common import CACHE, IMAGE, photo_calibration, publish
from edgekit.converters import CalibrationOptions, ConvertOptions
from edgekit.converters.pipeline import convert
from edgekit.loaders import ModelSource, open_source
from edgekit.loaders.onnx import onnx_summary

SIZES = (
    ("efficientnet_lite0", "edgekit.zoo.models:efficientnet_lite0"),
    ("resnet18_shape", "edgekit.zoo.models:resnet18_shape"),
    ("resnet18_shape x4 params", "bench.scaling:resnet18_wide"),
)


def resnet18_wide():
    """ResNet-18 with twice the width: ~4x the parameters and MACs."""
    import torch

    from edgekit.zoo.models import ResNet18Shape

    torch.manual_seed(0)
    return ResNet18Shape(width=128).eval()


def _timed_convert(spec: str, precision: str, samples: int, out, model: str | None = None) -> float:
    calibration = CalibrationOptions(str(photo_calibration(samples, model=model)), samples) if precision == "int8" else CalibrationOptions()
    source = ModelSource(spec, "torch-factory") if ":" in spec and not spec.endswith(".onnx") else open_source(spec)
    start = time.perf_counter()
    convert(source, "onnx", out, ConvertOptions(precision, IMAGE, calibration))
    return time.perf_counter() - start


def run(sample_counts: tuple[int, ...] = (100, 300, 1000)) -> None:
    rows = []
    for name, spec in SIZES:
        export = _timed_convert(spec, "fp32", 0, CACHE / "scale.fp32.onnx")
        params = onnx_summary(CACHE / "scale.fp32.onnx")["parameters"]
        quant = _timed_convert(str(CACHE / "scale.fp32.onnx"), "int8", 300, CACHE / "scale.int8.onnx", name)
        rows.append([name, f"{params / 1e6:.1f} M", f"{export:.1f}", f"{quant:.1f} (300 samples)"])
    base = CACHE / "scale.r18.fp32.onnx"
    _timed_convert("edgekit.zoo.models:resnet18_shape", "fp32", 0, base)
    for count in sample_counts:
        rows.append(
            [
                "resnet18_shape",
                "11.7 M",
                "-",
                f"{_timed_convert(str(base), 'int8', count, CACHE / 'scale.n.int8.onnx'):.1f} ({count} samples)",
            ]
        )
    publish(
        "scaling",
        "Conversion and calibration time (seconds)",
        ["model", "parameters", "export to ONNX fp32 s", "int8 calibration + quantization s"],
        rows,
        ["MinMax calibration, batch 16, 2 cores; one run each (these are minutes-scale steps, not micro-benchmarks)."],
    )
