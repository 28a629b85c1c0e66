"""The embedded default: the repo's Fashion-MNIST CNN through convert -> validate -> bench -> report."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from edgekit.artifact import TensorSpec
from edgekit.converters import CalibrationOptions, ConvertOptions
from edgekit.loaders import ModelSource
from edgekit.validate.benchmark import BenchSettings
from edgekit.validate.report import new_report, write_json
from edgekit.validate.validation import ValidationRequest, validate

log = logging.getLogger("edgekit")
PRECISIONS = ("fp32", "fp16", "int8")
INPUTS = (TensorSpec("image", ("batch", 1, 28, 28), "float32"),)


def demo_source() -> ModelSource:
    """The committed, trained FashionCNN as a factory + state dict."""
    from edgekit.zoo.fashion_mnist import WEIGHTS

    return ModelSource("edgekit.zoo.models:fashion_cnn", "torch-factory", WEIGHTS)


def write_demo_data(workdir: Path) -> tuple[Path, Path]:
    """The committed Fashion-MNIST splits as .npz files keyed by the model's input name."""
    from edgekit.zoo.fashion_mnist import CALIB_NPZ, TEST_NPZ, load_split

    paths = []
    for split, name in ((TEST_NPZ, "fashion_mnist_test.npz"), (CALIB_NPZ, "fashion_mnist_calib.npz")):
        path = workdir / name
        if not path.exists():
            images, labels = load_split(split)
            np.savez(path, image=images, labels=labels)
        paths.append(path)
    return paths[0], paths[1]


def run_demo(workdir: Path, threads: int | None = None, runs: int = 200) -> dict:
    """Convert to ONNX fp32/fp16/int8, validate each on the 10k test images, time each; returns the report."""
    from edgekit.converters.pipeline import convert

    workdir.mkdir(parents=True, exist_ok=True)
    test_npz, calib_npz = write_demo_data(workdir)
    source = demo_source()
    latency = BenchSettings("onnxruntime:cpu", threads, 1, 20, runs)
    rows = []
    for precision in PRECISIONS:
        log.warning("demo: converting to ONNX %s and validating on 10,000 test images", precision)
        calibration = CalibrationOptions(str(calib_npz), 500, "minmax") if precision == "int8" else CalibrationOptions()
        artifact = convert(source, "onnx", workdir / f"fashion_cnn.{precision}.onnx", ConvertOptions(precision, INPUTS, calibration))
        result = validate(
            ValidationRequest(ModelSource(str(artifact.path), "onnx"), source, data=str(test_npz), inputs=INPUTS, latency=latency)
        )
        rows.append(_row(precision, result))
    report = new_report("demo", ("torch", "onnxruntime"))
    report.update(
        model="FashionCNN (edgekit.zoo), trained on Fashion-MNIST",
        data="Fashion-MNIST test set, 10,000 labelled images",
        rows=_with_speedups(rows),
    )
    write_json(report, workdir / "demo-report.json")
    return report


def _row(precision: str, result: dict) -> dict:
    fidelity = result["fidelity"][0]
    return {
        "format": "onnx",
        "precision": precision,
        "target": result["target"],
        "threads": result["threads"],
        "accuracy": result["accuracy"]["artifact"],
        "reference_accuracy": result["accuracy"]["reference"],
        "drop_points": result["accuracy"]["drop_points"],
        "top1_agreement": fidelity["top1_agreement"],
        "cosine": fidelity["cosine_mean"],
        "p50_ms": result["latency"]["latency"]["p50"],
        "p90_ms": result["latency"]["latency"]["p90"],
        "size_bytes": result["latency"]["size_bytes"],
        "artifact": result["artifact"]["spec"],
    }


def _with_speedups(rows: list[dict]) -> list[dict]:
    baseline = next(r["p50_ms"] for r in rows if r["precision"] == "fp32")
    return [{**r, "speedup": baseline / r["p50_ms"]} for r in rows]
