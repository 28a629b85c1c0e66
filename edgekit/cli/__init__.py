"""The `edgekit` command line. Parses, calls the library, renders; imports frameworks only inside commands."""

from __future__ import annotations

import logging
import re
import sys

import typer

from edgekit import native
from edgekit.errors import EdgekitError, error_lines
from edgekit.progress import report_to  # `progress` itself would be shadowed by the edgekit.cli.progress module

app = typer.Typer(
    name="edgekit",
    help="Take a trained model to an edge runtime and prove it still works there.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _options(
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="Show info-level logs, and the frameworks' own logs, warnings and progress bars."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only results and errors: no progress, no warnings (for CI logs)."),
    nonfinite: str | None = typer.Option(
        None,
        "--nonfinite",
        help="NaN/Inf in calibration or validation data: error (default), or warn (use them; counted and warned in the report).",
    ),
) -> None:
    """Global options, before the command: frameworks are quiet unless --verbose; edgekit's progress shows unless --quiet."""
    from edgekit.calibration.samples import set_nonfinite_policy

    if nonfinite:
        set_nonfinite_policy(nonfinite)

    level = logging.ERROR if quiet else logging.INFO if verbose else logging.WARNING
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_LevelFormatter())
    if not verbose:
        handler.addFilter(native.OwnLogsOnly())
    logging.basicConfig(level=level, handlers=[handler], force=True)
    native.set_verbose(verbose)
    for name in () if verbose else native.CHATTY:
        logging.getLogger(name).setLevel(max(level, logging.ERROR))
    if quiet:
        report_to(None)
    else:
        from edgekit.cli.progress import spinner

        report_to(spinner)


class _LevelFormatter(logging.Formatter):
    """`warning: ...`, in the voice of `error: ...`."""

    def format(self, record: logging.LogRecord) -> str:
        text = f"{record.levelname.lower()}: {record.getMessage()}"
        return f"{text}\n{self.formatException(record.exc_info)}" if record.exc_info else text


_registered: list[bool] = []


def _register() -> None:
    if _registered:  # main() may run more than once in one process (tests/corpus/batch_cli.py)
        return
    from edgekit.cli import convert, debug, demo, devices, info, measure, prune, recipe

    for module in (info, convert, prune, measure, recipe, demo, devices, debug):
        module.register(app)
    _registered.append(True)


def main() -> None:
    """Entry point: every error is `error: WHAT` then `hint: WHAT TO DO` on stderr, exit 1 (2 for a failed gate or verification)."""
    _register()
    try:
        code = app(standalone_mode=False, prog_name="edgekit")  # click returns (not raises) the code of a typer.Exit here
    except EdgekitError as exc:
        _fail(exc.lines(), exc.cause_lines(), exc.exit_code)
    except typer.Abort:
        _fail(error_lines("aborted"))
    except KeyboardInterrupt:
        sys.exit(130)
    except typer.TyperException as exc:  # usage errors: typer vendors click's exceptions
        if not exc.format_message().strip():  # `edgekit` alone: the help is the answer, already printed
            sys.exit(0)
        _fail(error_lines(_sentence(exc.format_message()), _usage_hint(exc)))
    sys.exit(code if isinstance(code, int) else 0)


def _fail(lines: list[str], cause: list[str] | None = None, code: int = 1) -> None:
    print(*lines, sep="\n", file=sys.stderr)
    if cause:
        print("cause:", *cause, sep="\n", file=sys.stderr)
    sys.exit(code)


def _sentence(text: str) -> str:
    """Click's 'No such option: --x.' in edgekit's voice: 'no such option: --x'."""
    text = " ".join(text.split()).rstrip(".")
    return text[:1].lower() + text[1:] if text[1:2].islower() else text


def _usage_hint(exc: Exception) -> str:
    ctx = getattr(exc, "ctx", None)
    if ctx is None:
        return "run `edgekit --help` for the commands and options"
    usage = re.sub(r"\{(\w+)\}", lambda m: m[1].upper(), " ".join(ctx.get_usage().split()))  # typer writes arguments {model}
    return f"{usage[:1].lower()}{usage[1:]}; `{ctx.command_path} --help` lists the options"
