"""Fidelity of an artifact's outputs against the reference's, and task accuracy with labels."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from edgekit.calibration import Samples
from edgekit.calibration.samples import labelled
from edgekit.errors import EdgekitError, InputMismatchError

CONFIDENT = 0.5  # a reference top-class probability at or above this makes a sample one the reference is sure of
CHANGES_LISTED = 20  # the changed top-1 answers a report lists, the reference's surest first
CHANGES_SHOWN = 3  # of those, the ones the console and the Markdown/HTML notes name
CLASSES_LISTED = 5  # the classes that lost the most samples, in a report's accuracy


@dataclass(frozen=True)
class OutputFidelity:
    """How close one output is to the reference's, over all samples."""

    name: str
    max_abs: float
    mean_abs: float
    cosine_mean: float
    cosine_min: float
    snr_db: float
    top1_agreement: float | None  # percent, classification outputs only
    nonfinite: int = 0  # NaN/inf values in the artifact's output where the reference's is finite
    reference_nonfinite: int = 0  # NaN/inf values in the reference's output (not judged)
    top1_agreement_ci95: list[float] | None = None  # paired bootstrap over the samples, percent
    top1_flips: int | None = None  # samples whose top-1 class changed
    flip_margin_max: float | None = None  # the largest reference top-1 minus top-2 probability among them
    confident_samples: int | None = None  # samples whose reference top class has probability >= CONFIDENT
    top1_agreement_confident: float | None = None  # percent, over those
    expected_top1_drop: float | None = None  # points of top-1 the changes cost if labels followed the reference's probabilities
    top1_changes: list[dict] | None = None  # the changed answers, surest first (changed_answers)

    def to_dict(self) -> dict:
        return asdict(self)


def run_batches(runner, samples: Samples, batch: int) -> list[np.ndarray]:
    """All outputs of `runner` over `samples`, batch by batch, concatenated sample-major per output. A model whose batch
    is fixed (runner.fixed_batch()) is fed batches of exactly that size, the last one filled up with repeated samples
    whose outputs are dropped."""
    from edgekit.calibration.samples import unpadded

    per_output: list[list[np.ndarray]] = []
    sizes, reals = [], []
    fixed = runner.fixed_batch()
    for feeds, real in samples.counted_batches(batch, fixed):
        outs = runner.infer(feeds)
        sizes.append(fixed or real)
        reals.append(real)
        per_output = per_output or [[] for _ in outs]
        for acc, out in zip(per_output, outs, strict=True):
            acc.append(np.asarray(out))
    return [
        np.concatenate([unpadded([c], size, real)[0] for c, size, real in zip(sample_major(chunks, sizes), sizes, reals, strict=True)])
        for chunks in per_output
    ]


def sample_major(chunks: list[np.ndarray], sizes: list[int]) -> list[np.ndarray]:
    """Each batch's output with its batch axis first: axis 0 where it holds the batch, else the first axis that
    does in every batch (a recurrent state [layers, batch, hidden] returned beside the logits)."""
    if all(c.ndim and c.shape[0] == n for c, n in zip(chunks, sizes, strict=True)):
        return chunks
    rank = min(c.ndim for c in chunks)
    for axis in range(1, rank):
        if all(c.shape[axis] == n for c, n in zip(chunks, sizes, strict=True)):
            return [np.moveaxis(c, axis, 0) for c in chunks]
    return [c[None] for c in chunks]  # no batch axis: one entry per batch


def compare_output(name: str, ref: np.ndarray, art: np.ndarray, classification: bool | None = None) -> OutputFidelity:
    """Per-output error statistics; cosine is per sample, SNR over everything.

    Garbage cannot look perfect: a non-finite artifact value where the reference is finite is counted
    (`nonfinite`) and makes its sample's cosine 0 and the SNR -inf; a zero sample against a non-zero one
    has cosine 0; only a sample equal to the reference's has cosine exactly 1. `classification` (None:
    inferred from the shape) decides whether top-1 agreement applies.
    """
    ref64, art64 = ref.astype(np.float64).reshape(len(ref), -1), art.astype(np.float64).reshape(len(art), -1)
    judged = np.isfinite(ref64)  # positions where the reference has a value to compare with
    broken = judged & ~np.isfinite(art64)
    ref_v, art_v = np.where(judged, ref64, 0.0), np.where(judged & ~broken, art64, 0.0)
    diff = np.where(broken, np.inf, np.abs(ref_v - art_v))
    cosine = _cosine_rows(ref_v, art_v, broken.any(1))
    noise = float((diff**2).sum())
    snr = _snr_db(float((ref_v**2).sum()), noise)
    classify = is_classifier_output(ref) if classification is None else classification
    agree = _agreement(ref_v, art_v, broken.any(1)) if classify and ref64.shape[1] > 1 else None
    top1 = None if agree is None else float(agree.mean() * 100)
    return OutputFidelity(
        name,
        float(diff.max(initial=0.0)),
        float(diff.mean()) if diff.size else 0.0,
        float(cosine.mean()),
        float(cosine.min()),
        snr,
        top1,
        int(broken.sum()),
        int((~np.isfinite(ref64)).sum()),
        None if agree is None else bootstrap_ci95(agree * 100.0),
        **({} if agree is None else _flips(ref_v, art_v, agree, broken.any(1))),
    )


