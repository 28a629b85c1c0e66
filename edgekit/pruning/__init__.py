"""Compression before conversion: magnitude pruning (optionally dynamic network surgery), weight sharing
(k-means clusters), structured channel pruning, low-rank factorization; Deep Compression's storage report.

Each stage takes a model and gives a model (same framework), with a `StageReport` of what it bought.
Unstructured sparsity shrinks the compressed size, not the latency of dense kernels; structured
pruning and factorization make the dense model itself smaller and faster.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from edgekit import commands
from edgekit.errors import EdgekitError

CHOICES = {"scope": ("global", "layer"), "init": ("linear", "density")}  # the options that take one of a few words


@dataclass(frozen=True)
@commands.defaults_from(commands.PRUNE, "compress", renamed={"channel_ratio": "channels", "compression": "keep", "learning_rate": "lr"})
class PruneOptions:
    """What to do: one method and its target (each default: `edgekit prune`'s option's, edgekit.commands)."""

    method: str  # "magnitude", "cluster", "channels" or "lowrank"
    sparsity: float  # magnitude: fraction of weights set to zero
    scope: str  # magnitude: one threshold for all layers, or one per layer
    channel_ratio: float  # channels: fraction of channels removed from each prunable layer
    energy: float | None  # lowrank: keep singular values up to this share of the energy
    compression: float | None  # lowrank: parameter fraction to keep in each factorized layer (if energy is None)
    epochs: int  # fine-tuning epochs with labelled data (magnitude: a gradual sparsity schedule)
    learning_rate: float
    seed: int = 0
    clusters: int  # cluster: shared non-zero values per layer
    init: str  # cluster: centroid initialisation, linear or density
    surgery: bool  # magnitude + epochs: dynamic network surgery (masks recomputed, cut weights may return)
    surgery_band: float = 0.1  # surgery: b = a * (1 + band); between a and b a weight keeps its mask
    round_to: int | None  # channels: each kept channel count a multiple of this (None: the host ISA class's; 1: none)

    def __post_init__(self) -> None:
        for name, allowed in CHOICES.items():
            if getattr(self, name) not in allowed:
                raise EdgekitError(
                    f"--{name} {getattr(self, name)!r} is not one of {', '.join(allowed)}", hint=f"e.g. --{name} {allowed[0]}"
                )

    @classmethod
    def from_section(cls, section: dict) -> PruneOptions:
        """The options a recipe's `compress:` stage asks for (or `edgekit prune`'s values, by the same keys): `keep`
        applies without `energy`."""
        values = commands.from_section(cls, section)
        return cls(**values | ({"compression": None} if values.get("energy") else {}))

    def section(self) -> dict:
        """The `compress:` stage of these options, by its keys (channels, keep, lr, ...), in field order."""
        return commands.section_of(self)


@dataclass
class StageReport:
    """What a compression stage changed."""

    method: str
    parameters_before: int
    parameters_after: int
    nonzero_after: int
    macs_before: int | None = None
    macs_after: int | None = None
    layers: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    storage: list[dict] = field(default_factory=list)  # Deep Compression's table: one entry per stage (coding.storage_table)

    def to_dict(self) -> dict:
        return asdict(self)


METHODS = ("magnitude", "cluster", "channels", "lowrank")


def method_chain(method: str) -> list[str]:
    """`magnitude,cluster` -> ["magnitude", "cluster"]: stages run in order."""
    return [m.strip() for m in method.split(",") if m.strip()]


def kept_rank(weight, options: PruneOptions) -> int | None:
    """Rank to keep for a [out, in] weight matrix (numpy), or None when factorizing would not save parameters.

    By energy (share of the squared singular values) when `options.energy` is set, else by the target
    fraction of parameters. One rule for every framework.
    """
    import numpy as np

    out_f, in_f = weight.shape
    if options.energy is not None:
        s2 = np.linalg.svd(np.asarray(weight, np.float64), compute_uv=False) ** 2
        rank = int((np.cumsum(s2) / s2.sum() < options.energy).sum()) + 1
    else:
        rank = int(options.compression * out_f * in_f / (out_f + in_f))
    rank = max(1, min(rank, out_f, in_f))
    return rank if rank * (out_f + in_f) < out_f * in_f else None
