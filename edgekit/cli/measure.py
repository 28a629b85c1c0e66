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
    """Compare an artifact with its reference on the same inputs, time it, and gate the result."""
    from edgekit.cli.render import print_validation
    from edgekit.loaders import open_source
    from edgekit.validate.benchmark import BenchSettings
    from edgekit.validate.report import write_json
    from edgekit.validate.validation import ValidationRequest
    from edgekit.validate.validation import validate as run_validation

    _check_destinations(report, emit_recipe)
    request = ValidationRequest(
        # The reference itself on another target (torch:cuda, compile, fp16) takes the same weights.
        open_source(artifact, weights if artifact == reference else None, allow_pickle),
        open_source(reference, weights, allow_pickle),
        target,
        data,
        limit,
        preprocess,
        options.input_specs(inputs),
        latency=BenchSettings(target, threads, batch, warmup, runs),
        thresholds=options.thresholds(max_drop, min_cosine, min_agreement, min_snr, max_npu_fallback),
        task=task,
        default_gates=not no_default_gates,
    )
    if emit_recipe:
        _emit_validate(emit_recipe, request, reference, weights, inputs, data, limit)
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
    weights: str = options.WEIGHTS,
    allow_pickle: bool = options.ALLOW_PICKLE,
    report: Path = typer.Option(None, "--report", help="Write the JSON report here."),
    emit_recipe: Path = options.EMIT_RECIPE,
) -> None:
    """Load time, first inference, then p50/p90/p99/mean/std/min latency after warm-up, throughput, peak RSS, size."""
    _check_destinations(report, emit_recipe)
    from edgekit.cli.render import print_bench
    from edgekit.loaders import open_source
    from edgekit.validate.benchmark import BenchSettings
    from edgekit.validate.benchmark import bench as run_bench
    from edgekit.validate.report import new_report, write_json

    settings = BenchSettings(target, threads, batch, warmup, runs)
    specs = list(options.input_specs(inputs)) or None
    if emit_recipe:
        _emit_bench(emit_recipe, artifacts, settings, inputs)
    results = [run_bench(open_source(a, weights, allow_pickle), settings, specs).to_dict() for a in artifacts]
    result = new_report("bench", tuple({r["target"].split(":")[0] for r in results}))
    result["results"] = results
    if report:
        write_json(result, report)
    print_bench(result)


def _emit_validate(path, request, reference, weights, inputs, data, limit) -> None:
    """The recipe: the reference as the model, the artifact's format and precision, its calibration, these gates."""
    from edgekit.converters.pipeline import DESCRIBERS, describe, read_provenance
    from edgekit.recipe.write import emit
    from edgekit.targets import DEFAULT_TARGET

    artifact = describe(request.artifact.path, request.artifact.format, None) if request.artifact.format in DESCRIBERS else None
    fmt = request.artifact.format
    calibration = (read_provenance(request.artifact.path) or {}).get("calibration") or {}
    lat = request.latency
    emit(
        path,
        model=reference,
        weights=weights,
        inputs=inputs or (),
        formats=[fmt],
        precisions=[artifact.precision if artifact else "fp32"],
        targets={fmt: [request.target or DEFAULT_TARGET[fmt]]},
        calibration={"path": calibration.get("source"), "samples": calibration.get("samples"), "method": calibration.get("method")},
        validation={"path": data, "limit": limit},
        latency={"threads": lat.threads, "batch": lat.batch, "warmup": lat.warmup, "runs": lat.runs},
        gates=request.thresholds.to_dict(),
    )


def _emit_bench(path, artifacts, settings, inputs) -> None:
    """The recipe: each artifact as a model run as it is (fp32 = no precision pass), with these latency settings."""
    from edgekit.errors import EdgekitError
    from edgekit.loaders import open_source
    from edgekit.recipe.write import emit

    if len(artifacts) != 1:
        raise EdgekitError("--emit-recipe writes one recipe per artifact", hint="bench one artifact at a time to emit its recipe")
    fmt = open_source(artifacts[0]).format
    emit(
        path,
        model=artifacts[0],
        inputs=inputs or (),
        formats=[fmt],
        precisions=["fp32"],
        targets={fmt: [settings.target]} if settings.target else None,
        latency={"threads": settings.threads, "batch": settings.batch, "warmup": settings.warmup, "runs": settings.runs},
    )


def _check_destinations(report: Path | None, recipe: Path | None) -> None:
    """A report or recipe path that cannot be written fails before the run, not after it."""
    from edgekit.fileio import check_output_path

    if report is not None:
        check_output_path(report, "--report", "report.json")
    if recipe is not None:
        check_output_path(recipe, "--emit-recipe", "recipe.yaml")