def _snr_db(signal: float, noise: float) -> float:
    if noise == 0:
        return float("inf")
    return float("-inf") if not np.isfinite(noise) else float(10 * np.log10(max(signal, 1e-30) / noise))


def _cosine_rows(ref: np.ndarray, art: np.ndarray, broken: np.ndarray) -> np.ndarray:
    """Per-sample cosine: 1 only for identical samples, 0 for a broken or zero-vs-non-zero one, below 1 otherwise."""
    identical = (ref == art).all(1) & ~broken
    norms = np.linalg.norm(ref, axis=1) * np.linalg.norm(art, axis=1)
    cosine = np.where(norms > 0, (ref * art).sum(1) / np.maximum(norms, 1e-300), 0.0)
    cosine = np.clip(cosine, -1.0, np.nextafter(1.0, 0.0))  # rounding must not make a different sample perfect
    return np.where(identical, 1.0, np.where(broken, 0.0, cosine))


def _agreement(ref: np.ndarray, art: np.ndarray, broken: np.ndarray) -> np.ndarray:
    """Per sample, whether the top-1 classes agree; a sample with a non-finite score never agrees."""
    return ((ref.argmax(1) == art.argmax(1)) & ~broken).astype(np.float64)


def _flips(ref: np.ndarray, art: np.ndarray, agree: np.ndarray, broken: np.ndarray) -> dict:
    """Where the top-1 answers changed: how many, the largest reference margin (top-1 minus top-2 probability) among
    them (small when every flip is a near-tie, which any change of the input flips too: docs/int8-schemes.md), the
    agreement on the samples the reference is sure of (its top class at probability >= CONFIDENT), and what the changes
    are expected to cost (`expected_top1_drop`)."""
    probabilities = _probabilities(ref)
    top2 = np.sort(probabilities, axis=1)[:, -2:]
    flipped, confident = agree == 0, top2[:, 1] >= CONFIDENT
    margins, answers = top2[:, 1] - top2[:, 0], art.argmax(1)
    return {
        "top1_flips": int(flipped.sum()),
        "flip_margin_max": float(margins[flipped].max()) if flipped.any() else None,
        "confident_samples": int(confident.sum()),
        "top1_agreement_confident": float(agree[confident].mean() * 100) if confident.any() else None,
        "expected_top1_drop": expected_top1_drop(probabilities, answers, broken),
        "top1_changes": changed_answers(ref.argmax(1), answers, margins, flipped),
    }


def changed_answers(ref_top1: np.ndarray, art_top1: np.ndarray, margins: np.ndarray, flipped: np.ndarray) -> list[dict]:
    """The samples whose top-1 changed, the reference's surest first (its top-1 minus top-2 probability), at most
    CHANGES_LISTED: where to look first, as the near-ties at the end of the list flip under any change of the input."""
    order = np.flatnonzero(flipped)[np.argsort(-margins[flipped], kind="stable")][:CHANGES_LISTED]
    return [
        {"sample": int(i), "reference_top1": int(ref_top1[i]), "artifact_top1": int(art_top1[i]), "reference_margin": float(margins[i])}
        for i in order
    ]


def expected_top1_drop(probabilities: np.ndarray, answers: np.ndarray, broken: np.ndarray) -> float:
    """The top-1 accuracy, in points, that answering `answers` instead of the reference's top-1 costs if each sample's
    label were drawn from the reference's `probabilities`: the mean of p(reference's top-1) - p(answer), a broken
    sample's answer worth nothing. Without labels this weighs each change by what it risks: a flipped near-tie costs
    its margin, a flipped sure answer nearly a whole sample. It is as good as the reference's calibration."""
    rows = np.arange(len(probabilities))
    credit = np.where(broken, 0.0, probabilities[rows, answers])
    return float((probabilities.max(1) - credit).mean() * 100)


