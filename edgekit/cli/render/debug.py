"""`debug`: where int8 departs from float, tensor by tensor in graph order."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from edgekit.cli.render.table import console
from edgekit.report.schema import fmt


def print_debug(report: dict, rows_shown: int | None = None) -> None:
    """The per-tensor table of `edgekit debug` in graph order, the first jump marked, then the worst tensors."""
    console.print(
        f"[bold]{report['artifact']['path']}[/] vs {report['reference']['path']}: {report['matched']} tensors matched, "
        f"{report['data']['samples']} samples from {report['data']['source']}"
    )
    for note in report.get("input_alignment", []):
        console.print(f"  input: {note}")
    jump = report["first_jump"]
    table = Table("#", "tensor", "op", "layer", "shape", "SQNR dB", "cosine", "max abs err", "")
    rows = report["rows"] if rows_shown is None else report["rows"][:rows_shown]
    for row in rows:
        first = jump is not None and row["depth"] == jump["depth"]
        table.add_row(
            str(row["depth"]),
            escape(row["tensor"]),
            row["op"],
            escape(row["layer"]),
            "x".join(map(str, row["shape"])),
            "exact" if row["exact"] else fmt(row["sqnr_db"], ".1f"),
            f"{row['cosine']:.5f}",
            f"{row['max_abs_error']:.3g}",
            ("[bold red]<- first jump[/]" if first else "") + (" [yellow]note[/]" if row.get("notes") else ""),
        )
    console.print(table)
    if rows_shown is not None and len(report["rows"]) > rows_shown:
        console.print(f"  ... {len(report['rows']) - rows_shown} more rows in the JSON (--json)")
    rule = report["rule"]
    if jump is None:
        console.print(f"no jump: no tensor below {rule['floor_db']:g} dB or {rule['jump_db']:g} dB below the one before it")
    else:
        console.print(
            f"[bold]first jump[/]: #{jump['depth']} {escape(jump['tensor'])} ({jump['op']}, {escape(jump['layer'])}) at "
            f"{fmt(jump['sqnr_db'], '.1f')} dB (rule: below {rule['floor_db']:g} dB, or {rule['jump_db']:g} dB below the tensor before it)"
        )
    if report["worst"]:
        console.print(
            "worst: " + ", ".join(f"#{r['depth']} {escape(r['layer'])} ({r['op']}) {r['sqnr_db']:.1f} dB" for r in report["worst"])
        )
    for row in (r for r in report["rows"] if r.get("notes")):
        for note in row["notes"]:
            console.print(f"note: #{row['depth']} {escape(row['tensor'])} ({row['op']}): {escape(note)}")
    unmatched = report["unmatched"]
    for side in ("reference_only", "artifact_only"):
        names = unmatched[side]
        if names:
            more = f" ... and {len(names) - 8} more" if len(names) > 8 else ""
            console.print(f"not matched ({side.replace('_', ' ')}): {len(names)}: {escape(', '.join(names[:8]))}{more}")
    for skipped in unmatched["skipped"][:8]:
        console.print(f"not compared: {escape(skipped['tensor'])}: {escape(skipped['why'])}")
    if report.get("advice"):
        console.print(f"[yellow]advice[/]: {escape(report['advice'])}")
