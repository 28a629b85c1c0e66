"""`edgekit run`, `edgekit init`, `edgekit report`, `edgekit gate`."""

from __future__ import annotations

import sys
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
) -> None:
    """Run a recipe's matrix; write the reports; exit 2 if a gate failed, 1 if a cell failed."""
    from edgekit.cli.render import console, escape, print_run
    from edgekit.recipe.cache import report_folder
    from edgekit.recipe.reports import write_reports
    from edgekit.recipe.run import run_recipe
    from edgekit.recipe.schema import load_recipe

    parsed = load_recipe(recipe)
    progress = None if quiet else (lambda text: console.print(f"[dim]... {escape(text)}[/]", highlight=False))
    with report_folder(Path(parsed.resolve(parsed.report.dir))) as folder:
        result = run_recipe(parsed, use_cache=not no_cache, progress=progress)
        written = write_reports(result, folder, parsed.report.formats)
    print_run(result, written)
    raise typer.Exit(exit_code(result))


def exit_code(result: dict) -> int:
    """0 all passed; 2 a gate failed; 1 a cell could not run (and no gate failed)."""
    if any(r["status"] == "ok" and not r["passed"] for r in result["rows"]):
        return 2
    return 0 if result["passed"] else 1


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
    from edgekit.loaders import open_source
    from edgekit.recipe.write import starter, write_text

    open_source(model, weights)  # fail now on a model that cannot be found
    write_text(output, starter(model, output.name, weights, inputs or [], calib, val), force)
    print(f"wrote {output}: fill in the TODOs, then `edgekit run {output}`")


def report(
    saved: Path = typer.Argument(..., help="A JSON report from `edgekit run`."),
    format: str = typer.Option("md", "--format", "-f", help="md, html or junit."),
    output: Path = typer.Option(None, "--output", "-o", help="Write here instead of standard output."),
) -> None:
    """Render a saved matrix report."""
    from edgekit.errors import EdgekitError
    from edgekit.recipe.reports import RENDERERS, render
    from edgekit.recipe.write import write_text
    from edgekit.validate.report import load_json

    data = load_json(saved)
    if format not in RENDERERS:
        raise EdgekitError(f"unknown report format '{format}'", hint=f"choose one of: {', '.join(RENDERERS)}")
    if "rows" not in data:
        raise EdgekitError(f"{saved} is a {data.get('kind')} report, not a matrix report", hint="render reports written by `edgekit run`")
    text = render(data, format)
    if output:
        write_text(output, text, force=True)
    else:
        sys.stdout.write(text + "\n")


def gate(
    saved: Path = typer.Argument(..., help="A JSON report from `edgekit run`."),
    baseline: Path = typer.Option(
        None, "--baseline", help="An earlier report: flag latency regressions larger than the run-to-run spread."
    ),
    tolerance: float = typer.Option(0.05, "--tolerance", help="Latency regression allowed beyond noise (0.05 = 5%)."),
    junit: Path = typer.Option(None, "--junit", help="Write the gate results as JUnit XML."),
) -> None:
    """Re-check a saved report's gates (and latency against a baseline); exit 2 if any fails."""
    from edgekit.cli.render import print_gate_check
    from edgekit.recipe.gating import regate
    from edgekit.recipe.reports import to_junit
    from edgekit.recipe.write import write_text

    result = regate(_matrix_report(saved), _matrix_report(baseline) if baseline else None, tolerance)
    if junit:
        write_text(junit, to_junit(result), force=True)
    print_gate_check(result)
    raise typer.Exit(exit_code(result))


def _matrix_report(path: Path) -> dict:
    """A saved `edgekit run` report (a JSON object with rows), or a clear error naming the file."""
    from edgekit.errors import EdgekitError
    from edgekit.validate.report import load_json

    data = load_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        kind = data.get("kind") if isinstance(data, dict) else type(data).__name__
        raise EdgekitError(
            f"{path} is not a matrix report (it is a {kind or 'JSON object without rows'})",
            hint="gate reads the report.json written by `edgekit run`; validate gates itself with --max-drop/--min-agreement",
        )
    problem = _matrix_problem(data)
    if problem:
        raise EdgekitError(f"{path} is a damaged matrix report: {problem}", hint="re-run `edgekit run` to write it again")
    return data


def _matrix_problem(data: dict) -> str | None:
    """What makes a matrix report unusable for gating (a hand edit, a truncation), or None."""
    from edgekit.validate.gate import CHECKS, Thresholds

    limits = data.get("thresholds", {})
    if not isinstance(limits, dict) or set(limits) - set(Thresholds.__dataclass_fields__):
        return "'thresholds' is not a mapping of known gate names"
    if any(not _number(v) for v in limits.values()):
        return "a threshold is not a number"
    numeric = {key for key, *_ in CHECKS.values()}
    for i, row in enumerate(data["rows"]):
        if not isinstance(row, dict) or not all(isinstance(row.get(k), str) for k in ("format", "precision", "target", "status")):
            return f"row {i} lacks format/precision/target/status"
        if any(not _number(row.get(k)) for k in numeric):
            return f"row {i} has a non-numeric measurement"
        times = row.get("times_ms")
        if times is not None and not (isinstance(times, list) and times and all(_number(t) and t > 0 for t in times)):
            return f"row {i} has bad times_ms"
    return None


def _number(value) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and value == value)