def flips_text(entry: dict) -> str:
    """Which top-1 answers changed, as one clause: how many, the reference's largest margin among them (near-ties or
    answers it was sure of), what they are expected to cost and the agreement where it was sure. `entry`: an output's
    fidelity or a summary row."""
    flips, margin = entry.get("top1_flips"), entry.get("flip_margin_max")
    sure, samples = entry.get("top1_agreement_confident"), entry.get("confident_samples")
    parts = [] if flips is None else [f"{flips} top-1 answer{'' if flips == 1 else 's'} changed"]
    if margin is not None:
        parts.append(f"where the reference's top-1 led its top-2 by at most {margin:.3g} of probability")
    text = " ".join(parts)
    cost = entry.get("expected_top1_drop")
    if flips and cost is not None:
        points = "under 0.001" if cost < 0.0005 else f"{cost:.3f}"
        text += f", an expected {points} points of top-1 by the reference's own probabilities"
    if sure is not None:
        where = f"the {samples} samples" if samples is not None else "the samples"
        text += ("; " if text else "") + f"{sure:.2f}% agree on {where} the reference gives >= {CONFIDENT:.0%}"
    return text


def changes_text(entry: dict) -> str:
    """The changed answers the reference was surest of, as one clause naming each sample (its id in the data where it
    has one); '' where none changed. `entry`: an output's fidelity or a summary row."""
    changes = (entry.get("top1_changes") or [])[:CHANGES_SHOWN]
    return f"surest changes: {', '.join(map(_change_text, changes))}" if changes else ""


def _change_text(change: dict) -> str:
    sample = change.get("id") or f"sample {change['sample']}"
    classes = f"{_class(change['reference_top1'], change.get('reference_class'))} -> {_class(change['artifact_top1'], change.get('artifact_class'))}"
    return f"{sample} class {classes} (margin {change['reference_margin']:.3g})"


def _class(index: int, name: str | None) -> str:
    return f"{index} ({name})" if name else str(index)


