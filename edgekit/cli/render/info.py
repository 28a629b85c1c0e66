"""`info` and `targets`: a model's signature, ops, delegation and provenance; int8 coverage; the runtimes found."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from edgekit.cli.render.convert import print_how_made
from edgekit.cli.render.table import console
from edgekit.metrics.coverage import share
from edgekit.report.schema import fmt, fmt_count, fmt_size


def print_info(summary: dict) -> None:
    console.print(f"[bold]{summary['model']}[/] - {summary['format']}" + (f", {summary['precision']}" if summary.get("precision") else ""))
    if summary.get("size_bytes") is not None:
        console.print(f"size on disk: {fmt_size(summary['size_bytes'])}")
    if "parameters" in summary:
        console.print(f"parameters: {summary['parameters']:,}")
    if summary.get("opset"):
        console.print(f"opset: {summary['opset']}")
    for title in ("inputs", "outputs"):
        table = Table("name", "shape", "dtype", title=title, title_justify="left")
        for spec in summary.get(title, []):
            shape = spec["shape"] if isinstance(spec["shape"], str) else "x".join(str(d) if d is not None else "?" for d in spec["shape"])
            table.add_row(spec["name"], shape, spec.get("dtype", "?"))
        if summary.get(title):
            console.print(table)
    delegate = summary.get("delegate")
    if delegate:
        cpu = ", ".join(f"{op} x{n}" for op, n in delegate["ops_on_cpu"].items()) or "none"
        console.print(
            f"{delegate['name']} delegate: {delegate['ops_on_delegate']} of {delegate['ops_total']} ops in {delegate['partitions']} partition(s); on the CPU: {cpu}"
        )
        for title, rows in (("not delegated", delegate.get("cpu_ops")), ("data movement (no arithmetic)", delegate.get("data_movement"))):
            for row in rows or []:
                console.print(f"  {title}: {row['op']} x{row['count']}: {escape(row['why'])}")
    if summary.get("ops"):
        table = Table("op", "count", title="op histogram", title_justify="left")
        for op, count in summary["ops"].items():
            table.add_row(op, str(count))
        console.print(table)
    if summary.get("provenance"):
        print_provenance(summary["provenance"])


def print_targets(rows: list[dict]) -> None:
    table = Table("target", "status", "version", "note")
    for row in rows:
        status = "[green]available[/]" if row["available"] else "[yellow]unavailable[/]"
        note = "; ".join(filter(None, (row["detail"], f"options: {row['options']}" if row.get("options") else "")))
        table.add_row(row["target"], status, row["version"], escape(note))
    console.print(table)


def print_provenance(prov: dict) -> None:
    """The sidecar's story in full, for `info`: where from, which steps, how quantized and calibrated, with what tools."""
    console.print("[bold]provenance[/]")
    source = prov.get("source") or {}
    if source:
        console.print(f"  from: {escape(str(source.get('spec')))} ({source.get('format', '?')})")
    if prov.get("steps"):
        console.print(f"  steps: {' -> '.join(prov['steps'])}")
    print_how_made(prov)
    if prov.get("versions"):
        console.print(f"  tools: {', '.join(f'{name} {version}' for name, version in prov['versions'].items())}")


def print_coverage(coverage: dict, target: str | None = None) -> None:
    """int8 coverage: the headline, then the layers left float with their MACs, and the float islands."""

    value = share(coverage)
    unit = "of its MACs" if coverage["macs_share"] is not None else "of its layers"
    where = f" on {escape(target)}" if target else ""
    console.print(
        f"int8 coverage{where}: [bold]{fmt(None if value is None else 100 * value, '.1f')}%[/] {unit} "
        f"({coverage['int8_layers']}/{coverage['layers']} multiplying layers in int8; read from {escape(coverage['read_from'])})"
    )
    if coverage["float_layers"]:
        table = Table("float layer", "op", "MACs", "share", title="layers left float", title_justify="left")
        for layer in coverage["float_layers"]:
            share_text = fmt(None if layer["macs_share"] is None else 100 * layer["macs_share"], ".1f")
            table.add_row(escape(layer["name"]), layer["op"], fmt_count(layer["macs"]), share_text + "%")
        console.print(table)
    if coverage["islands"]:
        islands = ", ".join(f"{x['name']} ({x['op']})" for x in coverage["islands"])
        console.print("float islands (float ops between int8 ones): " + escape(islands))
