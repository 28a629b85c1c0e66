"""`edgekit convert` and `edgekit quantize`."""

from __future__ import annotations

import typer

from edgekit.cli.options import command
from edgekit.commands import CONVERT, QUANTIZE


def register(app: typer.Typer) -> None:
    app.command("convert")(convert)
    app.command("quantize")(quantize)


@command(CONVERT)
def convert(**values) -> None:
    """Convert a model (a file, module:factory or zoo: name) to another format and precision, written atomically."""
    from edgekit import api
    from edgekit.cli.render.convert import print_artifact

    print_artifact(api.convert(**values).artifact)


@command(QUANTIZE)
def quantize(**values) -> None:
    """Quantize an existing ONNX model (fp16, int8-dynamic, static int8 with --calib)."""
    from edgekit import api
    from edgekit.cli.render.convert import print_artifact

    print_artifact(api.quantize(**values).artifact)
