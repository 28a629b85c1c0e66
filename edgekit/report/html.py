"""The HTML matrix report: the table and three interactive plotly charts in one self-contained page.

Accuracy against p50 latency (Pareto front marked, labels placed so none overlaps), each row's latency
distribution and the speed-up per target against its fp32 row. A latency axis is logarithmic when what it
plots spans more than LOG_SPREAD (the p50s; p1 to p99 for the distributions). plotly.js is inlined once per
page (reports are opened offline); plotly is imported only here.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgekit.errors import EdgekitError
from edgekit.report.schema import fmt_size
from edgekit.report.tables import cells, columns, failed_gates, machine_text, precision_label, row_notes

LOG_SPREAD = 5.0  # largest / smallest plotted latency above which an axis is logarithmic
PRECISION_SYMBOLS = {"fp32": "circle", "fp16": "diamond", "bf16": "diamond-open", "int8": "square", "int8-dynamic": "square-open"}
COLORS = ("#3573b9", "#e07b39", "#3a9a5b", "#c0392b", "#8e5fb5", "#7f7f7f", "#b5a642", "#1fa2b3")
FONT = "system-ui, -apple-system, Segoe UI, sans-serif"

# The scatter's fixed geometry: labels are placed in pixels, so the plot area must be known.
WIDTH, HEIGHT = 900, 480
MARGIN = {"l": 70, "r": 30, "t": 60, "b": 60}
CHAR_PX, LABEL_H, MARKER_R = 7.0, 16.0, 8.0  # 12 px font: ~7 px per character


def figures(report: dict) -> list[tuple]:
    """(title, plotly figure or None when nothing to plot, caption, why nothing) per chart; rows that failed stay out."""
    rows = [r for r in report["rows"] if r["status"] == "ok"]
    return [
        (
            "Accuracy vs p50 latency",
            _scatter(rows, report.get("thresholds") or {}),
            "Hover a point for its row. Ringed points are on the Pareto front. Symbols: circle fp32, diamond fp16, square int8.",
            "no row has an accuracy",
        ),
        ("Latency distributions", _boxes(rows), "Box: p25-p75, line: p50, whiskers: p1-p99, over the timed runs.", "no row has timings"),
        (
            "Speed-up vs fp32 on the same target",
            _speedups(rows),
            "p50 of the fp32 row / p50 of the row; 1.0x is no change.",
            "no fp32 row to compare with",
        ),
    ]


def to_html(report: dict) -> str:
    """The whole page."""
    plotly = _plotly()
    charts = "".join(_section(i, *figure) for i, figure in enumerate(figures(report)))
    verdict = "passed" if report["passed"] else "FAILED"
    thresholds = ", ".join(f"{k}={v}" for k, v in report["thresholds"].items()) or "none"
    notes = "".join(f"<p class='note'>{html.escape(n)}</p>" for n in row_notes(report))
    failed = failed_gates(report)
    if failed:
        notes += "<p class='FAILED'>Failed gates:</p><ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in failed) + "</ul>"
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>edgekit: {html.escape(str(report["model"]))}</title>
<style>{STYLE}</style><script>{plotly.offline.get_plotlyjs()}</script></head><body>
<h2>edgekit: {html.escape(str(report["model"]))} &mdash; gates <span class="{verdict}">{verdict}</span></h2>
<p class="machine">Measured on {html.escape(machine_text(report))}. Thresholds: {html.escape(thresholds)}.</p>
{_table(report["rows"])}{notes}
{charts}
</body></html>"""


STYLE = f"""body{{font-family:{FONT};margin:2em;color:#222;max-width:1100px}} table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right;white-space:nowrap}} th{{background:#f3f3f3;white-space:normal}}
.rows{{overflow-x:auto}}
tr.fail td{{background:#fde8e8}} .machine,.caption{{color:#555;font-size:13px}} .FAILED{{color:#c0392b}} .passed{{color:#2e7d32}}
.note{{color:#8a5a00}} h3{{margin:1.6em 0 .2em}} .plot{{width:{WIDTH}px}}"""


