"""Samples: named arrays [N, ...] with optional labels and provenance; loading and checking them."""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from edgekit.artifact import TensorSpec, check_array, is_generated_name
from edgekit.errors import EdgekitError, InputMismatchError

log = logging.getLogger("edgekit")
LABEL_KEYS = ("labels", "label", "y")
FEW_SAMPLES = 100


def checked_labels(labels: np.ndarray, where: str) -> np.ndarray:
    """Labels as edgekit scores them: a class per sample ([N] or [N, 1], as int64), or label sets ([N, classes] of 0/1, as
    bool): a sample is right when its top-1 is any of its classes, as ImageNet-ReaL scores ImageNet."""
    if labels.ndim == 1 or (labels.ndim == 2 and labels.shape[1] == 1):
        return labels.reshape(-1).astype(np.int64)
    if labels.ndim == 2 and np.isin(labels, (0, 1)).all() and labels.any():
        return labels.astype(bool)
    raise InputMismatchError(
        f"labels in {where} have shape {list(labels.shape)}: neither a class per sample nor 0/1 label sets naming a class",
        hint="give [N] class indices, or an [N, classes] array of 0/1 marking every class that counts as right",
    )


def labelled(labels: np.ndarray) -> np.ndarray:
    """Which samples carry a label: all of them, or those whose label set names a class (the others are left out of
    accuracy, as ImageNet-ReaL leaves out the images none of its classes names)."""
    return labels.any(1) if labels.dtype == bool else np.ones(len(labels), bool)


@dataclass
class Samples:
    """N samples: `arrays` maps input names to [N, ...] arrays (sample-major, whatever the model's layout);
    `labels` is None, [N] classes or [N, classes] boolean label sets (checked_labels); `specs` (set by bind) put each batch in the model's layout."""

    arrays: dict[str, np.ndarray]
    labels: np.ndarray | None = None
    provenance: dict = field(default_factory=dict)
    specs: dict[str, TensorSpec] = field(default_factory=dict)
    ids: list[str] | None = None  # each sample's name in its source (an image's path in its folder, file.npz[row])

    def __len__(self) -> int:
        return len(next(iter(self.arrays.values()))) if self.arrays else 0

    def batches(self, size: int, fixed: int | None = None) -> Iterator[dict[str, np.ndarray]]:
        """Consecutive batches of at most `size` samples, in order, each input in the model's layout (a recurrent
        state [layers, batch, hidden] gets its batch on axis 1). For a model whose batch is fixed (`fixed`: the
        fixed_batch of the model fed, artifact.fixed_batch or Runner.fixed_batch), batches of exactly that size, the
        last one filled up by repeating its samples: `counted_batches` says how many of each are real."""
        for feeds, _ in self.counted_batches(size, fixed):
            yield feeds

    def counted_batches(self, size: int, fixed: int | None = None) -> Iterator[tuple[dict[str, np.ndarray], int]]:
        """(feeds, how many of the batch's samples are real) for each of `batches(size, fixed)`: a model fixed at 4
        takes 10 samples as 4, 4 and 2 real ones + 2 repeated (drop what the repeats give with `unpadded`)."""
        size = fixed or size
        for start in range(0, len(self), size):
            real = min(size, len(self) - start)
            rows = np.resize(np.arange(start, start + real), size) if real < size and fixed else slice(start, start + real)
            yield {k: self._layout(k, v[rows]) for k, v in self.arrays.items()}, real

    def subset(self, rows) -> Samples:
        """The samples at `rows` (a slice, indices or a mask), with their labels, ids and the specs they are bound to."""
        picked = np.arange(len(self))[rows]
        labels = None if self.labels is None else self.labels[picked]
        ids = None if self.ids is None else [self.ids[i] for i in picked]
        return Samples({k: v[picked] for k, v in self.arrays.items()}, labels, {}, dict(self.specs), ids)

    def digest(self) -> str:
        """A hash of the samples' bytes (each input's name, dtype, shape and values) and the layouts they are bound to:
        what they are, wherever they came from. Object arrays (no bytes to hash) get a unique digest, so nothing keyed
        on it is ever reused for them."""
        digest = hashlib.blake2b(digest_size=16)
        for name in sorted(self.arrays):
            array = np.ascontiguousarray(self.arrays[name])
            if array.dtype.hasobject:
                return os.urandom(16).hex()
            digest.update(f"{name}:{array.dtype}:{array.shape}:{self.specs[name].to_dict() if name in self.specs else None}".encode())
            digest.update(array.reshape(-1).view(np.uint8))
        return digest.hexdigest()

    def head(self, count: int) -> Samples:
        """The first `count` samples (a probe for sensitivity measurements), bound as these are."""
        return self if count >= len(self) else self.subset(slice(0, count))

    def _layout(self, name: str, batch: np.ndarray) -> np.ndarray:
        spec = self.specs.get(name)
        return batch if spec is None else spec.to_model_layout(batch)

    def bind(self, specs: list[TensorSpec]) -> Samples:
        """Name the arrays after `specs` and check their shapes and dtypes (errors name the input)."""
        specs = [s for s in specs if s.value is None]  # constant inputs are fed by the runner, not read from data
        arrays = dict(self.arrays)
        renamable = self.provenance.get("unnamed", True) or is_generated_name(specs[0].name) if len(specs) == 1 else False
        fed_from = {}
        if len(arrays) == 1 and len(specs) == 1 and specs[0].name not in arrays and renamable:
            # one unnamed array (.npy, a callable's bare arrays), or an artifact whose input name a converter made up
            ((key, array),) = arrays.items()
            arrays = {specs[0].name: array}
            if not self.provenance.get("unnamed", True):  # a named array under another name: said, never silent
                fed_from = {specs[0].name: key}
        missing = [s.name for s in specs if s.name not in arrays]
        source = self.provenance.get("source", "the data")
        if missing:
            raise InputMismatchError(
                f"{source} has no array for input(s) {missing}; it has {sorted(arrays)}; the model's inputs are {[s.name for s in specs]}",
                hint=f"key the .npz arrays by the model's input names (see `edgekit info`); an input the data does not hold "
                f"(a recurrent state, a sample rate) can be given as a constant: --input {missing[0]}=0",
            )
        for s in specs:
            check_array(s, s.to_model_layout(arrays[s.name]))
        bound = {s.name: arrays[s.name] for s in specs}
        nonfinite = _check_finite(bound, source, self.provenance.get("nonfinite", "error"))
        provenance = {**self.provenance, "sha256": content_hash(bound, self.labels), "nonfinite_values": nonfinite}
        if fed_from:
            provenance["fed_from"] = fed_from  # input name -> the array it was fed (fed_from_text)
        return Samples(bound, self.labels, provenance, {s.name: s for s in specs}, self.ids)


