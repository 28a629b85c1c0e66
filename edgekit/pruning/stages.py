"""A compression stage, backend-neutral: the dispatch to the format's pruner (the registry names it), the report of
a chain of stages, the kept channel counts at the vector width, and the class labels fine-tuning trains on."""

from __future__ import annotations

import numpy as np

from edgekit import progress, registry
from edgekit.artifact import TensorSpec
from edgekit.calibration import Samples
from edgekit.errors import EdgekitError
from edgekit.imports import import_attr
from edgekit.isa import CHANNEL_MULTIPLE_MEASURED, channel_multiple, host_class
from edgekit.native import third_party_quiet
from edgekit.pruning import METHODS, PruneOptions, StageReport, method_chain
from edgekit.source import ModelSource

STAGE_NAMES = {"magnitude": "pruned", "cluster": "clustered", "channels": "channels", "lowrank": "lowrank"}


def prune(
    source: ModelSource,
    options: PruneOptions,
    out,
    inputs: list[TensorSpec],
    data: str | None = None,
    finetune_data: str | None = None,
) -> StageReport:
    """Compress `source` with `options`; writes the result to `out` (.pt2 for PyTorch, .keras for Keras)."""
    chain = method_chain(options.method)
    if not chain or any(m not in METHODS for m in chain):
        raise EdgekitError(
            f"unknown compression method '{options.method}'", hint=f"choose one of: {', '.join(METHODS)} (or a chain: magnitude,cluster)"
        )
    pruner = registry.backend(source.family).pruner
    if pruner is None:
        raise EdgekitError(
            f"edgekit prunes {registry.titles(lambda b: b.pruner)} models, not {source.format}",
            hint="prune the original model, then convert",
        )
    with progress.step(f"{source.name}: {options.method}"), third_party_quiet():
        return import_attr(pruner)(source, options, out, inputs, data, finetune_data)


def chained(method: str, reports: list[StageReport]) -> StageReport:
    """One report for a chain of stages: counts from its ends, the last stage's layers, every note."""
    first, last = reports[0], reports[-1]
    macs = [r for r in reports if r.macs_before is not None]
    return StageReport(
        method,
        first.parameters_before,
        last.parameters_after,
        last.nonzero_after,
        macs[0].macs_before if macs else None,
        macs[-1].macs_after if macs else None,
        layers=last.layers,
        notes=[note for r in reports for note in r.notes],
    )


def kept_multiple(round_to: int | None) -> tuple[int, str]:
    """The multiple each layer keeps (asked for, else the host ISA class's) and the note saying why."""
    if round_to:
        return round_to, f"kept channels rounded to a multiple of {round_to} (--round-to)" if round_to > 1 else "kept channels not rounded"
    isa = host_class().name
    measured = "measured, bench/results/" + isa + "/prune.md" if isa in CHANNEL_MULTIPLE_MEASURED else "not measured on this class"
    multiple = channel_multiple(isa)
    return multiple, (
        f"kept channels rounded to a multiple of {multiple}: the vector width of {isa} (this host; {measured}); "
        "--round-to N for another target's"
    )


def kept_channels(width: int, ratio: float, multiple: int) -> int:
    """The multiple of `multiple` nearest to (1 - ratio) of `width` channels, at least one multiple, at most `width`."""
    return min(width, max(multiple, multiple * round(width * (1 - ratio) / multiple)))


def class_labels(samples: Samples) -> np.ndarray:
    """The class of each fine-tuning sample; refused where there are none, or label sets (they score, they cannot train)."""
    if samples.labels is None:
        raise EdgekitError("fine-tuning needs labels", hint="add a `labels` array to the --finetune data")
    if samples.labels.dtype == bool:
        raise EdgekitError(
            "fine-tuning needs one class per sample; these labels are label sets ([N, classes])",
            hint="give --finetune data with [N] class indices; label sets only score accuracy (--data, --val)",
        )
    return samples.labels.astype(np.int64)
