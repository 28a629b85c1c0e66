"""The console every table prints to, and the pieces several commands' tables share."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from edgekit.metrics.gate import fmt_against

__all__ = ["console", "escape", "gate_verdict", "machine_line", "value_and_limit"]  # escape: for the commands' own lines

# Logs and CI are not terminals: keep tables whole rather than squeezing them to 80 columns.
console = Console(highlight=False, width=None if Console().is_terminal else 200)


def machine_line(report: dict, threads: int | None = None) -> str:
    m = report["machine"]
    thread_text = f", {threads} thread(s)" if threads else ""
    isa_class = f", ISA class {m['isa_class']}" if m.get("isa_class") else ""
    return (
        f"measured on {m['cpu']} ({m['usable_cores']} usable cores{thread_text}; {', '.join(m['isa']) or 'no SIMD flags read'}{isa_class})"
    )


def gate_verdict(passed: bool) -> str:
    """One gate's result: pass in green, FAIL in red."""
    return "[green]pass[/]" if passed else "[red]FAIL[/]"


def value_and_limit(result: dict) -> tuple[str, str]:
    """A gate's value and limit with the digits that tell them apart."""

    return ("-", str(result["limit"])) if result["value"] is None else fmt_against(result["value"], result["limit"])
