"""edgekit's own progress: a spinner naming the step under way (edgekit.progress steps, on stderr, only on a
terminal; off with --quiet), and one live view of a matrix run: every cell's state (queued, running where,
converted, timing, done, failed) and the counts, redrawn in place."""

from __future__ import annotations

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from edgekit.cli.render.table import console

steps_console = Console(stderr=True)  # the results on stdout stay clean for pipes


def spinner(text: str):
    """A step as a spinner line while it runs (nested steps stack); nothing is left behind, nothing off a terminal."""
    return steps_console.status(escape(text), spinner="dots")


STYLES = {"queued": "dim", "running": "cyan", "converted": "blue", "timing": "magenta", "done": "green", "failed": "red"}


class MatrixView:
    """A progress callback for `run_recipe`: `view(text)` prints a line above the table,
    `view.cell(index, cell, state, detail)` updates a cell's row."""

    def __init__(self, cells: list[tuple[str, str, str]]) -> None:
        self.cells = cells
        self.states: dict[int, tuple[str, str]] = {i: ("queued", "") for i in range(len(cells))}
        self.live = Live(self._table(), console=console, refresh_per_second=4, transient=False)

    def __enter__(self) -> MatrixView:
        self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.live.update(self._table())
        self.live.__exit__(*exc)
        console.line()

    def __call__(self, text: str) -> None:
        self.live.console.print(f"[dim]... {escape(text)}[/]", highlight=False)

    def cell(self, index: int, cell: tuple, state: str, detail: str = "") -> None:
        self.states[index] = (state, detail)
        self.live.update(self._table())

    def _table(self) -> Table:
        counts = {s: sum(1 for state, _ in self.states.values() if state == s) for s in STYLES}
        title = f"matrix: {counts['done']} done, {counts['failed']} failed, {counts['running']} running, {len(self.cells)} cells"
        table = Table("format", "precision", "target", "state", "where / why", title=title, title_justify="left")
        for index, (fmt, precision, target) in enumerate(self.cells):
            state, detail = self.states[index]
            table.add_row(fmt, precision, escape(target), f"[{STYLES.get(state, '')}]{state}[/]", escape(detail))
        return table