def fed_from_text(provenance: dict) -> str:
    """` (input x <- array pixels)` where data was fed to an input of another name, else ''."""
    fed = provenance.get("fed_from") or {}
    return "".join(f" (input {name} <- array {key})" for name, key in fed.items())


def unpadded(outputs: list[np.ndarray], batch: int | None, real: int) -> list[np.ndarray]:
    """A batch's outputs without what its repeated samples gave (Samples.counted_batches): the first `real` entries of
    each output whose axis 0 holds the `batch`; an output without one is kept whole."""
    if not batch or real == batch:
        return outputs
    return [out[:real] if np.ndim(out) and np.shape(out)[0] == batch else out for out in outputs]


def _check_finite(arrays: dict[str, np.ndarray], source: str, policy: str) -> int:
    """Inf/NaN in inputs: an error, or (policy 'warn') a logged warning and a count in the provenance; never silent."""
    total = 0
    for name, array in arrays.items():
        if array.dtype.kind not in "fc":
            continue
        bad = int(array.size - np.count_nonzero(np.isfinite(array)))
        if not bad:
            continue
        if policy == "warn":
            log.warning("%s: input '%s' holds %d non-finite values (NaN/Inf), used as asked", source, name, bad)
            total += bad
            continue
        raise InputMismatchError(
            f"{source}: input '{name}' holds {bad} non-finite values (NaN/Inf)",
            hint="clean the data (np.nan_to_num) or drop those samples; `edgekit --nonfinite warn COMMAND` uses them with a warning",
        )
    return total


def content_hash(arrays: dict[str, np.ndarray], labels: np.ndarray | None) -> str:
    """SHA-256 over the arrays (in name order) and labels: identifies exactly what was used."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(arrays[name]).tobytes())
    if labels is not None:
        digest.update(np.ascontiguousarray(labels).tobytes())
    return digest.hexdigest()


def choose(count: int, limit: int | None, seed: int) -> np.ndarray:
    """Deterministic indices of at most `limit` of `count` samples, in ascending order."""
    if limit is None or limit >= count:
        return np.arange(count)
    return np.sort(np.random.default_rng(seed).choice(count, limit, replace=False))


NONFINITE_POLICIES = ("error", "warn")


def nonfinite_policy() -> str:
    """'error' (the default) or 'warn': what Inf/NaN in calibration or validation data does (`edgekit --nonfinite`,
    or EDGEKIT_NONFINITE for the API and the processes edgekit spawns)."""

    return "warn" if os.environ.get("EDGEKIT_NONFINITE", "").lower() == "warn" else "error"


def set_nonfinite_policy(policy: str) -> None:
    """Set the policy for this process and those it starts (Ray workers, timing processes)."""

    if policy not in NONFINITE_POLICIES:
        raise EdgekitError(f"--nonfinite {policy}: not a policy", hint="use --nonfinite error or --nonfinite warn")
    os.environ["EDGEKIT_NONFINITE"] = policy


def random_samples(specs: list[TensorSpec], count: int, seed: int = 0) -> Samples:
    """Uniform random inputs: only for plumbing, and marked as such in every report."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for s in (s for s in specs if s.value is None):
        if s.shape == ():
            raise InputMismatchError(
                f"input '{s.name}' is a scalar (a sample rate, a threshold...): edgekit will not make up its value",
                hint=f"pass it as a constant: --input {s.name}=VALUE:{s.dtype}",
            )
        shape = (count, *(d for i, d in enumerate(s.concrete_shape(1)) if i != s.batch_axis()))
        kind = np.dtype(s.dtype).kind
        arrays[s.name] = rng.random(shape, dtype=np.float32).astype(s.dtype) if kind == "f" else np.zeros(shape, s.dtype)
    provenance = {"source": "random", "samples": count, "seed": seed, "random": True, "sha256": content_hash(arrays, None)}
    return Samples(arrays, None, provenance, {s.name: s for s in specs if s.value is None})


def warn_if_few(samples: Samples, purpose: str = "calibration") -> None:
    """Warn when a calibration set is too small to be representative."""
    if len(samples) < FEW_SAMPLES:
        log.warning("only %d samples for %s: use at least %d for representative ranges", len(samples), purpose, FEW_SAMPLES)
