"""`edgekit debug`: per-tensor error between an artifact and its reference, and where it first jumps."""

from __future__ import annotations

from pathlib import Path

import typer

from edgekit.cli import options
from edgekit.fileio import check_output_path
from edgekit.report.schema import write_json
from edgekit.source import open_source


def register(app: typer.Typer) -> None:
    app.command("debug")(debug)


def debug(
    artifact: str = typer.Argument(..., help="The converted model: .onnx, .tflite or OpenVINO .xml."),
    reference: str = typer.Option(
        ..., "--reference", "-r", help="The model it came from: the fp32 model of the same format, or PyTorch for an ONNX artifact."
    ),
    data: str = typer.Option(..., "--data", "-d", help=".npz keyed by input name, .npy, image folder, module:function or zoo: data."),
    samples: int = typer.Option(8, "--samples", "-n", help="Samples compared (drawn deterministically with --seed)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the sample draw."),
    preprocess: str = options.PREPROCESS,
    weights: str = options.WEIGHTS,
    allow_pickle: bool = options.ALLOW_PICKLE,
    jump_db: float = typer.Option(10.0, "--jump-db", help="First jump: SQNR this many dB below the tensor before it (capped at 40 dB)."),
    floor_db: float = typer.Option(20.0, "--floor-db", help="First jump: or SQNR below this."),
    json_out: Path = typer.Option(None, "--json", help="Write the full table (JSON) here."),
    html: Path = typer.Option(None, "--html", help="Write a self-contained HTML plot of error against depth here."),
    rows: int = typer.Option(None, "--rows", help="Print only the first N rows (the JSON has all)."),
) -> None:
    """Run the artifact and its reference on the same samples and compare every intermediate tensor they share."""
    from edgekit.cli.render.debug import print_debug
    from edgekit.debug import DebugRequest
    from edgekit.debug import debug as run_debug

    for path, option in ((json_out, "--json"), (html, "--html")):
        if path is not None:
            check_output_path(path, option, "debug.json" if option == "--json" else "debug.html")
    sources = (open_source(artifact), open_source(reference, weights, allow_pickle))
    request = DebugRequest(*sources, data, samples, seed, jump_db, floor_db, preprocess)
    report = run_debug(request)
    print_debug(report, rows)
    if json_out is not None:
        write_json(report, json_out)
        print(f"wrote {json_out}")
    if html is not None:
        from edgekit.debug.plot import write_html

        write_html(report, html)
        print(f"wrote {html}")
