"""`edgekit info` and `edgekit targets`."""

from __future__ import annotations

import typer

from edgekit.cli import options


def register(app: typer.Typer) -> None:
    app.command("info")(info)
    app.command("targets")(targets)


def info(
    model: str = typer.Argument(..., help="Model file or module:factory."),
    weights: str = options.WEIGHTS,
    allow_pickle: bool = options.ALLOW_PICKLE,
    json_out: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Format, inputs/outputs, parameter count, size on disk, op histogram."""
    from edgekit.cli.render import print_info
    from edgekit.loaders import open_source
    from edgekit.summary import model_info

    summary = model_info(open_source(model, weights, allow_pickle))
    if json_out:
        import json

        print(json.dumps(summary, indent=2, default=str))
    else:
        print_info(summary)


def targets() -> None:
    """Every runtime and device edgekit knows, found or not."""
    from edgekit.cli.render import print_targets
    from edgekit.summary import list_targets

    print_targets(list_targets())
