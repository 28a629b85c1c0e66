"""What an artifact is and where it came from: its description through the backend registry's describers and the
provenance edgekit writes beside it (`MODEL.<ext>.edgekit.json`)."""

from __future__ import annotations

import json
from pathlib import Path

from edgekit import registry
from edgekit.artifact import Artifact, file_size
from edgekit.fileio import SIDECAR_SUFFIX
from edgekit.imports import import_attr
from edgekit.source import ModelSource

DESCRIBERS = registry.describers()  # format -> "module:function" (path, precision) -> Artifact


def describe(path: Path, fmt: str, precision: str | None, provenance: dict | None = None) -> Artifact:
    """An Artifact for a file just written (or found on disk)."""

    artifact = import_attr(DESCRIBERS[fmt])(path, precision)
    if provenance is None and path.with_name(path.name + SIDECAR_SUFFIX).exists():
        provenance = read_provenance(path)
    if provenance:
        artifact.meta["provenance"] = provenance
        artifact.precision = provenance.get("precision", artifact.precision)
    return artifact


def read_provenance(path: Path) -> dict | None:
    """The sidecar edgekit wrote next to an artifact, if any."""
    sidecar = Path(path).with_name(Path(path).name + SIDECAR_SUFFIX)
    try:
        return json.loads(sidecar.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def source_provenance(source: ModelSource) -> dict:
    """What names the model an artifact came from: enough to open it again (`validate ARTIFACT` needs no -r)."""
    weights = {"weights": str(Path(source.weights).resolve())} if source.weights and not source.zoo else {}
    return {"spec": source.spec, "format": source.format, **weights, **({"zoo": source.zoo} if source.zoo else {})}


def model_size(source: ModelSource) -> int:
    """The bytes of a model as its format counts them (every file of an artifact), 0 for a model with no file."""
    if source.path is None:
        return 0
    if source.format in DESCRIBERS:
        return describe(source.path, source.format, None).size_bytes()
    return file_size(source.path)


def report_entry(source: ModelSource, target: str) -> dict:
    """A model as a report names it: its spec, format and target (its zoo name), and the artifact's description."""
    described = {"spec": source.spec, "format": source.format, "target": target, **({"zoo": source.zoo} if source.zoo else {})}
    if source.format in DESCRIBERS:
        described.update(describe(source.path, source.format, None).to_dict())
    return described
