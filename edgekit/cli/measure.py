"""`edgekit validate` and `edgekit bench`."""

from __future__ import annotations

from pathlib import Path

import typer

from edgekit.cli import options


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)
    app.command("bench")(bench)


WARMUP = typer.Option(10, "--warmup", help="Untimed runs before timing.")
RUNS = typer.Option(100, "--runs", help="Timed runs; percentiles are over these.")
BATCH = typer.Option(1, "--batch", help="Batch size of the latency runs.")


def validate(
    artifact: str = typer.Argument(..., help="The converted model (.onnx)."),
    reference: str = typer.Option(
        None, "--reference", "-r", help="The original model: file, module:factory or zoo: name (default: the artifact's provenance)."
    ),
    data: str = typer.Option(
        None,
        "--data",
        "-d",
        help=".npz keyed by input name (+ optional `labels`), .npy, image folder (labels: class subfolders or a labels.json), "
        "module:function or zoo: name "
        "(default: a zoo reference's validation set).",
    ),
    target: str = options.TARGET,
    report: Path = typer.Option(None, "--report", help="Write the JSON report here."),
    emit_recipe: Path = options.EMIT_RECIPE,
    inputs: list[str] = options.INPUT,
    weights: str = options.WEIGHTS,
    allow_pickle: bool = options.ALLOW_PICKLE,
    limit: int = typer.Option(None, "--limit", help="Use at most N samples of DATA (seeded)."),
    preprocess: str = options.PREPROCESS,
    threads: int = options.THREADS,
    warmup: int = WARMUP,
    runs: int = RUNS,
    batch: int = BATCH,
    task: str = typer.Option(
        None, "--task", help="classification, detection, embedding, regression or segmentation (decides the metrics); inferred when absent."
    ),
    max_drop: float = options.MAX_DROP,
    min_cosine: float = options.MIN_COSINE,
    min_agreement: float = options.MIN_AGREEMENT,
    min_snr: float = options.MIN_SNR,
    max_npu_fallback: float = options.MAX_NPU_FALLBACK,
    no_default_gates: bool = options.NO_DEFAULT_GATES,
) -> None:
    """Compare an artifact with its reference on the same inputs, time it, and gate the result.

    Without -r: the model the artifact was converted from (its provenance); without -d: a zoo model's validation set."""
    from edgekit import api
    from edgekit.cli.render import print_validation

    result = api.validate(
        artifact, reference, data, target=target, report=report, emit_recipe=emit_recipe, inputs=inputs, weights=weights,
        allow_pickle=allow_pickle, limit=limit, preprocess=preprocess, threads=threads, warmup=warmup, runs=runs, batch=batch,
        task=task, max_drop=max_drop, min_cosine=min_cosine, min_agreement=min_agreement, min_snr=min_snr,
        max_npu_fallback=max_npu_fallback, no_default_gates=no_default_gates,
    )  # fmt: skip
    print_validation(result.to_dict())
    if not result.passed:
        raise typer.Exit(2)


def bench(
    artifacts: list[str] = typer.Argument(..., help="One or more model files."),
    target: str = options.TARGET,
    threads: int = options.THREADS,
    batch: int = BATCH,
    warmup: int = WARMUP,
    runs: int = RUNS,
    inputs: list[str] = options.INPUT,
    weights: str = options.WEIGHTS,
    allow_pickle: bool = options.ALLOW_PICKLE,
    report: Path = typer.Option(None, "--report", help="Write the JSON report here."),
    emit_recipe: Path = options.EMIT_RECIPE,
) -> None:
    """Load time, first inference, then p50/p90/p99/mean/std/min latency after warm-up, throughput, peak RSS, size."""
    from edgekit import api
    from edgekit.cli.render import print_bench

    result = api.bench(
        artifacts, target=target, threads=threads, batch=batch, warmup=warmup, runs=runs, inputs=inputs, weights=weights,
        allow_pickle=allow_pickle, report=report, emit_recipe=emit_recipe,
    )  # fmt: skip
    print_bench(result.to_dict())
