"""`edgekit prune`."""

from __future__ import annotations

from pathlib import Path

import typer

from edgekit.cli import options


def register(app: typer.Typer) -> None:
    app.command("prune")(prune)


def prune(
    model: str = typer.Argument(..., help="PyTorch (.pt2, TorchScript, module:factory) or Keras model."),
    method: str = typer.Option(
        ...,
        "--method",
        "-m",
        help="magnitude (unstructured), cluster (weight sharing), channels (structured), lowrank (Linear/Dense SVD); "
        "a chain runs in order: magnitude,cluster.",
    ),
    output: Path = typer.Option(..., "--output", "-o", help="The compressed model: .pt2 for PyTorch, .keras for Keras."),
    inputs: list[str] = options.INPUT,
    weights: str = options.WEIGHTS,
    allow_pickle: bool = options.ALLOW_PICKLE,
    sparsity: float = typer.Option(0.5, "--sparsity", help="magnitude: fraction of weights set to zero."),
    scope: str = typer.Option("global", "--scope", help="magnitude: global (one threshold) or layer (per layer)."),
    channels: float = typer.Option(0.3, "--channels", help="channels: fraction of channels removed per layer."),
    energy: float = typer.Option(None, "--energy", help="lowrank: keep singular values holding this share of the energy (e.g. 0.9)."),
    keep: float = typer.Option(0.5, "--keep", help="lowrank (without --energy): fraction of each layer's parameters to keep."),
    clusters: int = typer.Option(16, "--clusters", help="cluster: shared non-zero values per layer (k-means)."),
    init: str = typer.Option("linear", "--init", help="cluster: centroid initialisation, linear or density."),
    surgery: bool = typer.Option(
        False,
        "--surgery",
        help="magnitude + --epochs: dynamic network surgery (masks recomputed while fine-tuning; cut weights may return).",
    ),
    data: str = typer.Option(None, "--data", "-d", help="Labelled data: batch-norm recalibration and the stage comparison."),
    finetune: str = typer.Option(None, "--finetune", help="Labelled training data for fine-tuning (PyTorch)."),
    epochs: int = typer.Option(0, "--epochs", help="Fine-tuning epochs (magnitude: a gradual sparsity schedule over them)."),
    lr: float = typer.Option(1e-3, "--lr", help="Fine-tuning learning rate."),
    precision: str = typer.Option(
        None, "--precision", "-p", help="Also compare the pruned model at this precision (e.g. int8) in the stage table."
    ),
    calib: str = typer.Option(None, "--calib", help="Calibration data for --precision int8."),
    threads: int = options.THREADS,
    max_size_mb: float = typer.Option(None, "--max-size-mb", help="Gate: the compressed model's size (exit 2 when over)."),
    size_metric: str = typer.Option("stored", "--size-metric", help="What --max-size-mb limits: stored, gzip or coded (entropy-coded)."),
    report: Path = typer.Option(None, "--report", help="Write the JSON report here."),
    emit_recipe: Path = options.EMIT_RECIPE,
) -> None:
    """Compress a model (prune or factorize), save it, and compare original vs pruned (vs quantized) on data."""
    from edgekit.cli.render import print_compression
    from edgekit.compress import PruneOptions, method_chain
    from edgekit.compress.pipeline import STAGE_NAMES, compare_stages, fill_int8_accuracy, gate_compressed
    from edgekit.compress.pipeline import prune as run_prune
    from edgekit.loaders import open_source
    from edgekit.validate.report import new_report, write_json

    source = open_source(model, weights, allow_pickle)
    if emit_recipe:
        from edgekit.recipe.write import emit

        stage = {
            "method": method,
            "sparsity": sparsity,
            "scope": scope,
            "channels": channels,
            "energy": energy,
            "keep": keep,
            "epochs": epochs,
            "finetune": finetune,
            **({"clusters": clusters, "init": init} if "cluster" in method else {}),
            **({"surgery": True} if surgery else {}),
        }
        emit(
            emit_recipe,
            model=model,
            weights=weights,
            inputs=inputs or (),
            formats=["onnx"],
            precisions=["fp32", *([precision] if precision else [])],
            calibration={"path": calib},
            validation={"path": data},
            latency={"threads": threads},
            compress=[{k: v for k, v in stage.items() if v is not None}],
            gates={k: v for k, v in {"max_size_mb": max_size_mb, "size_metric": size_metric}.items() if max_size_mb is not None},
        )
    limits = _size_gate(max_size_mb, size_metric)
    prune_options = PruneOptions(
        method, sparsity, scope, channels, energy, None if energy else keep, epochs, lr, clusters=clusters, init=init, surgery=surgery
    )
    specs = list(options.input_specs(inputs))
    stage = run_prune(source, prune_options, output, specs, data, finetune)
    result = new_report("prune", ("torch", "onnxruntime"))
    result.update(model=model, output=str(output), options=prune_options.__dict__, stage=stage.to_dict(), stages=[])
    if data and source.family == "torch":
        name = STAGE_NAMES[method_chain(method)[-1]]
        workdir = output.parent / f"{output.stem}.stages"
        result["stages"] = compare_stages(source, output, specs, data, workdir, precision, calib, threads, name=name)
        fill_int8_accuracy(result["stage"]["storage"], result["stages"])
    if limits:
        result["gate"] = gate_compressed(result, output, limits)
    if report:
        write_json(result, report)
    print_compression(result)
    if limits and not result["gate"]["passed"]:
        raise typer.Exit(2)


def _size_gate(max_size_mb: float | None, size_metric: str):
    from edgekit.errors import EdgekitError
    from edgekit.validate.gate import SIZE_METRICS, Thresholds

    if size_metric not in SIZE_METRICS:
        raise EdgekitError(f"unknown size metric '{size_metric}'", hint=f"choose one of: {', '.join(SIZE_METRICS)}")
    return Thresholds(max_size_mb=max_size_mb, size_metric=size_metric) if max_size_mb is not None else None
