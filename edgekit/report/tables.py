"""A matrix report's table, as every rendering shows it (console, Markdown, HTML): its columns, each row's cells, the
notes under it, the failed gates and the machine line."""

from __future__ import annotations

from edgekit.metrics.coverage import WELL_COVERED, coverage_text
from edgekit.report.schema import fmt, fmt_size

COLUMNS = (
    "format",
    "precision",
    "target",
    "status",
    "metric",
    "vs labels",
    "drop (pts)",
    "vs reference",
    "cosine",
    "p50 ms",
    "p90 ms",
    "speed-up",
    "int8 coverage",
    "size",
    "gates",
)


# A language model's rows (recipes with convert.task: text-generation): its own metrics and generation speed.
LM_COLUMNS = (
    "format",
    "precision",
    "target",
    "status",
    "perplexity",
    "ppl ratio [95% CI]",
    "greedy match",
    "next-token agree",
    "TTFT ms",
    "tokens/s",
    "speed-up",
    "size",
    "gates",
)


# `edgekit tune`'s candidates: each at its thread count, with intervals, and how far the search took it.
TUNE_COLUMNS = (
    "format",
    "precision",
    "target",
    "threads",
    "metric",
    "vs reference [95% CI]",
    "vs labels",
    "p50 ms [95% CI]",
    "size",
    "peak MB",
    "int8 coverage",
    "tune",
)


def columns(rows: list[dict]) -> tuple[str, ...]:
    """The table's columns: tune's for its candidates, a language model's when its rows are one's."""
    if any("tune" in r for r in rows):
        return TUNE_COLUMNS
    return LM_COLUMNS if any(r.get("ppl_ratio") is not None for r in rows) else COLUMNS


def cells(row: dict) -> list[str]:
    """A row's table cells, shared by every renderer."""
    if "tune" in row:
        return _tune_cells(row)
    if row.get("ppl_ratio") is not None:
        return _language_cells(row)
    if row["status"] != "ok":
        return [row["format"], row["precision"], row["target"], row["status"], *["-"] * 10, "error"]
    failed = [g["metric"] for g in row.get("gates", []) if not g["passed"]]
    gates = "pass" if not failed else "FAIL: " + ", ".join(failed)
    return [
        row["format"],
        row["precision"],
        row["target"],
        "ok" + (" (cached)" if row.get("cached") else ""),
        row.get("metric") or "-",
        fmt(row.get("accuracy"), ".2f", unit="%"),
        fmt(row.get("drop_points"), "+.2f"),
        fmt(_agreement(row), ".2f", unit="%"),
        fmt(row.get("cosine"), ".5f"),
        f"{row['p50_ms']:.3f}",
        f"{row['p90_ms']:.3f}",
        fmt(row.get("speedup"), ".2f") + ("x" if row.get("speedup") else "") + (" (size only)" if row.get("speedup_note") else ""),
        fmt(_percent(row.get("int8_coverage")), ".1f", unit="%"),
        fmt_size(row["size_bytes"]),
        gates if row.get("gates") else "-",
    ]


def _language_cells(row: dict) -> list[str]:
    if row["status"] != "ok":
        return [row["format"], row["precision"], row["target"], row["status"], *["-"] * 8, "error"]
    failed = [g["metric"] for g in row.get("gates", []) if not g["passed"]]
    lo, hi = row["ppl_ratio_ci95"]
    return [
        row["format"],
        row["precision"],
        row["target"],
        "ok" + (" (cached)" if row.get("cached") else ""),
        f"{row['perplexity']:.3f}",
        f"{row['ppl_ratio']:.4f} [{lo:.4f}, {hi:.4f}]",
        f"{100 * row['greedy_match']:.1f}%",
        f"{100 * row['next_token_agreement']:.1f}%",
        fmt(row.get("ttft_ms"), ".2f"),
        fmt(row.get("tokens_per_s"), ".1f"),
        fmt(row.get("speedup"), ".2f") + ("x" if row.get("speedup") else ""),
        fmt_size(row["size_bytes"]),
        ("pass" if not failed else "FAIL: " + ", ".join(failed)) if row.get("gates") else "-",
    ]


