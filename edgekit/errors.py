"""Errors the user sees: what went wrong and what to do. Only the CLI prints them."""

from __future__ import annotations


class EdgekitError(Exception):
    """A mistake or missing piece the user can fix; the CLI prints it on one line, exit 1."""

    exit_code = 1

    def __init__(self, message: str, hint: str = "", cause: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.cause = cause  # the framework's full message (e.g. OpenVINO's list of unsupported ops), shown below the line

    def cause_lines(self, limit: int = 40) -> list[str]:
        """The cause as the CLI prints it under the error line: indented, at most `limit` lines."""
        lines = [ln.rstrip() for ln in self.cause.strip().splitlines() if ln.strip()]
        if len(lines) == 1 and lines[0].strip() in self.message:
            return []  # the message already says it all
        shown = [f"  {ln}" for ln in lines[:limit]]
        return shown + ([f"  ... {len(lines) - limit} more lines (run with -v for the log)"] if len(lines) > limit else [])

    def lines(self) -> list[str]:
        """What the CLI prints: `error: WHAT`, then `hint: WHAT TO DO` on its own line."""
        return error_lines(self.message, self.hint)

    def one_line(self) -> str:
        """The message and the hint on one line, for a table cell or a row's status."""
        text = " ".join(self.message.split())
        return f"{text}; hint: {' '.join(self.hint.split())}" if self.hint else text

    def __str__(self) -> str:
        return self.one_line()


class ModelLoadError(EdgekitError):
    """A model file that is missing, corrupt, of the wrong kind, or a factory that does not exist."""


class InputMismatchError(EdgekitError):
    """Data or --input shapes/dtypes that do not fit the model's inputs."""


class RuntimeMissingError(EdgekitError):
    """A backend whose Python package is not installed."""


class ConversionError(EdgekitError):
    """A converter that could not produce an artifact (an unsupported op, a failed export)."""


class VerificationError(EdgekitError):
    """An artifact that converted but failed its own check against the source (e.g. a perplexity above the limit):
    not written, exit 2 (a failed gate's code)."""

    exit_code = 2


def error_lines(message: str, hint: str = "") -> list[str]:
    """The one error style: `error: WHAT` and, on its own line, `hint: WHAT TO DO` (each folded onto one line)."""
    lines = [f"error: {' '.join(message.split())}"]
    return lines + [f"hint: {' '.join(hint.split())}"] if hint else lines


def first_line(exc: BaseException, limit: int | None = None) -> str:
    """The first line of an error's message (its type's name where it has none), cut at `limit` characters: what one
    line of ours quotes of a framework's error."""
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:limit]