def _plotly():
    try:
        import plotly.graph_objects  # noqa: F401
        import plotly.offline
    except ImportError:
        raise EdgekitError(
            "the HTML report needs plotly, which is not installed", hint="pip install plotly (an edgekit dependency)"
        ) from None
    return plotly


def _table(rows: list[dict]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns(rows))
    body = "".join(
        "<tr class='{}'>{}</tr>".format("" if r.get("passed") else "fail", "".join(f"<td>{html.escape(c)}</td>" for c in cells(r)))
        for r in rows
    )
    return f"<div class='rows'><table><tr>{head}</tr>{body}</table></div>"  # a wide table scrolls in its box, not the page


def _section(index: int, title: str, figure, caption: str, empty: str) -> str:
    if figure is None:
        return f"<h3>{html.escape(title)}</h3><p class='caption'>Nothing to plot: {html.escape(empty)}.</p>"
    div = figure.to_html(
        full_html=False, include_plotlyjs=False, div_id=f"plot-{index}", config={"displaylogo": False, "responsive": False}
    )
    return f"<h3>{html.escape(title)}</h3><div class='plot'>{div}</div><p class='caption'>{html.escape(caption)}</p>"


def row_label(row: dict) -> str:
    """`onnx int8`; a tune's candidate with its thread count: `onnx int8 x2`."""
    label = row["format"] + ("" if row.get("precision") in (None, "-") else f" {row['precision']}")
    return label + (f" x{row['threads']}" if "tune" in row and row.get("threads") else "")


def display_names(rows: list[dict], with_target: bool = False) -> list[str]:
    """A distinct name per row, as short as it can be: format precision, then (only where names collide)
    @ target, then the artifact's file name @ target, then a number."""
    steps = (
        lambda r: f"{row_label(r)} @ {r['target']}",
        lambda r: f"{Path(r.get('artifact') or row_label(r)).name} @ {r['target']}",
    )
    names = [steps[0](r) if with_target else row_label(r) for r in rows]
    for step in steps:
        clashes = {n for n in names if names.count(n) > 1}
        names = [step(r) if n in clashes else n for r, n in zip(rows, names, strict=True)]
    return [n if names.count(n) == 1 else f"{n} #{i + 1}" for i, n in enumerate(names)]


def _hover(row: dict) -> str:
    parts = [f"<b>{html.escape(row_label(row))}</b> on {html.escape(row['target'])}"]
    for name, key, spec, unit in (
        ("accuracy", "accuracy", ".2f", "%"),
        ("drop", "drop_points", "+.2f", " pts"),
        ("vs reference", "agreement", ".2f", "%"),
        ("top-1 changed", "top1_flips", "d", ""),
        ("largest margin changed", "flip_margin_max", ".3g", ""),
        ("expected top-1 cost", "expected_top1_drop", ".3f", " pts"),
        ("p50", "p50_ms", ".3f", " ms"),
        ("p90", "p90_ms", ".3f", " ms"),
        ("speed-up", "speedup", ".2f", "x"),
    ):
        if row.get(key) is not None:
            parts.append(f"{name}: {row[key]:{spec}}{unit}")
    if row.get("size_bytes"):
        parts.append(f"size: {fmt_size(row['size_bytes'])}")
    parts.append("gates: " + ("pass" if row.get("passed") else "FAIL"))
    return "<br>".join(parts)


def _layout(**extra) -> dict:
    return {
        "template": "simple_white",
        "font": {"family": FONT, "size": 12},
        "width": WIDTH,
        "margin": dict(MARGIN),
        "hoverlabel": {"align": "left"},
        **extra,
    }


def _log_scale(values: list[float]) -> bool:
    return min(values) > 0 and max(values) / min(values) > LOG_SPREAD


