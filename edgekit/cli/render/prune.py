"""`prune`: what a compression stage removed, each stage against the original, Deep Compression's storage, the gate."""

from __future__ import annotations

from rich.table import Table

from edgekit.cli.render.table import console, gate_verdict, machine_line
from edgekit.report.schema import fmt, fmt_count, fmt_size


def print_compression(report: dict) -> None:
    stage = report["stage"]
    console.print(f"[bold]{report['model']}[/] -> {report['output']} ({stage['method']})")
    line = f"parameters {stage['parameters_before']:,} -> {stage['parameters_after']:,} (non-zero {stage['nonzero_after']:,})"
    if stage.get("macs_before"):
        line += f"; MACs {stage['macs_before']:,} -> {stage['macs_after']:,}"
    console.print(line)
    for note in stage["notes"]:
        console.print(f"  {note}")
    if stage["layers"]:
        keys = [k for k in stage["layers"][0] if k != "layer"]
        table = Table("layer", *keys, title="layers", title_justify="left")
        for layer in stage["layers"]:
            table.add_row(layer["layer"], *[f"{layer[k]:.4f}" if isinstance(layer[k], float) else str(layer[k]) for k in keys])
        console.print(table)
    if report["stages"]:
        table = Table(
            "stage",
            "precision",
            "parameters",
            "size",
            "gzip size",
            "coded size",
            "accuracy",
            "drop (pts)",
            "MACs",
            "MAC ratio",
            "p50 ms",
            "p50 ratio",
            "speed-up",
            title="stages (ONNX Runtime; ratios vs the original: when the p50 ratio stays above the MAC ratio, the kernels do not follow the work)",
            title_justify="left",
        )
        for r in report["stages"]:
            table.add_row(
                r["stage"],
                r["precision"],
                f"{r['parameters']:,}",
                fmt_size(r["size_bytes"]),
                fmt_size(r["gzip_bytes"]),
                fmt_size(r["coded_bytes"]),
                fmt(r["accuracy"], ".2f", unit="%"),
                fmt(r["drop_points"], "+.2f"),
                fmt_count(r.get("macs")),
                fmt(r.get("mac_ratio"), ".2f"),
                f"{r['p50_ms']:.3f}",
                fmt(r.get("p50_ratio"), ".2f"),
                f"{r['speedup']:.2f}x",
            )
        console.print(table)
        console.print(f"[dim]{machine_line(report, report['stages'][0]['threads'])}[/]")
    if stage.get("storage"):
        print_storage(stage["storage"])
    if report.get("gate"):
        gate = report["gate"]
        for r in gate["results"]:
            console.print(f"gate ({gate['stage']}): {gate_verdict(r['passed'])} {r['reason']}")


STORAGE_COLUMNS = ("parameters", "non-zeros", "bits/w", "dense", "sparse (rel. index)", "Huffman weights", "Huffman index", "coded", "gzip")


def print_storage(storage: list[dict]) -> None:
    """Deep Compression's table: per stage totals (with the paper's ratio and accuracy), then the last stage per layer."""
    table = Table("stage", *STORAGE_COLUMNS, "ratio", "accuracy", title="storage (Deep Compression accounting)", title_justify="left")
    for row in storage:
        t = row["total"]
        acc = row.get("accuracy")
        table.add_row(row["stage"], *_storage_cells(t, f"{t['bits']:.2f}"), f"{t['ratio']:.1f}x", "-" if acc is None else f"{acc:.2f}%")
    console.print(table)
    last = [r for r in storage if r["stage"] != "int8"][-1]
    layers = Table("layer", "form", *STORAGE_COLUMNS, title=f"storage per layer ({last['stage']})", title_justify="left")
    for layer in last["layers"]:
        bits = f"{layer['bits']}+{layer['index_bits']}" if layer["coded_form"] == "sparse" else str(layer["bits"])
        layers.add_row(layer["layer"], f"{layer['form']}, {layer['coded_form']}", *_storage_cells(layer, bits))
    console.print(layers)
    console.print(
        "[dim]ratio = fp32 bytes of all parameters / coded bytes (the paper's); sparse: relative index, 8 bits for conv, "
        "5 bits for fc, filler zeros past the span; coded: Huffman weights + indices + codebook + code tables (or dense Huffman "
        "when smaller); biases and norms stay fp32; all per-stage data in the JSON report[/]"
    )


def _storage_cells(t: dict, bits: str) -> list[str]:
    return [
        f"{t['parameters']:,}",
        f"{t['nonzeros']:,}",
        bits,
        fmt_size(t["dense_bytes"]),
        fmt_size(t["sparse_bytes"]),
        fmt_size(t["weight_coded_bytes"]),
        fmt_size(t["index_coded_bytes"]),
        fmt_size(t["coded_bytes"]),
        fmt_size(t["gzip_bytes"]),
    ]
