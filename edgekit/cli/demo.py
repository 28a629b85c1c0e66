"""`edgekit demo`: the embedded default, end to end."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)


def demo(
    workdir: Path = typer.Option(Path("edgekit-demo"), "--workdir", help="Where artifacts and reports go."),
    threads: int = typer.Option(None, "--threads", help="Threads for every runtime (default: all usable cores)."),
    runs: int = typer.Option(200, "--runs", help="Timed latency runs per artifact."),
    keras: bool = typer.Option(False, "--keras", help="Start from the Keras model instead of the PyTorch one."),
) -> None:
    """A real Fashion-MNIST CNN to ONNX, OpenVINO and TFLite in fp32/fp16/int8, validated on 10k test images, timed, tabled."""
    from edgekit.cli.render import print_demo
    from edgekit.demo import run_demo

    print_demo(run_demo(workdir, threads, runs, keras))