def _tune_cells(row: dict) -> list[str]:
    stage = row["tune"]["stage"]
    head = [row["format"], precision_label(row), row["target"], fmt(row.get("threads"), "d")]
    if row["status"] != "ok":
        return [*head, *["-"] * 7, row["status"] if stage == "failed" else stage]
    if row.get("ppl_ratio") is not None:
        metric, versus = "ppl ratio", _with_interval(row["ppl_ratio"], row.get("ppl_ratio_ci95"), ".4f")
    else:
        metric, versus = row.get("metric") or "-", _with_interval(_agreement(row), row.get("agreement_ci95"), ".2f", "%")
    labels = fmt(row.get("accuracy"), ".2f") + (f"% ({row['drop_points']:+.2f})" if row.get("accuracy") is not None else "")
    timing = _with_interval(row.get("p50_ms"), row.get("p50_ms_ci95"), ".3f")
    if row.get("p50_ms") is None and row.get("tokens_per_s"):
        timing = f"{1000 / row['tokens_per_s']:.2f}/token"
    coverage = fmt(_percent(row.get("int8_coverage")), ".1f", unit="%")
    size = fmt_size(row["size_bytes"]) if row.get("size_bytes") else "-"
    return [*head, metric, versus, labels, timing, size, fmt(row.get("peak_rss_mb"), ".0f"), coverage, stage]


def _with_interval(value: float | None, interval: list[float] | None, spec: str, unit: str = "") -> str:
    if value is None:
        return "-"
    text = f"{value:{spec}}{unit}"
    return f"{text} [{interval[0]:{spec}}, {interval[1]:{spec}}]" if interval else text


def _percent(share: float | None) -> float | None:
    return None if share is None else 100 * share


def _agreement(row: dict) -> float | None:
    """The task metric against the reference, percent (top-1 agreement in reports written before schema 1.5)."""
    return row.get("agreement", row.get("top1_agreement"))


def row_label(row: dict) -> str:
    """A matrix row as the notes under a table name it: `onnx int8 on onnxruntime:cpu` (a tune's: `... x 2 threads`)."""
    threads = f" x {row['threads']} thread{'s' if row['threads'] > 1 else ''}" if "tune" in row and row.get("threads") else ""
    return f"{row['format']} {precision_label(row)} on {row['target']}{threads}"


def precision_label(row: dict) -> str:
    """A row's precision as tables name it, with tune's variants: `int8+fallback` (accuracy control returned layers to
    float), `fp32, 25% channels pruned` (a pruned and fine-tuned model)."""
    compress = row.get("compress")
    pruned = f", {compress['channels']:.0%} channels pruned" if compress else ""
    return row["precision"] + ("+fallback" if row.get("control") else "") + pruned


def row_notes(report: dict) -> list[str]:
    """One line per row whose int8 is not faster than fp32 where it was timed, per row timed on an emulated board, and
    per row whose top-1 answers changed (how many, and whether near-ties or answers the reference was sure of) unless
    its failed agreement gate says so."""
    from edgekit.metrics.compare import changes_text, flips_text

    rows = report["rows"]
    if report.get("kind") == "tune":
        return [f"{row_label(r)}: {r['tune']['stage']}: {r['tune']['why']}" for r in rows if r["tune"].get("why")]
    notes = [f"{row_label(r)}: {r['speedup_note']}" for r in rows if r.get("speedup_note")]
    notes += [
        f"{row_label(r)}: {coverage_text(r['int8_coverage_detail'])}"
        for r in rows
        if r.get("int8_coverage") is not None and r["int8_coverage"] < WELL_COVERED and not r.get("speedup_note")
    ]
    notes += [
        f"{row_label(r)}: timed on an EMULATED CPU ({r['emulated']}): its accuracy is that CPU's, its latency is not"
        for r in rows
        if r.get("emulated")
    ]
    changed = [r for r in rows if r.get("top1_flips") and not _agreement_failed(r)]
    return notes + [f"{row_label(r)}: {'; '.join(filter(None, (flips_text(r), changes_text(r))))}" for r in changed]


def _agreement_failed(row: dict) -> bool:
    """A failed top-1 agreement gate, whose reason already says which answers changed."""
    return any(g["metric"] == row.get("agreement_metric", "top1_agreement") and not g["passed"] for g in row.get("gates", []))


def failed_gates(report: dict) -> list[str]:
    """Why each failed gate failed (what a reader acts on), a line per gate: `onnx int8 on onnxruntime:cpu: reason`. A
    tune's candidates that missed are its notes; when nothing passed, what the closest one missed."""
    if report.get("kind") == "tune":
        closest = report.get("closest")
        return (
            [f"nothing passes; the closest, {row_label({**closest, 'tune': {}})}: {reason}" for reason in closest["missed"]]
            if closest
            else []
        )
    return [f"{row_label(r)}: {g['reason']}" for r in report["rows"] for g in r.get("gates", []) if not g["passed"]]


def machine_text(report: dict) -> str:
    m = report["machine"]
    threads = next((r["threads"] for r in report["rows"] if r.get("threads")), "-")
    isa = ", ".join(m.get("isa", []))
    isa_class = f"; ISA class {m['isa_class']}" if m.get("isa_class") else ""
    return f"{m['cpu']}, {m['usable_cores']} cores ({isa}{isa_class}), {threads} thread(s); {report['created']}"
