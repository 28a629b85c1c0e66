"""Backends: one module per model format declares everything edgekit knows about it; one list names them.

A backend module holds a `BACKEND = Backend(...)` made of strings only ("module:attr" for code), so
reading the registry imports no framework. The tables the rest of edgekit used to keep by hand (default
targets, suffixes, formats, converters, runners, describers, summaries) are derived here. Adding a
format is one module plus one line in `REGISTRY` (docs/backends.md); tests/contract/test_backends.py
runs the same checks on every registered backend and fails for one it has no contract entry for.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import cache

# One line per backend. Order is the order of `--to` choices and `edgekit targets`.
REGISTRY = (
    "edgekit.backends.onnx",
    "edgekit.backends.torch",
    "edgekit.backends.openvino",
    "edgekit.backends.keras",
    "edgekit.backends.tflite",
    "edgekit.backends.tensorrt",
    "edgekit.backends.executorch",
)


@dataclass(frozen=True)
class Backend:
    """A model format and what edgekit does with it; code is named as "module:attr" and imported when used."""

    format: str  # the family name: what `--to` takes and what runners declare they run
    suffixes: dict[str, str]  # file suffix -> format name as `edgekit info` shows it; the first is what convert writes
    runners: dict[str, str]  # runtime name -> "module:Runner"
    default_targets: tuple[str, ...]  # runtime:device, the first is the default of `validate`/`bench`
    converters: dict[str, str] = field(default_factory=dict)  # source family -> "module:Converter" writing this format
    loader: str | None = None  # "module:function" (source) -> (model, input specs): what its converters take
    describer: str | None = None  # "module:function" (path, precision) -> Artifact; None for source formats
    summary: str | None = None  # "module:function" (path) -> dict of graph facts for `edgekit info`
    via: str | None = None  # a format built from another edgekit writes first (TensorRT from its ONNX)
    source_only: bool = False  # a framework's own model (torch, keras): read, never written by `convert`

    @property
    def suffix(self) -> str:
        """The suffix `convert` writes."""
        return next(iter(self.suffixes), f".{self.format}")


@cache
def backends() -> dict[str, Backend]:
    """Every registered backend by format."""
    found = {}
    for module in REGISTRY:
        backend = importlib.import_module(module).BACKEND
        found[backend.format] = backend
    return found


def backend(fmt: str) -> Backend | None:
    return backends().get(fmt)


def written_formats() -> tuple[str, ...]:
    """Formats `edgekit convert --to` writes."""
    return tuple(b.format for b in backends().values() if not b.source_only)


def runners() -> dict[str, str]:
    return {runtime: ref for b in backends().values() for runtime, ref in b.runners.items()}


def default_targets() -> dict[str, list[str]]:
    return {b.format: list(b.default_targets) for b in backends().values()}


def converters() -> dict[tuple[str, str], str]:
    """(source family, format) -> "module:Converter"."""
    return {(source, b.format): ref for b in backends().values() for source, ref in b.converters.items()}


def suffix_formats() -> dict[str, str]:
    """File suffix -> format, for recognising a model file."""
    return {suffix: name for b in backends().values() for suffix, name in b.suffixes.items()}


def describers() -> dict[str, str]:
    return {b.format: b.describer for b in backends().values() if b.describer}


def summaries() -> dict[str, str]:
    return {b.format: b.summary for b in backends().values() if b.summary}
