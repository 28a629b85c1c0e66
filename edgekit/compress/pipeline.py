"""`prune`: run one compression stage, save a loadable model, and compare every stage on real data."""

from __future__ import annotations

import gzip
import logging
from pathlib import Path

from edgekit.artifact import TensorSpec
from edgekit.calibration import load_samples
from edgekit.compress import METHODS, PruneOptions, StageReport
from edgekit.errors import EdgekitError
from edgekit.fileio import atomic_output
from edgekit.loaders import ModelSource

log = logging.getLogger("edgekit")


def prune(
    source: ModelSource,
    options: PruneOptions,
    out: Path,
    inputs: list[TensorSpec],
    data: str | None = None,
    finetune_data: str | None = None,
) -> StageReport:
    """Compress `source` with `options`; writes the result to `out` (.pt2 for PyTorch, .keras for Keras)."""
    if options.method not in METHODS:
        raise EdgekitError(f"unknown compression method '{options.method}'", hint=f"choose one of: {', '.join(METHODS)}")
    if source.family == "keras":
        from edgekit.compress.keras_prune import prune_keras

        return prune_keras(source, options, out, data, finetune_data)
    if source.family != "torch":
        raise EdgekitError(f"edgekit prunes PyTorch and Keras models, not {source.format}", hint="prune the original model, then convert")
    return _prune_torch(source, options, out, inputs, data, finetune_data)


def _prune_torch(source, options, out, inputs, data, finetune_data) -> StageReport:
    from edgekit.compress import torch_prune
    from edgekit.converters.pipeline import load_for_conversion
    from edgekit.loaders.torch import example_tensors

    module, specs = load_for_conversion(source, inputs)
    calibration = load_samples(data, 512, 0, None, specs) if data else None
    train = load_samples(finetune_data, None, 0, None, specs) if finetune_data else None
    if options.epochs and train is None:
        raise EdgekitError("--epochs needs labelled training data", hint="pass --finetune DATA with a `labels` array")
    example = example_tensors(specs, 1)
    if options.method == "magnitude":
        model, report = torch_prune.magnitude_prune(module, options, train)
    elif options.method == "channels":
        model, report = torch_prune.channel_prune(module, options, example[0] if len(example) == 1 else example, calibration, train)
    else:
        model, report = torch_prune.lowrank_factorize(module, options, example[0] if len(example) == 1 else example, train)
    save_exported(model, specs, out)
    return report


def save_exported(model, specs: list[TensorSpec], out: Path) -> None:
    """Save as a .pt2 exported program with a dynamic batch axis (loadable by edgekit and torch.export.load)."""
    import torch

    from edgekit.loaders.torch import batch_dynamic_shapes, example_tensors

    program = torch.export.export(model.eval(), example_tensors(specs, 2), dynamic_shapes=batch_dynamic_shapes(model, specs))
    with atomic_output(Path(out)) as tmp:
        torch.export.save(program, str(tmp))


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
) -> list[dict]:
    """Rows for original, pruned and (optionally) pruned + `precision`: all converted to ONNX and run in ONNX Runtime."""
    from edgekit.converters import CalibrationOptions, ConvertOptions
    from edgekit.converters.pipeline import convert
    from edgekit.loaders import open_source
    from edgekit.validate.benchmark import BenchSettings
    from edgekit.validate.validation import ValidationRequest, validate

    workdir.mkdir(parents=True, exist_ok=True)
    stages = [("original", original, "fp32"), ("pruned", open_source(str(pruned)), "fp32")]
    if precision and precision != "fp32":
        stages.append((f"pruned + {precision}", open_source(str(pruned)), precision))
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
    base = rows[0]["p50_ms"]
    return [{**r, "speedup": base / r["p50_ms"]} for r in rows]


def _stage_row(name: str, artifact, result: dict) -> dict:
    from edgekit.loaders.onnx import onnx_summary

    summary = onnx_summary(artifact.path)
    accuracy = result["accuracy"] or {}
    return {
        "stage": name,
        "precision": artifact.precision,
        "parameters": summary["parameters"],
        "size_bytes": artifact.size_bytes(),
        "gzip_bytes": gzip_size(artifact.path),
        "accuracy": accuracy.get("artifact"),
        "drop_points": accuracy.get("drop_points"),
        "p50_ms": result["latency"]["latency"]["p50"],
        "p90_ms": result["latency"]["latency"]["p90"],
        "threads": result["threads"],
    }
