"""`edgekit debug --html`: SQNR and cosine against depth, one self-contained page (plotly.js inline, no CDN)."""

from __future__ import annotations

from pathlib import Path

from edgekit.errors import RuntimeMissingError
from edgekit.fileio import atomic_output


def write_html(report: dict, path: Path) -> None:
    try:
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots
    except ImportError:
        raise RuntimeMissingError("--html needs plotly", hint="pip install 'edgekit[report]' (or pip install plotly)") from None
    rows = report["rows"]
    depth = [r["depth"] for r in rows]
    labels = [f"{r['tensor']} ({r['op']}, {r['layer']})" for r in rows]
    sqnr = [None if r["exact"] else r["sqnr_db"] for r in rows]  # exact tensors: no point (infinite SQNR)
    figure = make_subplots(rows=2, cols=1, shared_xaxes=True, subplot_titles=("SQNR (dB, higher is better)", "cosine"))
    figure.add_trace(go.Scatter(x=depth, y=sqnr, text=labels, mode="lines+markers", name="SQNR dB"), row=1, col=1)
    figure.add_trace(go.Scatter(x=depth, y=[r["cosine"] for r in rows], text=labels, mode="lines+markers", name="cosine"), row=2, col=1)
    jump = report["first_jump"]
    if jump is not None:
        figure.add_vline(x=jump["depth"], line_dash="dash", line_color="red", annotation_text=f"first jump: {jump['tensor']}")
    title = f"{report['artifact']['path']} vs {report['reference']['path']} ({report['data']['samples']} samples)"
    figure.update_layout(title=title, xaxis2_title="depth (graph order)", showlegend=False, height=700)
    with atomic_output(Path(path)) as tmp:
        figure.write_html(str(tmp), include_plotlyjs=True, full_html=True)
