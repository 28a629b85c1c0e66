"""Per-tensor error between two runs of one model, accumulated sample by sample, and the first layer where it jumps.

Metrics of a tensor over all samples (the arrays of every sample taken as one vector):
- SQNR (dB) = 10 log10(sum ref^2 / sum (art - ref)^2); None where the two are identical ("exact").
- cosine = <ref, art> / (|ref| |art|); 1 for two zero tensors, 0 for zero vs non-zero.
- max abs error = max |art - ref|, beside the reference's max |ref| for scale.

First jump: walking the matched tensors in graph order, the first with non-finite values, or an SQNR below
`floor_db`, or more than `jump_db` below the SQNR of the tensor before it, where that earlier SQNR counts as
at most CLEAN_DB (40 dB; an exact tensor counts as 40 dB too). The cap keeps the first rounding of an input
(60 dB after exact tensors) from counting as a jump. It is where the artifact starts to lose the reference;
later layers inherit that loss.

Notes (per row, from the reference's own values; they say why a tensor loses, not only where):
- non-finite: the artifact has inf/nan there (e.g. 1 / (a value int8 rounded to 0));
- wide range: a tensor below FLOOR_DB, int8 in the artifact (or not known to be float), whose max |x| is >= 10^4 x
  its median non-zero |x| (an exp's output): a uniform int8 step sized for the max is larger than most values,
  which round to 0;
- amplifies: an op without weights whose max abs error is >= 10x the largest of its inputs' (a multiplication by
  a large constant, an exp): it multiplies the int8 error it is given (a conv's error is its weights' too: not noted);
- shared scale: a Concat whose inputs' max |x| differ >= 10x: one scale for the concatenation gives the
  small-range inputs few int8 levels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

JUMP_DB = 10.0
FLOOR_DB = 20.0  # noise a tenth of the signal's amplitude; int8 tensors usually sit at 25-40 dB
CLEAN_DB = 40.0  # noise 1% of the signal's amplitude: at or above it a tensor counts as clean
WIDE_RANGE = 1e4  # max |x| this many times the median |x|: no one int8 scale serves both (an exp's output)
AMPLIFIES = 10.0  # an op whose max error is this many times its inputs' multiplies their int8 error (a k = 50 gain)
WEIGHTED = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "Convolution", "GroupConvolution", "ConvolutionBackpropData", "CONV_2D"})
SHARED_SCALE = 10.0  # Concat inputs whose ranges differ this much share one output scale badly


@dataclass(frozen=True)
class TensorRef:
    """One intermediate tensor of a model: the key it is matched by, the op that made it, where it sits."""

    key: str
    op: str
    layer: str  # the node / module / op name a person would look for
    aliases: tuple[str, ...] = ()  # other names of the same tensor (OpenVINO keeps a set)
    inputs: tuple[str, ...] = ()  # the keys of the tensors its op reads (where the capture knows them)
    quantized: bool | None = None  # whether the model passes it on in int8 (None: the capture does not say)

    @property
    def names(self) -> tuple[str, ...]:
        return (self.key, *self.aliases)


@dataclass
class ErrorStats:
    """Running sums of one tensor's error over samples."""

    signal: float = 0.0
    noise: float = 0.0
    dot: float = 0.0
    art_energy: float = 0.0
    max_abs: float = 0.0
    ref_max_abs: float = 0.0
    ref_median_abs: float = 0.0  # the largest per-sample median of the reference's non-zero |x|
    nonfinite: int = 0
    shape: tuple = field(default_factory=tuple)

    def add(self, ref: np.ndarray, art: np.ndarray) -> None:
        ref64, art64 = ref.astype(np.float64).ravel(), art.astype(np.float64).ravel()
        finite = np.isfinite(art64) & np.isfinite(ref64)
        self.nonfinite += int(finite.size - np.count_nonzero(finite))
        ref64, art64 = ref64[finite], art64[finite]
        diff = art64 - ref64
        self.signal += float(ref64 @ ref64)
        self.noise += float(diff @ diff)
        self.dot += float(ref64 @ art64)
        self.art_energy += float(art64 @ art64)
        self.max_abs = max(self.max_abs, float(np.abs(diff).max(initial=0.0)))
        self.ref_max_abs = max(self.ref_max_abs, float(np.abs(ref64).max(initial=0.0)))
        nonzero = np.abs(ref64[ref64 != 0])
        self.ref_median_abs = max(self.ref_median_abs, float(np.median(nonzero)) if nonzero.size else 0.0)
        self.shape = tuple(ref.shape)

    def sqnr_db(self) -> float | None:
        if self.noise == 0.0:
            return None
        return -math.inf if self.signal == 0.0 else 10.0 * math.log10(self.signal / self.noise)

    def cosine(self) -> float:
        if self.signal == 0.0 or self.art_energy == 0.0:
            return 1.0 if self.signal == self.art_energy else 0.0
        return self.dot / math.sqrt(self.signal * self.art_energy)


