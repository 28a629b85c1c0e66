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
    from edgekit import api
    from edgekit.cli.render import print_compression

    result = api.prune(
        model, method, output, inputs=inputs, weights=weights, allow_pickle=allow_pickle, sparsity=sparsity, scope=scope,
        channels=channels, energy=energy, keep=keep, clusters=clusters, init=init, surgery=surgery, data=data, finetune=finetune,
        epochs=epochs, lr=lr, precision=precision, calib=calib, threads=threads, max_size_mb=max_size_mb, size_metric=size_metric,
        report=report, emit_recipe=emit_recipe,
    )  # fmt: skip
    print_compression(result.to_dict())
    if not result.passed:
        raise typer.Exit(2)
