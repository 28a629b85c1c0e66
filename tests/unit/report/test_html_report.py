"""The HTML report of a real recipe run (FashionCNN: ONNX fp32/int8 and the model itself on torch:cpu with and
without channels_last), rendered in headless Chromium: no console error, every plot drawn with data, labels
apart, tick labels inside the page; a screenshot for review (also in $EDGEKIT_SCREENSHOT_DIR when set)."""

from __future__ import annotations

import copy
import html
import json
import os
import shutil
import textwrap

import numpy as np
import pytest

from edgekit.report.html import LOG_SPREAD, Box, display_names, figures, pareto_front, place_labels, to_html
from tests.chromium import Page, find_chromium
from tests.conftest import run_cli

needs_chromium = pytest.mark.skipif(find_chromium() is None, reason="needs Debian's chromium (apt-get install chromium)")

# What the page says about itself once plotly has drawn: per plot its traces, their points and the drawn marks;
# the label boxes of the scatter; every tick label's box; the page's and each plot's box.
PAGE_FACTS = """JSON.stringify({
  plots: [...document.querySelectorAll('.js-plotly-plot')].map(gd => ({
    id: gd.id,
    xtype: gd.layout.xaxis.type,
    points: gd.data.map(t => (t.q1 || t.y || []).length),
    marks: gd.querySelectorAll('.scatterlayer path.point, .boxlayer path.box, .barlayer path').length,
    box: gd.getBoundingClientRect().toJSON(),
    labels: [...gd.querySelectorAll('g.annotation-text-g')].map(g => g.getBoundingClientRect().toJSON()),
    ticks: [...gd.querySelectorAll('.xtick text, .ytick text')].map(t => t.getBoundingClientRect().toJSON()),
  })),
  width: document.documentElement.scrollWidth,
})"""


@pytest.fixture(scope="module")
def recipe_run(tmp_path_factory, small_test_npz):
    """A real matrix run: its folder and report.json."""
    folder = tmp_path_factory.mktemp("html")
    with np.load(small_test_npz) as npz:  # 500 real test images are enough for a page
        np.savez(folder / "test500.npz", image=npz["image"][:500], labels=npz["labels"][:500])
    (folder / "edgekit.yaml").write_text(
        textwrap.dedent(
            """
            version: 1
            model: {path: zoo:fashion-cnn}
            calibration: {path: zoo:fashion-mnist-calib, samples: 100}
            validation: {path: test500.npz}
            matrix:
              formats: [onnx, torch]
              precisions: [fp32, int8]
              targets: {torch: ["torch:cpu", "torch:cpu[channels_last=1]"]}
            latency: {threads: 1, runs: 30, warmup: 3}
            report: {dir: out}
            """
        )
    )
    result = run_cli("run", folder / "edgekit.yaml", "-q")
    assert result.code == 0, result.stdout + result.stderr
    report = next(folder.rglob("report.json"))
    return report.parent, json.loads(report.read_text())


def test_page_is_self_contained(recipe_run):
    folder, report = recipe_run
    page = (folder / "report.html").read_text()
    assert page.count("plotly.js v") == 1  # the library once, inline
    assert "<script src" not in page and "<link" not in page  # nothing fetched: the page works offline
    assert [f'id="plot-{i}"' in page for i in range(3)] == [True] * 3
    assert page == to_html(report)  # `edgekit report -f html` renders the same page from the JSON
    # a row whose top-1 answers changed is noted under the table: how many, and whether near-ties
    flipped = copy.deepcopy(report)
    row = next(r for r in flipped["rows"] if (r["format"], r["precision"]) == ("onnx", "int8"))
    row.update(top1_flips=3, flip_margin_max=0.02, top1_agreement_confident=100.0, confident_samples=480, expected_top1_drop=0.004)
    row["top1_changes"] = [{"sample": 7, "id": "test.npz[7]", "reference_top1": 6, "artifact_top1": 0, "reference_margin": 0.02}]
    note = (
        "onnx int8 on onnxruntime:cpu: 3 top-1 answers changed where the reference's top-1 led its top-2 by at most 0.02 of probability, "
        "an expected 0.004 points of top-1 by the reference's own probabilities"
    )
    flipped_page = to_html(flipped)
    assert html.escape(note) in flipped_page and html.escape(note) not in page
    assert (
        html.escape("agree on the 480 samples the reference gives >= 50%; surest changes: test.npz[7] class 6 -> 0 (margin 0.02)")
        in flipped_page
    )
    assert "expected top-1 cost: 0.004 pts" in flipped_page  # the row's hover in the plots