def _probabilities(rows: np.ndarray) -> np.ndarray:
    """Class scores as probabilities: as they are where they already are (non-negative rows summing to 1), else softmax."""
    if (rows >= 0).all() and np.allclose(rows.sum(1), 1.0, atol=1e-3):
        return rows
    e = np.exp(rows - rows.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def bootstrap_ci95(per_sample: np.ndarray, resamples: int = 4000, seed: int = 0) -> list[float]:
    """95% percentile-bootstrap interval of the mean of `per_sample` (a paired difference or agreement per sample).

    The values take a few distinct levels (-100/0/100, 0/100), so a resample is a multinomial draw of their counts.
    """
    values, counts = np.unique(np.asarray(per_sample, np.float64), return_counts=True)
    n = int(counts.sum())
    draws = np.random.default_rng(seed).multinomial(n, counts / n, size=resamples) @ values / n
    low, high = np.percentile(draws, [2.5, 97.5])
    return [float(low), float(high)]


def labels_in_range(labels: np.ndarray, classes: int, ignore: int | None, source: str) -> np.ndarray:
    """Class labels checked against the `classes` the model scores: any outside [0, classes) other than the declared
    `ignore` value is an error naming the values; with ignored samples, the labels as label sets [N, classes] whose
    ignored rows are empty (left out of the accuracy, as paired_accuracy leaves out an empty set)."""
    if labels.dtype == bool:
        return labels
    flat = labels.reshape(-1)
    bad = (flat < 0) | (flat >= classes)
    ignored = flat == ignore if ignore is not None else np.zeros(len(flat), bool)
    wrong = bad & ~ignored
    if wrong.any():
        values = np.unique(flat[wrong])
        shown = ", ".join(str(int(v)) for v in values[:5]) + (f" and {len(values) - 5} more" if len(values) > 5 else "")
        raise InputMismatchError(
            f"{source}: {int(wrong.sum())} labels are outside the model's {classes} classes [0, {classes}): {shown}",
            hint=f"fix the labels, or declare the value that marks unlabelled samples: --ignore-label {int(values[0])} (a recipe: validation.ignore_label)",
        )
    if not ignored.any():
        return flat
    sets = np.zeros((len(flat), classes), bool)
    sets[np.flatnonzero(~ignored), flat[~ignored]] = True
    return sets


def paired_accuracy(ref_logits: np.ndarray, art_logits: np.ndarray, labels: np.ndarray) -> dict:
    """Accuracy of both on the same labelled samples, the drop in points and its paired 95% interval. `labels`: a class
    per sample, or an [N, C] boolean array of the classes each sample accepts (ImageNet-ReaL-style label sets; a sample
    with an empty set is left out, as ReaL leaves out the images none of its classes names)."""
    ref_ok, art_ok = _labelled_hits(ref_logits, labels), _labelled_hits(art_logits, labels)
    ref, art = float(ref_ok.mean() * 100), float(art_ok.mean() * 100)
    changed = int((ref_ok != art_ok).sum())
    return {
        "reference": ref,
        "artifact": art,
        "drop_points": ref - art,
        "drop_ci95": bootstrap_ci95((ref_ok.astype(np.float64) - art_ok) * 100),
        "samples": int(len(ref_ok)),
        "discordant": changed,  # samples right on one side only: all the drop rests on these
        "classes_lost": None if labels.dtype == bool else classes_lost(labels.reshape(-1), ref_ok, art_ok),
    }


def classes_lost(labels: np.ndarray, ref_ok: np.ndarray, art_ok: np.ndarray) -> list[dict]:
    """The classes whose samples the artifact lost most (right -> wrong minus wrong -> right), at most CLASSES_LISTED,
    each with its accuracy on both sides: where int8 loses, by class. A class with as many gained as lost is not listed;
    a negative label names no class."""
    keep = labels >= 0
    labels, ref_ok, art_ok = labels[keep], ref_ok[keep], art_ok[keep]
    if not len(labels):
        return []
    count = int(labels.max()) + 1
    per_class = [np.bincount(labels, weights=w, minlength=count) for w in (np.ones(len(labels)), ref_ok, art_ok, ref_ok & ~art_ok)]
    samples, ref_right, art_right, lost = per_class
    net = ref_right - art_right
    order = [c for c in np.argsort(-net, kind="stable") if net[c] > 0][:CLASSES_LISTED]
    return [
        {
            "class": int(c),
            "samples": int(samples[c]),
            "reference": float(ref_right[c] / samples[c] * 100),
            "artifact": float(art_right[c] / samples[c] * 100),
            "lost": int(lost[c]),  # right -> wrong
            "gained": int(lost[c] - net[c]),  # wrong -> right
        }
        for c in order
    ]


def classes_lost_text(accuracy: dict) -> str:
    """The classes that lost most, as one clause; '' where none lost."""
    rows = accuracy.get("classes_lost") or []
    return f"classes that lost most: {', '.join(map(_class_lost_text, rows))}" if rows else ""


def _class_lost_text(row: dict) -> str:
    accuracies = f"{row['reference']:.1f}% -> {row['artifact']:.1f}% of {row['samples']}"
    return f"{_class(row['class'], row.get('name'))}: {accuracies} ({row['lost']} right -> wrong, {row['gained']} wrong -> right)"


def top1_hits(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Whether each sample's top-1 is its label (or one of its label set, where `labels` is [N, C] boolean). A set
    narrower than the class scores reads as a class index does: the classes past its width are never right."""
    top1 = logits.argmax(1)
    if labels.ndim == 2 and labels.dtype == bool:
        if labels.shape[1] > logits.shape[1]:
            raise InputMismatchError(
                f"the label sets name {labels.shape[1]} classes, the model's output scores {logits.shape[1]}",
                hint="give each sample's label set as a row no wider than the model's class scores",
            )
        inside = top1 < labels.shape[1]
        return inside & labels[np.arange(len(top1)), np.where(inside, top1, 0)]
    return top1 == labels.reshape(-1)


def _labelled_hits(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """top1_hits on the samples that carry a label (calibration.samples.labelled)."""
    keep = labelled(labels)
    return top1_hits(logits[keep], labels[keep])


def is_classifier_output(output: np.ndarray) -> bool:
    """[N, C] with several classes: treat it as logits/probabilities."""
    return is_classifier_shape(output.shape)


def is_classifier_shape(shape) -> bool:
    """[N, C] with C > 1 (a dynamic N may be anything)."""
    return len(shape) == 2 and shape[1] > 1


def accuracy_percent(logits: np.ndarray, labels: np.ndarray) -> float:
    """Top-1 accuracy in percent."""
    return float(_labelled_hits(logits, labels).mean() * 100)


def compare(
    ref_outputs: list[np.ndarray], art_outputs: list[np.ndarray], names: list[str], classification: bool | None = None
) -> list[OutputFidelity]:
    """Fidelity for each output (top-1 agreement where `classification`, None: from the shape); a different output
    count or shape is reported as an error."""

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
    return [compare_output(n, r, a, classification) for n, r, a in zip(names, ref_outputs, art_outputs, strict=True)]
