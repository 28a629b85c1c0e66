"""The `edgekit` command line. Parses, calls the library, renders; imports frameworks only inside commands."""

from __future__ import annotations

import logging
import sys

import typer

from edgekit.errors import EdgekitError

app = typer.Typer(
    name="edgekit",
    help="Take a trained model to an edge runtime and prove it still works there.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _options(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show info-level logs."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only errors (for CI logs)."),
) -> None:
    level = logging.ERROR if quiet else logging.INFO if verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s: %(message)s", stream=sys.stderr, force=True)
    for noisy in ("onnxscript", "torch", "onnx_ir", "root"):
        logging.getLogger(noisy).setLevel(max(level, logging.ERROR))


_registered: list[bool] = []


def _register() -> None:
    if _registered:  # main() may run more than once in one process (tests/corpus/batch_cli.py)
        return
    from edgekit.cli import compress, convert, debug, demo, devices, info, measure, recipe

    for module in (info, convert, compress, measure, recipe, demo, devices, debug):
        module.register(app)
    _registered.append(True)


def main() -> None:
    """Entry point: an EdgekitError becomes one line on stderr and exit 1."""
    _register()
    try:
        code = app(standalone_mode=False)  # click returns (not raises) the code of a typer.Exit here
    except EdgekitError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        if exc.cause_lines():
            print("cause:", *exc.cause_lines(), sep="\n", file=sys.stderr)
        sys.exit(1)
    except typer.Abort:
        print("aborted", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except typer.TyperException as exc:  # usage errors (typer vendors click's exceptions)
        exc.show()
        sys.exit(getattr(exc, "exit_code", 2))
    sys.exit(code if isinstance(code, int) else 0)
