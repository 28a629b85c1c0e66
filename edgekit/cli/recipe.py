"""`edgekit run`, `edgekit init`, `edgekit report`, `edgekit gate`."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

import typer

from edgekit.cli import options


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.command("init")(init)
    app.command("report")(report)
    app.command("gate")(gate)


def run(
    recipe: Path = typer.Argument(..., help="The recipe (edgekit.yaml)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Convert every cell again, even when a cached artifact matches."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress, only the table and errors (for CI logs)."),
    ray: bool = typer.Option(
        False,
        "--ray",
        help="Run the host-side work (conversion, calibration, accuracy) as Ray tasks; timings still run alone on their machine. "
        "`--ray` starts a local Ray; `--ray auto` or `--ray ray://HEAD:10001` joins a cluster (docs/scale.md).",
    ),
    address: str = typer.Argument(None, metavar="[ADDRESS]", help="With --ray: the Ray cluster to join (auto, ray://HEAD:10001)."),
    ray_cpus: int = typer.Option(None, "--ray-cpus", help="CPUs of the local Ray that --ray starts (default: this machine's cores)."),
) -> None:
    """Run a recipe's matrix; write the reports; exit 2 if a gate failed, 1 if a cell failed."""
    from edgekit import api
    from edgekit.cli.render import print_run

    try:
        with _progress(parse_cells(recipe) if ray and not quiet else None, quiet) as progress:
            result = api.run(recipe, no_cache=no_cache, ray=ray, address=address, ray_cpus=ray_cpus, progress=progress)
    except KeyboardInterrupt:
        print("interrupted: finished cells stay in the cache; run the recipe again to resume", file=sys.stderr)
        raise typer.Exit(130) from None
    print_run(result.to_dict(), result.written)
    raise typer.Exit(result.exit_code)


def parse_cells(recipe: Path) -> list:
    from edgekit.recipe.schema import load_recipe

    return load_recipe(recipe).matrix.cells()


@contextmanager
def _progress(cells: list | None, quiet: bool):
    """Progress lines for a serial run, one live table for --ray (`cells`), nothing with --quiet."""
    from edgekit.cli.render import console, escape

    if quiet:
        yield None
    elif cells is None:
        yield lambda text: console.print(f"[dim]... {escape(text)}[/]", highlight=False)
    else:
        from edgekit.cli.progress import MatrixView

        with MatrixView(cells) as view:
            yield view


def init(
    model: str = typer.Argument(..., help="The model the recipe starts from (file or module:factory)."),
    output: Path = typer.Option(Path("edgekit.yaml"), "--output", "-o", help="Where to write the recipe."),
    inputs: list[str] = options.INPUT,
    weights: str = options.WEIGHTS,
    calib: str = typer.Option(None, "--calib", help="Calibration data to put in the recipe."),
    val: str = typer.Option(None, "--val", help="Labelled validation data to put in the recipe."),
    force: bool = typer.Option(False, "--force", help="Replace an existing file."),
) -> None:
    """Write a commented starter recipe for MODEL."""
    from edgekit.source import open_source
    from edgekit.recipe.write import write_starter

    open_source(model, weights)  # fail now on a model that cannot be found
    todos = write_starter(output, model, weights, inputs or [], calib, val, force)
    fill = f"fill in {', '.join(todos)} (or delete those sections), then " if todos else ""
    print(f"wrote {output}: {fill}`edgekit run {output}`")


def report(
    saved: Path = typer.Argument(..., help="A JSON report from `edgekit run`, `validate`, `bench` or `prune`."),
    format: str = typer.Option("md", "--format", "-f", help="md, html or junit."),
    output: Path = typer.Option(None, "--output", "-o", help="Write here instead of standard output."),
) -> None:
    """Render a saved report (any kind) as Markdown, HTML or JUnit."""
    from edgekit.errors import EdgekitError
    from edgekit.recipe.gating import regate
    from edgekit.report.write import RENDERERS, render
    from edgekit.recipe.write import write_text
    from edgekit.report.schema import load_json

    if format not in RENDERERS:
        raise EdgekitError(f"unknown report format '{format}'", hint=f"choose one of: {', '.join(RENDERERS)}")
    data = load_json(saved)
    text = render(data if data["kind"] == "matrix" else regate(data, None), format)
    if output:
        write_text(output, text, force=True)
    else:
        sys.stdout.write(text + "\n")


def gate(
    saved: Path = typer.Argument(..., help="A JSON report from `edgekit run`, `validate`, `bench` or `prune`."),
    baseline: Path = typer.Option(None, "--baseline", help="An earlier report of the same kind: check latency against it."),
    baseline_artifact: str = typer.Option(
        None,
        "--baseline-artifact",
        help="The baseline's model file, when its report's artifact path is not at hand: both are re-timed here.",
    ),
    tolerance: float = typer.Option(0.10, "--tolerance", help="The smallest latency regression that counts (0.10 = 10%)."),
    max_rounds: int = typer.Option(8, "--max-rounds", help="Re-timing: at most this many A-B-B-A rounds before INCONCLUSIVE."),
    reports_only: bool = typer.Option(
        False, "--reports-only", help="Judge latency from the two reports' times, without re-timing (flags only gross changes)."
    ),
    junit: Path = typer.Option(None, "--junit", help="Write the gate results as JUnit XML."),
    max_drop: float = options.MAX_DROP,
    min_cosine: float = options.MIN_COSINE,
    min_agreement: float = options.MIN_AGREEMENT,
    min_snr: float = options.MIN_SNR,
    max_npu_fallback: float = options.MAX_NPU_FALLBACK,
    no_default_gates: bool = options.NO_DEFAULT_GATES,
) -> None:
    """Re-check a saved report's gates (threshold options replace the report's own) and latency vs a baseline; exit 2 if any fails."""
    from edgekit import api
    from edgekit.cli.render import console, escape, print_gate_check

    result = api.gate(
        saved, baseline=baseline, baseline_artifact=baseline_artifact, tolerance=tolerance, max_rounds=max_rounds,
        reports_only=reports_only, junit=junit, max_drop=max_drop, min_cosine=min_cosine, min_agreement=min_agreement,
        min_snr=min_snr, max_npu_fallback=max_npu_fallback, no_default_gates=no_default_gates,
        progress=lambda text: console.print(f"[dim]... {escape(text)}[/]", highlight=False),
    )  # fmt: skip
    print_gate_check(result.to_dict())
    raise typer.Exit(result.exit_code)
