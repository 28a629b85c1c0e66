"""`prune`: run one compression stage, save a loadable model, and compare every stage on real data."""

from __future__ import annotations

import gzip
import logging
from dataclasses import replace
from pathlib import Path

import numpy as np

from edgekit import progress, registry
from edgekit.artifact import TensorSpec
from edgekit.calibration import load_samples
from edgekit.compress import METHODS, PruneOptions, StageReport, method_chain
from edgekit.errors import EdgekitError
from edgekit.fileio import atomic_output
from edgekit.imports import import_attr
from edgekit.native import third_party_quiet
from edgekit.source import ModelSource

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
    chain = method_chain(options.method)
    if not chain or any(m not in METHODS for m in chain):
        raise EdgekitError(
            f"unknown compression method '{options.method}'", hint=f"choose one of: {', '.join(METHODS)} (or a chain: magnitude,cluster)"
        )
    pruner = registry.backend(source.family).pruner
    if pruner is None:
        raise EdgekitError(
            f"edgekit prunes {registry.titles(lambda b: b.pruner)} models, not {source.format}",
            hint="prune the original model, then convert",
        )
    with progress.step(f"{source.name}: {options.method}"), third_party_quiet():
        return import_attr(pruner)(source, options, out, inputs, data, finetune_data)


STAGE_NAMES = {"magnitude": "pruned", "cluster": "clustered", "channels": "channels", "lowrank": "lowrank"}


def prune_torch(source, options, out, inputs, data, finetune_data) -> StageReport:
    """The PyTorch pruner (the registry names it): each method of the chain in turn, saved as .pt2."""
    from edgekit.backends.torch.loader import example_tensors
    from edgekit.conversion import load_for_conversion

    module, specs = load_for_conversion(source, inputs)
    calibration = load_samples(data, 512, 0, None, specs) if data else None
    train = load_samples(finetune_data, None, 0, None, specs) if finetune_data else None
    if options.epochs and train is None:
        raise EdgekitError("--epochs needs labelled training data", hint="pass --finetune DATA with a `labels` array")
    example = example_tensors(specs, 1)
    example = example[0] if len(example) == 1 else example
    model, snapshots, reports = module, [("original", module)], []
    for method in method_chain(options.method):
        model, report = _torch_stage(model, replace(options, method=method), example, calibration, train)
        snapshots.append((STAGE_NAMES[method], model))
        reports.append(report)
    save_exported(model, specs, out)
    combined = _chained(options.method, reports)
    combined.storage = storage_rows(snapshots, load_samples(data, None, 0, None, specs) if data else None)
    return combined


def _torch_stage(model, options, example, calibration, train):
    from edgekit.compress import torch_prune

    if options.method == "magnitude":
        return torch_prune.magnitude_prune(model, options, train)
    if options.method == "cluster":
        from edgekit.compress.sharing import cluster_torch

        return cluster_torch(model, options, train)
    if options.method == "channels":
        return torch_prune.channel_prune(model, options, example, calibration, train)
    return torch_prune.lowrank_factorize(model, options, example, train)


def _chained(method: str, reports: list[StageReport]) -> StageReport:
    """One report for a chain of stages: counts from its ends, the last stage's layers, every note."""
    first, last = reports[0], reports[-1]
    macs = [r for r in reports if r.macs_before is not None]
    return StageReport(
        method,
        first.parameters_before,
        last.parameters_after,
        last.nonzero_after,
        macs[0].macs_before if macs else None,
        macs[-1].macs_after if macs else None,
        layers=last.layers,
        notes=[note for r in reports for note in r.notes],
    )


def storage_rows(snapshots: list[tuple[str, object]], samples) -> list[dict]:
    """Deep Compression's storage table for each (stage, module), plus the last stage's weights in int8; torch accuracy on `samples`."""
    from edgekit.metrics.coding import int8_weights, storage_table

    rows = []
    for stage, model in snapshots:
        weights, others = _weights(model)
        rows.append({"stage": stage, **storage_table(weights, others), "accuracy": _torch_accuracy(model, samples)})
    weights, others = _weights(snapshots[-1][1])
    int8 = storage_table({n: int8_weights(w) for n, w in weights.items()}, others)
    rows.append({"stage": "int8", **int8, "accuracy": None})  # accuracy: the int8 ONNX row of compare_stages
    return rows


def _weights(model) -> tuple[dict, dict]:
    """(Conv/Linear weights, every other parameter) as numpy arrays."""
    from edgekit.compress.torch_prune import prunable

    kernels = {f"{n}.weight": m.weight for n, m in prunable(model)}
    ids = {id(w) for w in kernels.values()}
    others = {n: p for n, p in model.named_parameters() if id(p) not in ids}
    return {n: w.detach().cpu().numpy() for n, w in kernels.items()}, {n: p.detach().cpu().numpy() for n, p in others.items()}


def _torch_accuracy(model, samples, batch: int = 500) -> float | None:
    import torch

    from edgekit.metrics.compare import accuracy_percent

    if samples is None or samples.labels is None:
        return None
    model.eval()
    with torch.no_grad():
        logits = [model(*[torch.from_numpy(v) for v in feeds.values()]).numpy() for feeds in samples.batches(batch)]
    return accuracy_percent(np.concatenate(logits), samples.labels)


def save_exported(model, specs: list[TensorSpec], out: Path) -> None:
    """Save as a .pt2 exported program with a dynamic batch axis (loadable by edgekit and torch.export.load)."""
    import torch

    from edgekit.backends.torch.loader import batch_dynamic_shapes, example_tensors

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
    name: str = "pruned",
) -> list[dict]:
    """Rows for original, compressed (`name`) and (optionally) compressed + `precision`: all converted to ONNX and run in ONNX Runtime."""
    from edgekit.conversion import CalibrationOptions, ConvertOptions
    from edgekit.converters.pipeline import convert
    from edgekit.source import open_source
    from edgekit.validate.benchmark import BenchSettings
    from edgekit.validate.validation import ValidationRequest, validate

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
    from edgekit.backends.onnx.loader import onnx_summary, read_onnx
    from edgekit.backends.onnx.macs import total_macs
    from edgekit.metrics.coding import onnx_coded_bytes

    summary = onnx_summary(artifact.path)
    accuracy = result["accuracy"] or {}
    size, packed, coded = artifact.size_bytes(), gzip_size(artifact.path), onnx_coded_bytes(artifact.path)
    return {
        "stage": name,
        "precision": artifact.precision,
        "parameters": summary["parameters"],
        "macs": total_macs(read_onnx(artifact.path)),
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
    from edgekit.metrics.gate import check_row, failures

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
