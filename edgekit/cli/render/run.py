"""`run` (and `demo`): a recipe's matrix and its gates; `gate`: a saved report's gates checked again."""

from __future__ import annotations

import os
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from edgekit.cli.render.table import console, gate_verdict, value_and_limit
from edgekit.report.tables import cells, columns, failed_gates, machine_text, precision_label, row_notes


def print_run(result: dict, written) -> None:

    table = Table(
        *columns(result["rows"]), title=f"{result['model']}: gates {'passed' if result['passed'] else 'FAILED'}", title_justify="left"
    )
    for row in result["rows"]:
        style = "" if row.get("passed") else "red"
        table.add_row(*map(escape, cells(row)), style=style)
    console.print(table)
    for note in row_notes(result):
        console.print(f"[yellow]{escape(note)}[/]")
    for line in failed_gates(result):
        console.print(f"[red]FAIL {escape(line)}[/]")
    if result["rows"]:
        console.print(f"[dim]measured on {machine_text(result)}; reports: {', '.join(str(p) for p in written)}[/]")
    published = [Path(r["published"]).parent for r in result["rows"] if r.get("published")]
    if published:
        names = ", ".join(dict.fromkeys(p.name for p in published))
        console.print(f"[dim]artifacts: {escape(str(published[0].parent))}{os.sep}{{{escape(names)}}}[/]")


def print_tune(result: dict, written) -> None:
    """The candidates' table, then the choice (or the closest miss) and where it was written."""
    print_run(result, written)
    choice, search = result["choice"], result["search"]
    fallback = f" and {search['fallback_cells']} int8+fallback" if search.get("fallback_cells") else ""
    measured = (
        f"{search['candidates']} candidates of {search['cells']} cells{fallback}, {search['timings']} timings, {search['seconds']:.0f} s"
    )
    if choice:
        threads = f"{choice['threads']} thread{'s' if choice['threads'] > 1 else ''}"
        console.print(
            f"[bold green]chosen: {escape(choice['format'])} {escape(precision_label(choice))} on {escape(choice['target'])}, {threads}"
            f"{_speed(choice)}[/] ({measured}); {escape(str(choice.get('published') or choice['artifact']))}"
        )
    else:
        console.print(f"[bold red]nothing passes the gates[/] ({measured})")


def _speed(choice: dict) -> str:
    """': p50 0.154 ms', or a language model's decode speed."""
    if choice.get("p50_ms") is not None:
        return f": p50 {choice['p50_ms']:.3f} ms"
    return f": {choice['tokens_per_s']:.1f} tokens/s" if choice.get("tokens_per_s") else ""


def print_gate_check(result: dict) -> None:
    table = Table("format", "precision", "target", "metric", "value", "limit", "result", "why")
    for row in result["rows"]:
        if row["status"] != "ok":
            table.add_row(row["format"], row["precision"], escape(row["target"]), "run", "-", "-", "[red]error[/]", row["status"])
        for g in row.get("gates", []):
            table.add_row(
                row["format"],
                row["precision"],
                escape(row["target"]),
                g["metric"],
                *value_and_limit(g),
                gate_verdict(g["passed"]),
                g["reason"],
            )
    console.print(table)
    console.print("[bold green]all gates passed[/]" if result["passed"] else "[bold red]gates failed[/]")
