"""`edgekit prune`."""

from __future__ import annotations

import typer

from edgekit.cli.options import command
from edgekit.commands import PRUNE


def register(app: typer.Typer) -> None:
    app.command("prune")(prune)


@command(PRUNE)
def prune(**values) -> None:
    """Compress a model (prune or factorize), save it, and compare original vs pruned (vs quantized) on data."""
    from edgekit import api
    from edgekit.cli.render.prune import print_compression

    result = api.prune(**values)
    print_compression(result.to_dict())
    if not result.passed:
        raise typer.Exit(2)
