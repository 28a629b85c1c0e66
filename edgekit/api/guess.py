"""What the commands work out for the user: zoo defaults, the reference an artifact came from, input shapes from data.

Each guess is said (in the output and the provenance or report), never silent.
"""

from __future__ import annotations

import logging
from pathlib import Path

from edgekit.artifact import TensorSpec
from edgekit.errors import EdgekitError
from edgekit.source import ModelSource, open_source
from edgekit.zoo.names import zoo_entry

log = logging.getLogger("edgekit")
# Formats that do not record input shapes: the data's shapes stand in for --input.
SHAPELESS = ("torch-factory", "torchscript", "torch-pickle")


def default_calibration(source: ModelSource, precision: str, calib: str | None) -> str | None:
    """The zoo model's declared calibration set, for a static int8 conversion given no --calib."""

    if calib or precision != "int8" or not source.zoo:
        return None
    default = zoo_entry(source.zoo).calibration
    if default:
        log.warning("no --calib given: calibrating on %s, the default calibration set of %s", default, source.zoo)
    return default


def default_validation(source: ModelSource) -> str | None:
    """The zoo model's declared labelled validation set."""

    return zoo_entry(source.zoo).validation if source.zoo else None


def inputs_from_data(source: ModelSource, given: tuple[TensorSpec, ...], *data: str | None) -> tuple[TensorSpec, ...]:
    """--input when given; else, for a model that does not record its shapes, the shapes of the first data file
    (a dynamic batch axis, the arrays' names and dtypes)."""
    from edgekit.calibration import load_samples

    spec = next((d for d in data if d), None)
    if given or spec is None or source.format not in SHAPELESS:
        return given
    samples = load_samples(spec, 1)
    specs = tuple(TensorSpec(name, ("batch", *array.shape[1:]), str(array.dtype)) for name, array in samples.arrays.items())
    log.info("input shapes from %s: %s", spec, ", ".join(f"{s.name}:{s.shape_text()}:{s.dtype}" for s in specs))
    return specs


def reference_of(artifact: ModelSource, weights: str | None = None, allow_pickle: bool = False) -> tuple[ModelSource, str]:
    """The model an artifact was converted from, as its provenance names it: (source, the spec to show)."""
    from edgekit.provenance import read_provenance

    hint = "pass the original model with -r/--reference (a file, module:factory or zoo: name)"
    provenance = read_provenance(artifact.path) if artifact.path else None
    if not provenance or not provenance.get("source"):
        raise EdgekitError(f"{artifact.spec} has no edgekit provenance naming the model it came from", hint=hint)
    origin = provenance["source"]
    if origin.get("zoo"):
        return open_source(origin["zoo"]), origin["zoo"]
    spec = origin["spec"]
    if origin["format"] != "torch-factory" and not Path(spec).exists():
        raise EdgekitError(f"{artifact.spec} was converted from {spec}, which is not there any more", hint=hint)
    return open_source(spec, weights or origin.get("weights"), allow_pickle), spec