# --- accuracy vs latency -------------------------------------------------------------------------


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats: as fast or faster and as accurate or more, one strictly; by latency."""
    front = [
        i
        for i, (x, y) in enumerate(points)
        if not any(x2 <= x and y2 >= y and (x2 < x or y2 > y) for j, (x2, y2) in enumerate(points) if j != i)
    ]
    return sorted(front, key=lambda i: points[i])


@dataclass(frozen=True)
class Box:
    x0: float
    y0: float
    x1: float
    y1: float

    def overlaps(self, other: Box) -> bool:
        return self.x0 < other.x1 and other.x0 < self.x1 and self.y0 < other.y1 and other.y0 < self.y1


def place_labels(anchors: list[tuple[float, float]], texts: list[str], area: Box) -> list[tuple[float, float] | None]:
    """For each anchor (pixels, y down) the offset of its label's centre, so that no label overlaps another
    label or any marker and all stay inside `area`; None where no free place was found (hover still shows it).
    Greedy: the nearest free candidate on rings of growing radius, starting to the upper right."""
    markers = [Box(x - MARKER_R, y - MARKER_R, x + MARKER_R, y + MARKER_R) for x, y in anchors]
    placed: list[Box] = []
    offsets: list[tuple[float, float] | None] = []
    for (x, y), text in zip(anchors, texts, strict=True):
        w, h = CHAR_PX * len(text) + 8, LABEL_H
        offsets.append(None)
        for dx, dy in _candidates(w, h):
            box = Box(x + dx - w / 2, y + dy - h / 2, x + dx + w / 2, y + dy + h / 2)
            inside = area.x0 <= box.x0 and box.x1 <= area.x1 and area.y0 <= box.y0 and box.y1 <= area.y1
            if inside and not any(box.overlaps(b) for b in placed + markers):
                placed.append(box)
                offsets[-1] = (dx, dy)
                break
    return offsets


def _candidates(w: float, h: float):
    """Label-centre offsets on rings of growing radius, the box's near side about `radius` from the point."""
    for radius in (10, 20, 32, 46, 62, 80, 100, 124, 150):
        for step in range(16):
            angle = math.pi / 4 - step * math.pi / 8  # upper right first, then clockwise
            cos, sin = math.cos(angle), math.sin(angle)
            yield (radius + w / 2) * cos, -(radius + h / 2) * sin


def _axis_range(values: list[float], log: bool, pad: float, min_span: float) -> list[float]:
    """[low, high] around the values (log10 units on a log axis), `pad` of the span added each side."""
    lo, hi = min(values), max(values)
    if log:
        lo, hi = math.log10(lo), math.log10(hi)
    span = max(hi - lo, min_span)
    middle = (lo + hi) / 2
    return [middle - span * (0.5 + pad), middle + span * (0.5 + pad)]


def _axis(title: str, values: list[float], log: bool, pad: float, min_span: float) -> dict:
    """A latency axis: linear from the data's range, or log with ticks at 1, 2, (3,) 5 x 10^k labelled as plain numbers."""
    span_range = _axis_range(values, log, pad, min_span)
    axis = {"title": {"text": title + (", log scale" if log else "")}, "type": "log" if log else "linear", "range": span_range}
    if log:
        steps = (1, 2, 3, 5) if span_range[1] - span_range[0] < 1.5 else (1, 2, 5)  # within a decade or two: one more
        ticks = [m * 10.0**k for k in range(math.floor(span_range[0]) - 1, math.ceil(span_range[1]) + 1) for m in steps]
        ticks = [t for t in ticks if span_range[0] <= math.log10(t) <= span_range[1]]
        axis |= {"tickvals": ticks, "ticktext": [f"{t:g}" for t in ticks]}
    else:
        span_range[0] = max(0.0, span_range[0])
    return axis


