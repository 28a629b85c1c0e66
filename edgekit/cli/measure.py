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
    reference: str = typer.Option(..., "--reference", "-r", help="The original model: file or module:factory."),
    data: str = typer.Option(
        None, "--data", "-d", help=".npz keyed by input name (+ optional `labels`), .npy, image folder or module:function."
    ),
    target: str = options.TARGET,
    report: Path = typer.Option(None, "--report", help="Write the JSON report here."),
    inputs: list[str] = options.INPUT,
    weights: str = options.WEIGHTS,
    allow_pickle: bool = options.ALLOW_PICKLE,
    limit: int = typer.Option(None, "--limit", help="Use at most N samples of DATA (seeded)."),
    preprocess: str = options.PREPROCESS,
    threads: int = options.THREADS,
    warmup: int = WARMUP,
    runs: int = RUNS,
    batch: int = BATCH,
    max_drop: float = typer.Option(None, "--max-drop", help="Gate: fail (exit 2) if accuracy falls more than this many points."),
    min_cosine: float = typer.Option(
        None, "--min-cosine", help="Gate: fail (exit 2) if any output's mean cosine similarity is below this."
    ),
    min_agreement: float = typer.Option(
        None, "--min-agreement", help="Gate: fail (exit 2) if top-1 agreement with the reference is below this percent."
    ),
    max_npu_fallback: float = typer.Option(
        None, "--max-npu-fallback", help="Gate: fail (exit 2) if more than this percent of ops fall back to the CPU on the NPU."
    ),
) -> None:
    """Compare an artifact with its reference on the same inputs, time it, and gate the result."""
    from edgekit.cli.render import print_validation
    from edgekit.loaders import open_source
    from edgekit.validate.benchmark import BenchSettings
    from edgekit.validate.gate import Thresholds
    from edgekit.validate.report import write_json
    from edgekit.validate.validation import ValidationRequest
    from edgekit.validate.validation import validate as run_validation

    request = ValidationRequest(
        open_source(artifact),
        open_source(reference, weights, allow_pickle),
        target,
        data,
        limit,
        preprocess,
        options.input_specs(inputs),
        latency=BenchSettings(target, threads, batch, warmup, runs),
        thresholds=Thresholds(max_drop, min_cosine, min_agreement, max_npu_fallback),
    )
    result = run_validation(request)
    if report:
        write_json(result, report)
    print_validation(result)
    if not result["gate"]["passed"]:
        raise typer.Exit(2)


def bench(
    artifacts: list[str] = typer.Argument(..., help="One or more model files."),
    target: str = options.TARGET,
    threads: int = options.THREADS,
    batch: int = BATCH,
    warmup: int = WARMUP,
    runs: int = RUNS,
    inputs: list[str] = options.INPUT,
    report: Path = typer.Option(None, "--report", help="Write the JSON report here."),
) -> None:
    """Load time, first inference, then p50/p90/p99/mean/std/min latency after warm-up, throughput, peak RSS, size."""
    from edgekit.cli.render import print_bench
    from edgekit.loaders import open_source
    from edgekit.validate.benchmark import BenchSettings
    from edgekit.validate.benchmark import bench as run_bench
    from edgekit.validate.report import new_report, write_json

    settings = BenchSettings(target, threads, batch, warmup, runs)
    specs = list(options.input_specs(inputs)) or None
    results = [run_bench(open_source(a), settings, specs).to_dict() for a in artifacts]
    result = new_report("bench", tuple({r["target"].split(":")[0] for r in results}))
    result["results"] = results
    if report:
        write_json(result, report)
    print_bench(result)