def table_rows(matched: list[tuple[TensorRef, TensorRef]], stats: dict[str, ErrorStats]) -> list[dict]:
    """One row per matched tensor, in the reference's graph order."""
    rows = []
    for depth, (ref, art) in enumerate(matched):
        s = stats[ref.key]
        sqnr = s.sqnr_db()
        rows.append(
            {
                "depth": depth,
                "tensor": ref.key,
                "artifact_tensor": art.key,
                "op": ref.op,
                "layer": ref.layer,
                "artifact_op": art.op,
                "shape": list(s.shape),
                "sqnr_db": None if sqnr is None else round(sqnr, 3) if math.isfinite(sqnr) else sqnr,
                "exact": sqnr is None,
                "cosine": round(s.cosine(), 6),
                "max_abs_error": s.max_abs,
                "reference_max_abs": s.ref_max_abs,
                "reference_median_abs": s.ref_median_abs,
                "nonfinite": s.nonfinite,
            }
        )
    for row, (_, art) in zip(rows, matched, strict=True):
        row["quantized"] = art.quantized
    add_notes(rows, [ref.inputs for ref, _ in matched])
    return rows


def add_notes(rows: list[dict], inputs: list[tuple[str, ...]]) -> None:
    """Each row's `notes`: what in the reference's own values makes int8 lose there (module docstring: Notes)."""
    by_tensor = {row["tensor"]: row for row in rows}
    for row, reads in zip(rows, inputs, strict=True):
        sources = [by_tensor[name] for name in reads if name in by_tensor]
        notes = []
        if row["nonfinite"]:
            notes.append(f"non-finite: {row['nonfinite']} values are inf/nan in the artifact")
        lossy = not row["exact"] and row["sqnr_db"] < FLOOR_DB and row.get("quantized") is not False
        if lossy and row["reference_median_abs"] and row["reference_max_abs"] / row["reference_median_abs"] >= WIDE_RANGE:
            ratio = row["reference_max_abs"] / row["reference_median_abs"]
            notes.append(
                f"wide range: max |x| {row['reference_max_abs']:.3g} is {ratio:.0e}x the median {row['reference_median_abs']:.3g}: "
                "one int8 step is larger than most values"
            )
        worst_input = max((r["max_abs_error"] for r in sources if not r["exact"]), default=0.0)
        if worst_input and row["op"] not in WEIGHTED and row["max_abs_error"] >= AMPLIFIES * worst_input:
            notes.append(f"amplifies: its error is {row['max_abs_error'] / worst_input:.3g}x its inputs' (max abs)")
        ranges = [r["reference_max_abs"] for r in sources if r["reference_max_abs"] > 0]
        if row["op"] == "Concat" and len(ranges) > 1 and max(ranges) >= SHARED_SCALE * min(ranges):
            notes.append(
                f"shared scale: its inputs' ranges differ {max(ranges) / min(ranges):.0f}x (max |x| {min(ranges):.3g} .. {max(ranges):.3g}): "
                "one scale for all leaves the small ones few int8 levels"
            )
        row["notes"] = notes


def first_jump(rows: list[dict], jump_db: float = JUMP_DB, floor_db: float = FLOOR_DB) -> int | None:
    """The index of the first row below `floor_db`, or more than `jump_db` below the row before it (None: no such row)."""
    previous = CLEAN_DB
    for i, row in enumerate(rows):
        sqnr = math.inf if row["exact"] else row["sqnr_db"]
        if row["nonfinite"] or sqnr < floor_db or previous - sqnr > jump_db:
            return i
        previous = min(sqnr, CLEAN_DB)
    return None


def worst(rows: list[dict], count: int = 5) -> list[dict]:
    """The rows of lowest SQNR (exact rows never)."""
    lossy = [r for r in rows if not r["exact"]]
    return sorted(lossy, key=lambda r: r["sqnr_db"])[:count]
