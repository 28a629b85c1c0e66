"""`edgekit validate` and `edgekit bench`."""

from __future__ import annotations

import typer

from edgekit.cli.options import command
from edgekit.commands import BENCH, VALIDATE


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)
    app.command("bench")(bench)


@command(VALIDATE)
def validate(**values) -> None:
    """Compare an artifact with its reference on the same inputs, time it, and gate the result.

    Without -r: the model the artifact was converted from (its provenance); without -d: a zoo model's validation set."""
    from edgekit import api
    from edgekit.cli.render.validate import print_validation

    result = api.validate(**values)
    print_validation(result.to_dict())
    if not result.passed:
        raise typer.Exit(2)


@command(BENCH)
def bench(**values) -> None:
    """Load time, first inference, then p50/p90/p99/mean/std/min latency after warm-up, throughput, peak RSS, size."""
    from edgekit import api
    from edgekit.cli.render.bench import print_bench

    print_bench(api.bench(**values).to_dict())
