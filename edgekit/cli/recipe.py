"""`edgekit run`, `edgekit tune`, `edgekit init`, `edgekit report`, `edgekit gate`."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

import typer

from edgekit.cli import options
from edgekit.cli.options import command
from edgekit.commands import GATE, RUN, TUNE
from edgekit.errors import EdgekitError
from edgekit.recipe.gating import regate
from edgekit.recipe.schema import load_recipe
from edgekit.recipe.write import write_starter, write_text
from edgekit.report.schema import load_json
from edgekit.source import open_source


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.command("tune")(tune)
    app.command("init")(init)
    app.command("report")(report)
    app.command("gate")(gate)


@command(RUN)
def run(recipe: Path, quiet: bool, **values) -> None:
    """Run a recipe's matrix; write the reports; exit 2 if a gate failed, 1 if a cell failed."""
    from edgekit import api
    from edgekit.cli.render.run import print_run

    try:
        with _progress(parse_cells(recipe) if values["ray"] and not quiet else None, quiet) as progress:
            result = api.run(recipe, **values, progress=progress)
    except KeyboardInterrupt:
        print("interrupted: finished cells stay in the cache; run the recipe again to resume", file=sys.stderr)
        raise typer.Exit(130) from None
    print_run(result.to_dict(), result.written)
    raise typer.Exit(result.exit_code)


@command(TUNE)
def tune(quiet: bool, **values) -> None:
    """Find, by measurement on the targets, the fastest artifact that passes the gates; exit 2 if nothing passes."""
    from edgekit import api
    from edgekit.cli.render.run import print_tune

    with _progress(None, quiet) as progress:
        result = api.tune(**values, progress=progress)
    print_tune(result.to_dict(), result.written)
    raise typer.Exit(result.exit_code)


def parse_cells(recipe: Path) -> list:

    return load_recipe(recipe).matrix.cells()


@contextmanager
def _progress(cells: list | None, quiet: bool):
    """Progress lines for a serial run, one live table for --ray (`cells`), nothing with --quiet."""
    from edgekit.cli.render.table import console, escape

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
    from edgekit.report.write import RENDERERS, render

    if format not in RENDERERS:
        raise EdgekitError(f"unknown report format '{format}'", hint=f"choose one of: {', '.join(RENDERERS)}")
    data = load_json(saved)
    text = render(data if data["kind"] == "matrix" else regate(data, None), format)
    if output:
        write_text(output, text, force=True)
    else:
        sys.stdout.write(text + "\n")


@command(GATE)
def gate(**values) -> None:
    """Re-check a saved report's gates (threshold options replace the report's own) and latency vs a baseline; exit 2 if any fails."""
    from edgekit import api
    from edgekit.cli.render.run import print_gate_check
    from edgekit.cli.render.table import console, escape

    result = api.gate(**values, progress=lambda text: console.print(f"[dim]... {escape(text)}[/]", highlight=False))
    print_gate_check(result.to_dict())
    raise typer.Exit(result.exit_code)
