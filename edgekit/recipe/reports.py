"""Matrix reports as Markdown (PR comments, $GITHUB_STEP_SUMMARY), self-contained HTML and JUnit XML."""

from __future__ import annotations

import html
import os
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np

from edgekit.fileio import atomic_output
from edgekit.validate.report import fmt, fmt_size, write_json

COLUMNS = (
    "format",
    "precision",
    "target",
    "status",
    "accuracy",
    "drop (pts)",
    "top-1 agree",
    "cosine",
    "p50 ms",
    "p90 ms",
    "speed-up",
    "size",
    "gates",
)


def cells(row: dict) -> list[str]:
    """A row's table cells, shared by every renderer."""
    if row["status"] != "ok":
        return [row["format"], row["precision"], row["target"], row["status"], *["-"] * 8, "error"]
    failed = [g["metric"] for g in row.get("gates", []) if not g["passed"]]
    gates = "pass" if not failed else "FAIL: " + ", ".join(failed)
    return [
        row["format"],
        row["precision"],
        row["target"],
        "ok" + (" (cached)" if row.get("cached") else ""),
        fmt(row.get("accuracy"), ".2f") + ("%" if row.get("accuracy") is not None else ""),
        fmt(row.get("drop_points"), "+.2f"),
        fmt(row.get("top1_agreement"), ".2f") + ("%" if row.get("top1_agreement") is not None else ""),
        fmt(row.get("cosine"), ".5f"),
        f"{row['p50_ms']:.3f}",
        f"{row['p90_ms']:.3f}",
        fmt(row.get("speedup"), ".2f") + ("x" if row.get("speedup") else "") + (" (size only)" if row.get("speedup_note") else ""),
        fmt_size(row["size_bytes"]),
        gates if row.get("gates") else "-",
    ]


def speedup_notes(report: dict) -> list[str]:
    """One line per row whose int8 is not faster than fp32 where it was timed."""
    return [f"{r['format']} {r['precision']} on {r['target']}: {r['speedup_note']}" for r in report["rows"] if r.get("speedup_note")]


def machine_text(report: dict) -> str:
    m = report["machine"]
    threads = next((r["threads"] for r in report["rows"] if r.get("threads")), "-")
    isa = ", ".join(m.get("isa", []))
    isa_class = f"; ISA class {m['isa_class']}" if m.get("isa_class") else ""
    return f"{m['cpu']}, {m['usable_cores']} cores ({isa}{isa_class}), {threads} thread(s); {report['created']}"


