"""The embedded default: a trained Fashion-MNIST CNN through convert -> validate -> bench -> report,
for every format x precision edgekit supports here (ONNX Runtime, OpenVINO, LiteRT)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgekit.artifact import TensorSpec
from edgekit.converters import SUFFIXES, CalibrationOptions, ConvertOptions
from edgekit.errors import EdgekitError
from edgekit.loaders import ModelSource
from edgekit.validate.benchmark import BenchSettings
from edgekit.validate.report import new_report, write_json
from edgekit.validate.validation import ValidationRequest, validate

log = logging.getLogger("edgekit")
INPUTS = (TensorSpec("image", ("batch", 1, 28, 28), "float32"),)
CELLS = (
    ("onnx", "fp32"),
    ("onnx", "fp16"),
    ("onnx", "int8"),
    ("openvino", "fp32"),
    ("openvino", "fp16"),
    ("openvino", "int8"),
    ("tflite", "fp32"),
    ("tflite", "fp16"),
    ("tflite", "int8"),
)
TARGETS = {"onnx": "onnxruntime:cpu", "openvino": "openvino:cpu", "tflite": "litert:cpu"}


@dataclass(frozen=True)
class DemoModel:
    """A committed, trained model with the layout of its input."""

    source: ModelSource
    inputs: tuple[TensorSpec, ...]
    layout: str  # "nchw" (PyTorch) or "nhwc" (Keras)
    title: str


def demo_source() -> ModelSource:
    """The committed, trained PyTorch FashionCNN as a factory + state dict."""
    from edgekit.zoo.fashion_mnist import WEIGHTS

    return ModelSource("edgekit.zoo.models:fashion_cnn", "torch-factory", WEIGHTS)


def demo_model(keras: bool = False) -> DemoModel:
    if keras:
        from edgekit.zoo.fashion_mnist import KERAS_MODEL

        return DemoModel(ModelSource(str(KERAS_MODEL), "keras"), (), "nhwc", "FashionCNN (Keras), trained on Fashion-MNIST")
    return DemoModel(demo_source(), INPUTS, "nchw", "FashionCNN (PyTorch), trained on Fashion-MNIST")


def write_demo_data(workdir: Path, layout: str = "nchw") -> tuple[Path, Path]:
    """The committed Fashion-MNIST splits as .npz files keyed by the model's input name."""
    from edgekit.zoo.fashion_mnist import CALIB_NPZ, TEST_NPZ, load_split

    paths = []
    for split, name in ((TEST_NPZ, "test"), (CALIB_NPZ, "calib")):
        path = workdir / f"fashion_mnist_{name}{'' if layout == 'nchw' else '_nhwc'}.npz"
        if not path.exists():
            images, labels = load_split(split)
            np.savez(path, image=images if layout == "nchw" else images.transpose(0, 2, 3, 1), labels=labels)
        paths.append(path)
    return paths[0], paths[1]


def run_demo(workdir: Path, threads: int | None = None, runs: int = 200, keras: bool = False, cells=CELLS) -> dict:
    """Convert to every cell, validate each on the 10k test images, time each; returns the report."""
    model = demo_model(keras)
    workdir.mkdir(parents=True, exist_ok=True)
    test_npz, calib_npz = write_demo_data(workdir, model.layout)
    rows = [_cell(model, fmt, precision, workdir, test_npz, calib_npz, threads, runs) for fmt, precision in cells]
    report = new_report("demo", ("torch", "onnxruntime", "openvino", "ai-edge-litert"))
    report.update(model=model.title, data="Fashion-MNIST test set, 10,000 labelled images", rows=with_speedups(rows))
    write_json(report, workdir / "demo-report.json")
    return report


def _cell(model: DemoModel, fmt: str, precision: str, workdir: Path, test_npz: Path, calib_npz: Path, threads, runs) -> dict:
    from edgekit.converters.pipeline import convert

    log.warning("demo: %s %s: converting, then validating on 10,000 test images", fmt, precision)
    calibration = CalibrationOptions(str(calib_npz), 500) if precision == "int8" else CalibrationOptions()
    out = workdir / f"{model.source.name}.{precision}{SUFFIXES[fmt]}"
    try:
        artifact = convert(model.source, fmt, out, ConvertOptions(precision, model.inputs, calibration))
        latency = BenchSettings(TARGETS[fmt], threads, 1, 20, runs)
        result = validate(
            ValidationRequest(ModelSource(str(artifact.path), fmt), model.source, data=str(test_npz), inputs=model.inputs, latency=latency)
        )
    except EdgekitError as exc:  # one failed cell does not stop the others; its row says why
        return {"format": fmt, "precision": precision, "target": TARGETS[fmt], "status": f"failed: {exc.one_line()}"}
    return row_from_validation(fmt, precision, result)


def row_from_validation(fmt: str, precision: str, result: dict) -> dict:
    """One table row from a validation report."""
    fidelity = result["fidelity"][0]
    latency = result["latency"]["latency"]
    return {
        "format": fmt,
        "precision": precision,
        "target": result["target"],
        "status": "ok",
        "threads": result["threads"],
        "accuracy": result["accuracy"]["artifact"],
        "reference_accuracy": result["accuracy"]["reference"],
        "drop_points": result["accuracy"]["drop_points"],
        "top1_agreement": fidelity["top1_agreement"],
        "cosine": fidelity["cosine_mean"],
        "p50_ms": latency["p50"],
        "p90_ms": latency["p90"],
        "size_bytes": result["latency"]["size_bytes"],
        "artifact": result["artifact"]["spec"],
    }


def with_speedups(rows: list[dict]) -> list[dict]:
    """Speed-up of each row vs the fp32 row of the same target (None where there is none)."""
    baselines = {r["target"]: r["p50_ms"] for r in rows if r.get("status") == "ok" and r["precision"] == "fp32"}
    return [
        {**r, "speedup": baselines[r["target"]] / r["p50_ms"] if r.get("status") == "ok" and r["target"] in baselines else None}
        for r in rows
    ]
