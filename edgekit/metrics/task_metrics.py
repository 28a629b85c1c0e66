"""Task metrics: an artifact judged by the measure its users judge it by, against the reference and against labels.

| task | against the reference | against labels | headline (`metric`) |
|---|---|---|---|
| detection | mAP@0.5, mAP@0.5:0.95 of the reference's confident detections (metrics.detection) | mAP of both sides | map50 |
| segmentation, class maps | mIoU, pixel accuracy of the reference's argmax (metrics.maps) | mIoU of both sides | miou |
| segmentation, one channel | IoU, F1 of the maps binarized at --mask-threshold, image by image | F1 of both sides | f1 |
| embedding | recall@k of each sample's neighbours, rank correlation of similarities | Recall@1 by class | recall_at_k |
| regression | mean absolute and relative error | R^2 and mean absolute error of both sides | mean_abs_error |

`agreement` is the headline against the reference in percent (for regression, none): what `--min-agreement` and the
default gates of detection and segmentation read; `drop_points` against labels is what `--max-drop` reads (for
regression, points of R^2: 100 x the rise in squared error over the labels' variance).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgekit.errors import EdgekitError
from edgekit.metrics.embedding import NEIGHBOURS

CHANGES_LISTED = 20
MASK_THRESHOLD = 0.5


@dataclass(frozen=True)
class TaskSettings:
    """How outputs are read: a detection decoder (--postprocess), the threshold binarizing a probability map, k of recall@k."""

    postprocess: str | None = None
    mask_threshold: float = MASK_THRESHOLD
    neighbours: int = NEIGHBOURS
    intervals: bool = True  # a detector's bootstrap intervals (a second or two each); accuracy control's steps skip them


def task_metrics(
    task: str,
    names: list[str],
    reference: list[np.ndarray],
    artifact: list[np.ndarray],
    labels,
    settings: TaskSettings,
    image_size: tuple[int, int] | None = None,
) -> dict | None:
    """The task's metrics (see the module's table), or None for classification (its top-1 figures live in `fidelity`
    and `accuracy`). `labels`: BoxLabels for detection, [N, H, W] masks for segmentation, [N] classes for embeddings."""
    if task == "detection":
        from edgekit.metrics.detection import detection_scores

        scores = detection_scores(
            dict(zip(names, reference, strict=True)),
            dict(zip(names, artifact, strict=True)),
            labels,
            settings.postprocess,
            image_size,
            settings.intervals,
        )
    elif task == "segmentation":
        scores = _segmentation(names, reference, artifact, labels, settings.mask_threshold)
    elif task == "embedding":
        from edgekit.metrics.embedding import embedding_scores

        scores = embedding_scores(reference[0], artifact[0], labels if _class_labels(labels) else None, settings.neighbours)
    elif task == "regression":
        scores = regression_scores(reference[0], artifact[0], labels)
    else:
        return None
    return _headline(task, scores)


def _class_labels(labels) -> bool:
    return isinstance(labels, np.ndarray) and labels.ndim == 1


def _segmentation(names: list[str], reference: list[np.ndarray], artifact: list[np.ndarray], masks, threshold: float) -> dict:
    """Every map output scored; the headline is the output that agrees least (labels score the first map)."""
    from edgekit.metrics.maps import class_map_scores, is_class_map, is_map, probability_map_scores

    maps = [i for i, r in enumerate(reference) if is_map(r)]
    if not maps:
        raise EdgekitError("no output is a map [N, C, H, W] or [N, H, W]", hint="pass the model's --task (segmentation needs a map)")
    scored = {}
    for n, i in enumerate(maps):
        given = masks if n == 0 else None
        ref, art = reference[i], artifact[i]
        scored[names[i]] = class_map_scores(ref, art, given) if is_class_map(ref) else probability_map_scores(ref, art, given, threshold)
    worst = min(scored, key=lambda k: scored[k]["vs_reference"][scored[k]["metric"]])
    result = dict(scored[worst], output=worst)
    if len(scored) > 1:
        result["outputs"] = {k: v["vs_reference"] for k, v in scored.items()}
    return result


def regression_scores(reference: np.ndarray, artifact: np.ndarray, labels: np.ndarray | None = None) -> dict:
    """Mean absolute error of the artifact's values against the reference's, and the mean relative error; against
    `labels` (the targets, one row of values per sample) R^2 and the mean absolute error of both sides."""
    from edgekit.metrics.compare import bootstrap_ci95

    ref, art = (a.astype(np.float64).reshape(len(a), -1) for a in (reference, artifact))
    abs_err = np.abs(art - ref).mean(1)
    scale = np.maximum(np.abs(ref), np.abs(ref).mean() * 1e-3 + 1e-12)  # relative to each value, not to a near-zero one
    scores = {
        "mean_abs_error": float(abs_err.mean()),
        "mean_abs_error_ci95": bootstrap_ci95(abs_err),
        "mean_relative_error": float((np.abs(art - ref) / scale).mean()),
    }
    labelled = None if labels is None else _regression_vs_labels(ref, art, labels)
    furthest = [int(i) for i in np.argsort(-abs_err, kind="stable") if abs_err[i] > 0][:CHANGES_LISTED]
    return {
        "metric": "mean_abs_error",
        "vs_reference": scores,
        "vs_labels": labelled,
        "per_image": (-abs_err).tolist(),
        "changes": [{"sample": i, "abs_error": float(abs_err[i])} for i in furthest],  # the samples furthest off
    }


def _regression_vs_labels(reference: np.ndarray, artifact: np.ndarray, labels: np.ndarray) -> dict:
    """R^2 of both sides against the targets, the drop in R^2 points with a paired interval (R^2's drop is the mean over
    samples of the rise in squared error over the targets' variance), and the mean absolute error of both."""
    from edgekit.metrics.compare import bootstrap_ci95

    truth = np.asarray(labels, np.float64).reshape(len(labels), -1)
    if truth.shape != reference.shape:
        raise EdgekitError(
            f"the labels hold {truth.shape[1]} value(s) per sample; the output {reference.shape[1]}",
            hint="give regression targets with one value per output value",
        )
    variance = float(((truth - truth.mean(0)) ** 2).sum(1).mean()) or 1.0
    ref_sq, art_sq = ((reference - truth) ** 2).sum(1), ((artifact - truth) ** 2).sum(1)
    ref_r2, art_r2 = 1 - ref_sq.mean() / variance, 1 - art_sq.mean() / variance
    return {
        "metric": "r2",
        "reference": float(ref_r2),
        "artifact": float(art_r2),
        "drop_points": float(100 * (ref_r2 - art_r2)),
        "drop_ci95": bootstrap_ci95(100 * (art_sq - ref_sq) / variance),
        "samples": len(truth),
        "reference_mean_abs_error": float(np.abs(reference - truth).mean()),
        "artifact_mean_abs_error": float(np.abs(artifact - truth).mean()),
    }


def _headline(task: str, scores: dict) -> dict:
    """The scores with the task, the headline against the reference in percent (`agreement`) and the samples that agree
    least (a detector's own list where it has one)."""
    metric, vs_reference = scores["metric"], scores["vs_reference"]
    per_image = scores.pop("per_image")
    percent = task != "regression"
    result = {
        "task": task,
        "metric": metric,
        "agreement": 100 * vs_reference[metric] if percent else None,
        "agreement_ci95": [100 * v for v in vs_reference[f"{metric}_ci95"]] if percent and vs_reference.get(f"{metric}_ci95") else None,
        **scores,
    }
    result.setdefault("changes", least_agreeing(per_image))
    return result


def least_agreeing(per_image: list[float], limit: int = CHANGES_LISTED) -> list[dict]:
    """The samples that agree least with the reference, least first (those in full agreement are not listed)."""
    values = np.asarray(per_image, np.float64)
    order = [int(i) for i in np.argsort(values, kind="stable") if values[i] < 1.0][:limit]
    return [{"sample": i, "score": float(values[i])} for i in order]
