"""Progress of the steps that take seconds (a conversion step, calibration, an accuracy pass, a latency run).

The library only announces them; whoever listens draws them (the CLI: a spinner on stderr, off with --quiet).
With no listener, as when edgekit is used as a library, announcing costs nothing and prints nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

Reporter = Callable[[str], AbstractContextManager]
_reporters: list[Reporter] = []


@contextlib.contextmanager
def step(text: str) -> Iterator[None]:
    """Announce a step for the length of the block; steps nest (a conversion inside a matrix cell)."""
    with contextlib.ExitStack() as stack:
        for reporter in _reporters:
            stack.enter_context(reporter(text))
        yield


def report_to(reporter: Reporter | None) -> None:
    """Where steps go from now on (None: nowhere)."""
    _reporters[:] = [reporter] if reporter else []
