"""`prune`'s comparison of stages: the original, the compressed model and (with a precision) the compressed model
quantized, each converted to ONNX and validated on the same data in ONNX Runtime; the size gate on the result."""

from __future__ import annotations

import gzip
from pathlib import Path

from edgekit import registry
from edgekit.artifact import TensorSpec
from edgekit.conversion import CalibrationOptions, ConvertOptions
from edgekit.converters.pipeline import convert
from edgekit.imports import import_attr
from edgekit.metrics.gate import check_row, failures
from edgekit.source import ModelSource, open_source
from edgekit.validation.benchmark import BenchSettings
from edgekit.validation.validate import ValidationRequest, validate


def gzip_size(path: Path) -> int:
    """Bytes after gzip: what sparse (zeroed) weights save in storage and download."""
    return len(gzip.compress(Path(path).read_bytes(), compresslevel=6))


def compare_stages(
    original: ModelSource,
    pruned: Path,
    inputs: list[TensorSpec],
    data: str,
    workdir: Path,
    precision: str | None,
    calib: str | None,
    threads: int | None = None,
    runs: int = 100,
    name: str = "pruned",
) -> list[dict]:
    """Rows for original, compressed (`name`) and (optionally) compressed + `precision`: all converted to ONNX and run in ONNX Runtime."""
    workdir.mkdir(parents=True, exist_ok=True)
    stages = [("original", original, "fp32"), (name, open_source(str(pruned)), "fp32")]
    if precision and precision != "fp32":
        stages.append((f"{name} + {precision}", open_source(str(pruned)), precision))
    rows = []
    for name, source, stage_precision in stages:
        calibration = CalibrationOptions(calib, 300) if stage_precision == "int8" else CalibrationOptions()
        onnx_path = workdir / f"{name.replace(' + ', '.')}.onnx"
        artifact = convert(source, "onnx", onnx_path, ConvertOptions(stage_precision, tuple(inputs), calibration))
        result = validate(
            ValidationRequest(
                open_source(str(artifact.path)),
                original,
                data=data,
                inputs=tuple(inputs),
                latency=BenchSettings("onnxruntime:cpu", threads, 1, 20, runs),
            )
        )
        rows.append(_stage_row(name, artifact, result))
    base, macs = rows[0]["p50_ms"], rows[0]["macs"]
    return [
        {**r, "speedup": base / r["p50_ms"], "p50_ratio": r["p50_ms"] / base, "mac_ratio": r["macs"] / macs if r["macs"] and macs else None}
        for r in rows
    ]


def _stage_row(name: str, artifact, result: dict) -> dict:
    facts = registry.backend(artifact.format)
    summary = import_attr(facts.summary)(artifact.path)
    accuracy = result["accuracy"] or {}
    size, packed, coded = artifact.size_bytes(), gzip_size(artifact.path), import_attr(facts.coded_size)(artifact.path)
    return {
        "stage": name,
        "precision": artifact.precision,
        "parameters": summary["parameters"],
        "macs": import_attr(facts.macs)(artifact.path),
        "size_bytes": size,
        "gzip_bytes": packed,
        "coded_bytes": coded,
        "size_mb": size / 1e6,
        "gzip_mb": packed / 1e6,
        "coded_mb": coded / 1e6,
        "accuracy": accuracy.get("artifact"),
        "drop_points": accuracy.get("drop_points"),
        "p50_ms": result["latency"]["latency"]["p50"],
        "p90_ms": result["latency"]["latency"]["p90"],
        "threads": result["threads"],
    }


def fill_int8_accuracy(storage: list[dict], stages: list[dict]) -> None:
    """The storage table's int8 row takes its accuracy from the int8 ONNX stage (ONNX Runtime), when there is one."""
    int8 = [r for r in stages if r["precision"] == "int8"]
    for row in storage:
        if row["stage"] == "int8" and int8:
            row["accuracy"] = int8[-1]["accuracy"]
            row["accuracy_from"] = "int8 ONNX model, ONNX Runtime"


def gate_compressed(result: dict, output: Path, limits) -> dict:
    """The size gate on the compressed model: its last stage row (ONNX), or the output file and its coded weights."""
    if result["stages"]:
        row = dict(result["stages"][-1])
    else:
        size = Path(output).stat().st_size if Path(output).is_file() else None
        coded = [r for r in result["stage"]["storage"] if r["stage"] != "int8"]
        row = {
            "stage": "output",
            "size_mb": size / 1e6 if size else None,
            "gzip_mb": gzip_size(output) / 1e6 if size else None,
            "coded_mb": coded[-1]["total"]["coded_bytes"] / 1e6 if coded else None,
        }
    results = check_row(row, limits)
    return {
        "stage": row["stage"],
        "thresholds": limits.to_dict(),
        "results": [r.to_dict() for r in results],
        "failures": [r.to_dict() for r in failures(results)],
        "passed": not failures(results),
    }
