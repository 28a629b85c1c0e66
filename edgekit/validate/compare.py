"""Fidelity of an artifact's outputs against the reference's, and task accuracy with labels."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from edgekit.calibration import Samples


@dataclass(frozen=True)
class OutputFidelity:
    """How close one output is to the reference's, over all samples."""

    name: str
    max_abs: float
    mean_abs: float
    cosine_mean: float
    cosine_min: float
    snr_db: float
    top1_agreement: float | None  # percent, for [N, classes] outputs

    def to_dict(self) -> dict:
        return asdict(self)


def run_batches(runner, samples: Samples, batch: int) -> list[np.ndarray]:
    """All outputs of `runner` over `samples`, batch by batch, concatenated per output."""
    per_output: list[list[np.ndarray]] = []
    for feeds in samples.batches(batch):
        outs = runner.infer(feeds)
        per_output = per_output or [[] for _ in outs]
        for acc, out in zip(per_output, outs, strict=True):
            acc.append(np.asarray(out))
    return [np.concatenate(chunks) for chunks in per_output]


def compare_output(name: str, ref: np.ndarray, art: np.ndarray) -> OutputFidelity:
    """Per-output error statistics; cosine is per sample, SNR over everything."""
    ref64, art64 = ref.astype(np.float64).reshape(len(ref), -1), art.astype(np.float64).reshape(len(art), -1)
    diff = np.abs(ref64 - art64)
    norms = np.linalg.norm(ref64, axis=1) * np.linalg.norm(art64, axis=1)
    cosine = np.where(norms > 0, (ref64 * art64).sum(1) / np.maximum(norms, 1e-30), 1.0)
    noise = float((diff**2).sum())
    snr = float("inf") if noise == 0 else 10 * np.log10(max(float((ref64**2).sum()), 1e-30) / noise)
    top1 = float((ref64.argmax(1) == art64.argmax(1)).mean() * 100) if is_classifier_output(ref) else None
    return OutputFidelity(name, float(diff.max()), float(diff.mean()), float(cosine.mean()), float(cosine.min()), snr, top1)


def is_classifier_output(output: np.ndarray) -> bool:
    """[N, C] with several classes: treat it as logits/probabilities."""
    return output.ndim == 2 and output.shape[1] > 1


def accuracy_percent(logits: np.ndarray, labels: np.ndarray) -> float:
    """Top-1 accuracy in percent."""
    return float((logits.argmax(1) == labels.reshape(-1)).mean() * 100)


def compare(ref_outputs: list[np.ndarray], art_outputs: list[np.ndarray], names: list[str]) -> list[OutputFidelity]:
    """Fidelity for each output; a different output count or shape is reported as an error."""
    from edgekit.errors import EdgekitError

    if len(ref_outputs) != len(art_outputs):
        raise EdgekitError(
            f"the artifact has {len(art_outputs)} outputs, the reference {len(ref_outputs)}",
            hint="check that the artifact was converted from this reference",
        )
    for ref, art, name in zip(ref_outputs, art_outputs, names, strict=True):
        if ref.shape != art.shape:
            raise EdgekitError(
                f"output '{name}': artifact shape {art.shape} vs reference {ref.shape}",
                hint="check that the artifact was converted from this reference",
            )
    return [compare_output(n, r, a) for n, r, a in zip(names, ref_outputs, art_outputs, strict=True)]