@needs_chromium
def test_report_renders_cleanly_in_chromium(recipe_run, tmp_path):
    folder, report = recipe_run
    with Page(width=1280) as page:
        page.load(folder / "report.html")
        facts = json.loads(page.evaluate(PAGE_FACTS))
        page.screenshot(tmp_path / "report.png")
    if os.environ.get("EDGEKIT_SCREENSHOT_DIR"):
        shutil.copy(tmp_path / "report.png", os.environ["EDGEKIT_SCREENSHOT_DIR"])
    assert page.errors == []
    plots = {p["id"]: p for p in facts["plots"]}
    assert set(plots) == {"plot-0", "plot-1", "plot-2"}
    ok = [r for r in report["rows"] if r["status"] == "ok"]
    scatter, boxes, bars = plots["plot-0"], plots["plot-1"], plots["plot-2"]
    assert sum(scatter["points"][:-1]) == len(ok) and scatter["points"][-1] >= 1  # every row, then the Pareto front
    assert boxes["points"] == [1] * len(ok) and bars["points"] and all(bars["points"])
    assert all(p["marks"] >= len(p["points"]) for p in plots.values()), {k: p["marks"] for k, p in plots.items()}
    p50s, drawn = [r["p50_ms"] for r in ok], [np.percentile(r["times_ms"], [1, 99]) for r in ok]
    assert scatter["xtype"] == ("log" if max(p50s) / min(p50s) > LOG_SPREAD else "linear")
    assert boxes["xtype"] == ("log" if max(d[1] for d in drawn) / min(d[0] for d in drawn) > LOG_SPREAD else "linear")
    labels = [Box(b["left"], b["top"], b["right"], b["bottom"]) for b in scatter["labels"]]
    assert len(labels) == len(ok)
    assert not [(a, b) for i, a in enumerate(labels) for b in labels[i + 1 :] if a.overlaps(b)]
    for plot in plots.values():  # nothing cut off: every tick label inside its plot
        outer = plot["box"]
        for tick in plot["ticks"]:
            assert outer["left"] <= tick["left"] and tick["right"] <= outer["right"] and tick["bottom"] <= outer["bottom"], (
                plot["id"],
                tick,
            )
    assert facts["width"] <= 1280  # no horizontal scrolling


def test_failed_cells_stay_in_the_table_and_out_of_the_plots(recipe_run):
    _, report = recipe_run
    broken = json.loads(json.dumps(report))
    broken["rows"][1]["status"] = "ConversionError: the int8 pass failed"
    charts = {title: figure for title, figure, *_ in figures(broken)}
    scatter, boxes = charts["Accuracy vs p50 latency"], charts["Latency distributions"]
    assert sum(len(t.x) for t in scatter.data[:-1]) == len(report["rows"]) - 1  # the last trace is the Pareto front
    assert len(boxes.data) == len(report["rows"]) - 1
    assert "ConversionError: the int8 pass failed" in to_html(broken)
    for row in broken["rows"]:
        row["status"] = "error"
    assert [figure for _, figure, *_ in figures(broken)] == [None, None, None]
    assert to_html(broken).count("Nothing to plot") == 3


def test_every_row_gets_a_distinct_name_as_short_as_it_can_be(recipe_run):
    _, report = recipe_run
    rows = report["rows"]
    assert display_names(rows) == ["onnx fp32", "onnx int8", "torch fp32 @ torch:cpu", "torch fp32 @ torch:cpu[channels_last=1]"]
    assert display_names(rows, with_target=True)[0] == "onnx fp32 @ onnxruntime:cpu"
    twice = rows + rows  # e.g. `edgekit report` of a bench report that timed the same model twice
    assert len(set(display_names(twice))) == len(twice)


def test_pareto_front_keeps_only_unbeaten_points():
    points = [(1.0, 90.0), (2.0, 92.0), (2.0, 91.0), (3.0, 92.0), (0.5, 80.0), (0.5, 80.0)]
    assert pareto_front(points) == [4, 5, 0, 1]  # by latency; (2, 91) and (3, 92) are beaten by (2, 92)


def test_labels_never_overlap_even_when_points_crowd():
    area = Box(0, 0, 800, 360)
    anchors = [(400 + 3 * (i % 4), 180 + 2 * (i // 4)) for i in range(12)] + [(5, 5), (795, 355)]
    texts = [f"openvino int8-dynamic {i}" for i in range(len(anchors))]
    offsets = place_labels(anchors, texts, area)
    boxes = []
    for (x, y), text, offset in zip(anchors, texts, offsets, strict=True):
        assert offset is not None, text
        w = 7.0 * len(text) + 8
        boxes.append(Box(x + offset[0] - w / 2, y + offset[1] - 8, x + offset[0] + w / 2, y + offset[1] + 8))
    assert all(area.x0 <= b.x0 and b.x1 <= area.x1 and area.y0 <= b.y0 and b.y1 <= area.y1 for b in boxes)
    assert not [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1 :] if a.overlaps(b)]
