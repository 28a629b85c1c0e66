"""Results a process keeps by what makes them, so the same work is not done twice in one run: a matrix's cells compare
against one reference pass, and two int8 conversions of one model share its channel order, calibration and layer
statistics. Keys are content hashes (a model file's bytes, the samples' bytes: Samples.digest, the options), never paths or names."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

Value = TypeVar("Value")


class Kept(Generic[Value]):
    """At most `entries` results by key, the oldest dropped first."""

    def __init__(self, entries: int) -> None:
        self.entries = entries
        self.results: dict[str, Value] = {}

    def get_or_make(self, key: str, make: Callable[[], Value], keep: Callable[[Value], bool] = lambda _: True) -> Value:
        """The result kept under `key`, else make()'s, kept where `keep` says it is worth keeping."""
        if key in self.results:
            return self.results[key]
        value = make()
        if keep(value):
            self.results[key] = value
            while len(self.results) > self.entries:
                del self.results[next(iter(self.results))]
        return value

    def clear(self) -> None:
        self.results.clear()
