"""`edgekit info` and `edgekit targets`."""

from __future__ import annotations

import json

import typer

from edgekit.cli import options
from edgekit.source import open_source


def register(app: typer.Typer) -> None:
    app.command("info")(info)
    app.command("targets")(targets)


def info(
    model: str = typer.Argument(..., help="Model file or module:factory."),
    weights: str = options.WEIGHTS,
    allow_pickle: bool = options.ALLOW_PICKLE,
    json_out: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    for_target: str = typer.Option(
        None,
        "--for-target",
        help="Also check the model for this target: tensorrt:cuda (symmetric int8 Q/DQ, per-channel, ops; exit 2 if rejected); "
        "any other target (onnxruntime:cpu, openvino:cpu, litert:cpu, executorch:cpu) gives its int8 coverage: the share of "
        "MACs the runtime executes in int8 and the layers left float.",
    ),
) -> None:
    """Format, inputs/outputs, parameter count, size on disk, op histogram."""
    from edgekit.cli.render.convert import print_tensorrt_findings
    from edgekit.cli.render.info import print_coverage, print_info
    from edgekit.summary import model_info, target_checks

    source = open_source(model, weights, allow_pickle)
    summary = model_info(source)
    if for_target:
        summary.update(target_checks(source, for_target))
    findings = summary.get("tensorrt_checks")
    if json_out:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print_info(summary)
        if findings is not None:
            print_tensorrt_findings(findings)
        if summary.get("int8_coverage"):
            print_coverage(summary["int8_coverage"], for_target)
    if findings and any(f["level"] == "error" for f in findings):
        raise typer.Exit(2)


def targets(
    probe: bool = typer.Option(False, "--probe", help="Ask each runtime for its devices (imports them all: seconds)."),
) -> None:
    """Every runtime and device edgekit knows, found or not (from package metadata and the system; --probe asks the runtimes)."""
    from edgekit.cli.render.info import print_targets
    from edgekit.summary import list_targets

    print_targets(list_targets(probe))