def to_markdown(report: dict) -> str:
    verdict = "passed" if report["passed"] else "FAILED"
    lines = [f"### edgekit: {report['model']} - gates {verdict}", "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in cells(r)) + " |" for r in report["rows"]]
    lines += [f"\n{note}" for note in speedup_notes(report)]
    lines += [
        "",
        f"Thresholds: {', '.join(f'{k}={v}' for k, v in report['thresholds'].items()) or 'none'}. Measured on {machine_text(report)}.",
        "",
    ]
    return "\n".join(lines)


def to_junit(report: dict) -> str:
    """One testsuite; one testcase per (row, gate), plus one per failed cell."""
    suite = ET.Element("testsuite", name="edgekit", tests="0", failures="0", errors="0")
    tests = fails = errors = 0
    for row in report["rows"]:
        classname = f"{row['format']}.{row['precision']}.{row['target']}"
        if row["status"] != "ok":
            case = ET.SubElement(suite, "testcase", classname=classname, name="run")
            ET.SubElement(case, "error", message=row["status"])
            tests, errors = tests + 1, errors + 1
            continue
        for gate in row.get("gates", []):
            case = ET.SubElement(suite, "testcase", classname=classname, name=gate["metric"])
            if not gate["passed"]:
                ET.SubElement(case, "failure", message=gate["reason"])
                fails += 1
            tests += 1
    suite.set("tests", str(tests))
    suite.set("failures", str(fails))
    suite.set("errors", str(errors))
    return ET.tostring(suite, encoding="unicode", xml_declaration=True)


def to_html(report: dict) -> str:
    """A self-contained page: the table, accuracy vs latency, and each row's latency distribution (inline SVG)."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = "".join(
        "<tr class='{}'>{}</tr>".format("fail" if not r.get("passed") else "", "".join(f"<td>{html.escape(c)}</td>" for c in cells(r)))
        for r in report["rows"]
    )
    ok = [r for r in report["rows"] if r["status"] == "ok"]
    verdict = "passed" if report["passed"] else "FAILED"
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>edgekit report</title><style>
body{{font-family:system-ui,sans-serif;margin:2em;color:#222}} table{{border-collapse:collapse}} td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}
th{{background:#f3f3f3}} tr.fail td{{background:#fde8e8}} .plots{{display:flex;gap:2em;flex-wrap:wrap;margin-top:1.5em}} small{{color:#666}}
</style></head><body><h2>edgekit: {html.escape(str(report["model"]))} &mdash; gates {verdict}</h2>
<table><tr>{head}</tr>{body}</table><p><small>Thresholds: {html.escape(", ".join(f"{k}={v}" for k, v in report["thresholds"].items()) or "none")}.
Measured on {html.escape(machine_text(report))}.</small></p>{"".join(f"<p class='note'>{html.escape(n)}</p>" for n in speedup_notes(report))}
<div class="plots"><div><h3>Accuracy vs p50 latency</h3>{_scatter(ok)}</div><div><h3>Latency distributions (ms)</h3>{_boxes(ok)}</div></div>
</body></html>"""


def _label(row: dict) -> str:
    return f"{row['format']} {row['precision']}"


def _scatter(rows: list[dict], w: int = 460, h: int = 300, pad: int = 50) -> str:
    points = [(r["p50_ms"], r["accuracy"], _label(r)) for r in rows if r.get("accuracy") is not None]
    if not points:
        return "<p>no labelled data: no accuracy to plot</p>"
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1 = min(xs) * 0.9, max(xs) * 1.1
    y0, y1 = min(ys) - 0.5, max(ys) + 0.5
    sx = lambda x: pad + (x - x0) / (x1 - x0 or 1) * (w - 2 * pad)  # noqa: E731
    sy = lambda y: h - pad - (y - y0) / (y1 - y0 or 1) * (h - 2 * pad)  # noqa: E731
    dots = "".join(
        f"<circle cx='{sx(x):.1f}' cy='{sy(y):.1f}' r='5' fill='#3573b9'/><text x='{sx(x) + 7:.1f}' y='{sy(y) - 6:.1f}' font-size='11'>{html.escape(t)}</text>"
        for x, y, t in points
    )
    axes = (
        f"<line x1='{pad}' y1='{h - pad}' x2='{w - pad}' y2='{h - pad}' stroke='#444'/><line x1='{pad}' y1='{pad}' x2='{pad}' y2='{h - pad}' stroke='#444'/>"
        f"<text x='{w / 2}' y='{h - 12}' font-size='12' text-anchor='middle'>p50 latency (ms)</text>"
        f"<text x='14' y='{h / 2}' font-size='12' transform='rotate(-90 14 {h / 2})' text-anchor='middle'>accuracy (%)</text>"
        f"<text x='{pad}' y='{h - pad + 15}' font-size='10'>{x0:.3g}</text><text x='{w - pad}' y='{h - pad + 15}' font-size='10' text-anchor='end'>{x1:.3g}</text>"
        f"<text x='{pad - 4}' y='{h - pad}' font-size='10' text-anchor='end'>{y0:.1f}</text><text x='{pad - 4}' y='{pad + 4}' font-size='10' text-anchor='end'>{y1:.1f}</text>"
    )
    return f"<svg width='{w}' height='{h}' xmlns='http://www.w3.org/2000/svg'>{axes}{dots}</svg>"


def _boxes(rows: list[dict], w: int = 520, row_h: int = 26, pad: int = 130) -> str:
    rows = [r for r in rows if r.get("times_ms")]
    if not rows:
        return "<p>no timings</p>"
    hi = max(float(np.percentile(r["times_ms"], 99)) for r in rows) * 1.05
    scale = lambda v: pad + v / hi * (w - pad - 20)  # noqa: E731
    parts = []
    for i, r in enumerate(rows):
        p1, p25, p50, p75, p99 = np.percentile(r["times_ms"], [1, 25, 50, 75, 99])
        y = 10 + i * row_h
        parts.append(
            f"<text x='{pad - 6}' y='{y + 13}' font-size='11' text-anchor='end'>{html.escape(_label(r) + ' ' + r['target'])}</text>"
            f"<line x1='{scale(p1):.1f}' y1='{y + 9}' x2='{scale(p99):.1f}' y2='{y + 9}' stroke='#888'/>"
            f"<rect x='{scale(p25):.1f}' y='{y + 2}' width='{max(scale(p75) - scale(p25), 1):.1f}' height='14' fill='#9cc3e6' stroke='#3573b9'/>"
            f"<line x1='{scale(p50):.1f}' y1='{y + 2}' x2='{scale(p50):.1f}' y2='{y + 16}' stroke='#c0392b' stroke-width='2'/>"
        )
    height = 30 + len(rows) * row_h
    axis = f"<text x='{pad}' y='{height - 4}' font-size='10'>0</text><text x='{w - 20}' y='{height - 4}' font-size='10' text-anchor='end'>{hi:.3g} ms</text>"
    return f"<svg width='{w}' height='{height}' xmlns='http://www.w3.org/2000/svg'>{''.join(parts)}{axis}</svg><p><small>box: p25-p75, red: p50, whiskers: p1-p99</small></p>"


RENDERERS = {"md": ("report.md", to_markdown), "html": ("report.html", to_html), "junit": ("junit.xml", to_junit)}


def render(report: dict, fmt_name: str) -> str:
    return RENDERERS[fmt_name][1](report)


def write_reports(report: dict, folder: Path, formats) -> list[Path]:
    """Write each requested format atomically; append the Markdown to $GITHUB_STEP_SUMMARY when set."""
    written = []
    for name in formats:
        if name == "json":
            write_json(report, folder / "report.json")
            written.append(folder / "report.json")
            continue
        filename, renderer = RENDERERS[name]
        with atomic_output(folder / filename) as tmp:
            tmp.write_text(renderer(report))
        written.append(folder / filename)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a") as f:
            f.write(to_markdown(report) + "\n")
    return written