def gate_level(rows: list[dict], metric: str, thresholds: dict) -> float | None:
    """Where the gate sits on the scatter's metric axis: min_agreement, or the reference's accuracy less max_drop."""
    if metric == "agreement":
        return thresholds.get("min_agreement")
    reference = next((r["reference_accuracy"] for r in rows if r.get("reference_accuracy") is not None), None)
    return reference - thresholds["max_drop"] if reference is not None and thresholds.get("max_drop") is not None else None


def _scatter(rows: list[dict], thresholds: dict):
    import plotly.graph_objects as go

    name = next((r["metric"] for r in rows if r.get("metric")), "top-1")
    metric, title = (
        ("accuracy", f"{name} against the labels (%)")
        if any(r.get("accuracy") is not None for r in rows)
        else ("agreement", f"{name} against the reference (%)")
    )
    rows = [r for r in rows if r.get(metric) is not None and r.get("p50_ms")]
    if not rows:
        return None
    xs, ys = [r["p50_ms"] for r in rows], [r[metric] for r in rows]
    log = _log_scale(xs)
    xaxis = _axis("p50 latency (ms)", xs, log, 0.15, 0.3 if log else max(xs) * 0.2) | {"automargin": False}
    yaxis = {"title": {"text": title}, "range": _axis_range(ys, False, 0.25, 0.5), "automargin": False}
    fig = go.Figure()
    groups = sorted({r["format"] for r in rows})
    for k, fmt in enumerate(groups):
        members = [r for r in rows if r["format"] == fmt]
        fig.add_trace(
            go.Scatter(
                x=[r["p50_ms"] for r in members],
                y=[r[metric] for r in members],
                mode="markers",
                name=fmt,
                marker={
                    "size": 11,
                    "color": COLORS[k % len(COLORS)],
                    "symbol": [PRECISION_SYMBOLS.get(r["precision"], "circle") for r in members],
                    "line": {"width": 1, "color": "white"},
                },
                hovertext=[_hover(r) for r in members],
                hoverinfo="text",
            )
        )
    front = pareto_front(list(zip(xs, ys, strict=True)))
    fig.add_trace(
        go.Scatter(
            x=[xs[i] for i in front],
            y=[ys[i] for i in front],
            mode="lines+markers",
            name="Pareto front",
            line={"shape": "hv", "dash": "dot", "color": "#555", "width": 1.5},
            marker={"size": 20, "symbol": "circle-open", "color": "#555", "line": {"width": 1.5}},
            hoverinfo="skip",
        )
    )
    gate = gate_level(rows, metric, thresholds)
    if gate is not None:  # the line a row must stay on or above
        yaxis["range"] = [min(yaxis["range"][0], gate - 0.2), max(yaxis["range"][1], gate + 0.2)]
        fig.add_hline(
            y=gate, line={"dash": "dash", "color": "#c0392b", "width": 1}, annotation_text="gate", annotation_position="bottom right"
        )
    fig.update_layout(
        _layout(
            height=HEIGHT,
            xaxis=xaxis,
            yaxis=yaxis,
            legend={"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom", "title": {"text": "format (symbol: precision)  "}},
            annotations=_labels(rows, xs, ys, xaxis["range"], yaxis["range"], log),
        )
    )
    return fig


def _labels(rows, xs, ys, xr, yr, log) -> list[dict]:
    plot_w, plot_h = WIDTH - MARGIN["l"] - MARGIN["r"], HEIGHT - MARGIN["t"] - MARGIN["b"]

    def px(x: float, y: float) -> tuple[float, float]:
        u = math.log10(x) if log else x
        return plot_w * (u - xr[0]) / (xr[1] - xr[0]), plot_h * (yr[1] - y) / (yr[1] - yr[0])

    texts = display_names(rows)
    anchors = [px(x, y) for x, y in zip(xs, ys, strict=True)]
    offsets = place_labels(anchors, texts, Box(0, 0, plot_w, plot_h))
    return [
        {
            "x": math.log10(x) if log else x,
            "y": y,
            "text": html.escape(t),
            "ax": o[0],
            "ay": o[1],
            "showarrow": True,
            "arrowhead": 0,
            "arrowwidth": 1,
            "arrowcolor": "#777",
            "standoff": 6,
            "font": {"size": 12},
            "bgcolor": "rgba(255,255,255,0.85)",
        }
        for x, y, t, o in zip(xs, ys, texts, offsets, strict=True)
        if o is not None
    ]


# --- latency distributions -------------------------------------------------------------------------


def _boxes(rows: list[dict]):
    import plotly.graph_objects as go

    rows = [r for r in rows if r.get("times_ms")]
    if not rows:
        return None
    lows, highs = [float(np.percentile(r["times_ms"], 1)) for r in rows], [float(np.percentile(r["times_ms"], 99)) for r in rows]
    log = _log_scale(lows + highs)  # a tail 5x beyond the fastest p1 would squeeze every box into a sliver
    fig = go.Figure()
    for r, name in reversed(list(zip(rows, display_names(rows, with_target=True), strict=True))):  # the table's first row on top
        p1, p25, p50, p75, p99 = np.percentile(r["times_ms"], [1, 25, 50, 75, 99]).tolist()
        fig.add_trace(
            go.Box(
                y=[name],
                q1=[p25],
                median=[p50],
                q3=[p75],
                lowerfence=[p1],
                upperfence=[p99],
                orientation="h",
                name=name,
                marker={"color": "#3573b9" if r.get("passed") else "#c0392b"},  # a row that failed a gate in red
                fillcolor="rgba(53,115,185,0.25)" if r.get("passed") else "rgba(192,57,43,0.2)",
                line={"width": 1.5},
                showlegend=False,
                hovertext=_hover(r) + f"<br>runs: {len(r['times_ms'])}, p1 {p1:.3f}, p99 {p99:.3f} ms",
                hoverinfo="text",
            )
        )
    fig.update_layout(
        _layout(
            height=110 + 34 * len(rows),
            xaxis=_axis("latency per call (ms)", lows + highs, log, 0.05, 0.3 if log else max(highs) * 0.1),
            yaxis={"automargin": True, "ticksuffix": " "},
            margin={**MARGIN, "t": 20},
        )
    )
    return fig


# --- speed-up per target -------------------------------------------------------------------------


def _speedups(rows: list[dict]):
    """One bar per row, grouped by format and target (its options and precision under each bar)."""
    import plotly.graph_objects as go

    rows = [r for r in rows if r.get("speedup")]
    if not rows:
        return None
    groups = list(dict.fromkeys(_group(r) for r in rows))
    rows = sorted(rows, key=lambda r: groups.index(_group(r)))  # stable: the table's order within a group
    series = list(dict.fromkeys(_series(r) for r in rows))
    fig = go.Figure(
        go.Bar(
            x=[[_group(r) for r in rows], [_series(r) for r in rows]],
            y=[r["speedup"] for r in rows],
            marker={"color": [COLORS[series.index(_series(r)) % len(COLORS)] for r in rows]},
            text=[f"{r['speedup']:.2f}x" for r in rows],
            textposition="outside",
            cliponaxis=False,
            hovertext=[_hover(r) for r in rows],
            hoverinfo="text",
        )
    )
    top = max(r["speedup"] for r in rows)
    fig.add_hline(y=1.0, line={"dash": "dash", "color": "#555", "width": 1})
    fig.update_layout(
        _layout(
            height=420,
            xaxis={"automargin": True},
            yaxis={"title": {"text": "speed-up (x)"}, "range": [0, max(top, 1.0) * 1.18]},
            margin={**MARGIN, "t": 30},
        )
    )
    return fig


def _group(row: dict) -> str:
    return f"{row['format']} on {row['target'].partition('[')[0]}"


def _series(row: dict) -> str:
    options = row["target"].partition("[")[2].rstrip("]")
    return precision_label(row) + (f" [{options}]" if options else "")
