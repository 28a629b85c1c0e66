"""Maps: segmentation's class maps (mIoU, pixel accuracy) and single-channel probability maps (IoU, F1 of the maps
binarized at a threshold), each of an artifact against the reference's maps and against label masks.

A probability map is scored image by image, then averaged: an empty map matching an empty map is full agreement (1),
a single false pixel on an empty map is none (0). Pooling pixels over all images instead would let false text on a
blank page vanish into the pages full of text.
"""

from __future__ import annotations

import numpy as np

IGNORE = 255  # a label mask's value for pixels not labelled
RESAMPLES = 1000
PROBABILITY_SLACK = 1e-5  # float rounding around [0, 1] that a probability map may show (a sigmoid in fp32 reaches 1 + 1.2e-7)


def is_map(output: np.ndarray) -> bool:
    """A map per sample: [N, H, W] or [N, C, H, W] with H and W above 1."""
    return output.ndim >= 3 and output.shape[-1] > 1 and output.shape[-2] > 1


def is_class_map(output: np.ndarray) -> bool:
    """[N, C, H, W] with several classes."""
    return output.ndim == 4 and output.shape[1] > 1


def as_probability(values: np.ndarray, logits: bool) -> np.ndarray:
    """A single-channel map as [N, H, W] probabilities (sigmoid where it holds logits)."""
    values = values.reshape(len(values), *values.shape[-2:]).astype(np.float64)
    return 1.0 / (1.0 + np.exp(-values)) if logits else values


def holds_logits(reference: np.ndarray) -> bool:
    """A map with values outside [0, 1] is read as logits; a sigmoid's float rounding (1.0000001 from ONNX Runtime's
    Sigmoid on PP-OCRv4's text map) is not outside."""
    return bool(reference.min() < -PROBABILITY_SLACK or reference.max() > 1 + PROBABILITY_SLACK)


# ---- class maps -------------------------------------------------------------------------------------------------


def confusions(pred: np.ndarray, truth: np.ndarray, classes: int) -> np.ndarray:
    """Per-image confusion matrices [N, C(truth), C(pred)]; truth outside 0..C-1 (IGNORE) is left out."""
    out = np.zeros((len(pred), classes, classes), np.int64)
    for i, (p, t) in enumerate(zip(pred, truth, strict=True)):
        keep = (t >= 0) & (t < classes)
        out[i] = np.bincount(t[keep] * classes + p[keep], minlength=classes * classes).reshape(classes, classes)
    return out


def iou_per_class(confusion: np.ndarray) -> np.ndarray:
    """IoU of each class (NaN for a class absent from both sides)."""
    tp = np.diag(confusion).astype(np.float64)
    union = confusion.sum(0) + confusion.sum(1) - tp
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, tp / union, np.nan)


def mean_iou(confusion: np.ndarray) -> float:
    ious = iou_per_class(confusion)
    return float(np.nanmean(ious)) if np.isfinite(ious).any() else 1.0


def class_map_scores(reference: np.ndarray, artifact: np.ndarray, masks: np.ndarray | None) -> dict:
    """mIoU and pixel accuracy of the artifact's argmax against the reference's, and of both against label masks."""
    classes = reference.shape[1]
    ref_pred, art_pred = reference.argmax(1), artifact.argmax(1)
    agreement = confusions(art_pred, ref_pred, classes)
    total = agreement.sum(0)
    per_image = [mean_iou(c) for c in agreement]
    scores = {
        "miou": mean_iou(total),
        "miou_ci95": _resampled_ci(agreement, mean_iou),
        "pixel_accuracy": float(np.trace(total) / max(total.sum(), 1)),
        "class_iou": _listed(iou_per_class(total)),
    }
    labelled = None
    if masks is not None:
        ref_conf, art_conf = confusions(ref_pred, masks, classes), confusions(art_pred, masks, classes)
        labelled = _paired_scores("miou", ref_conf, art_conf)
        labelled["pixel_accuracy"] = {
            k: float(np.trace(c.sum(0)) / max(c.sum(), 1)) for k, c in (("reference", ref_conf), ("artifact", art_conf))
        }
    return {"metric": "miou", "vs_reference": scores, "vs_labels": labelled, "per_image": per_image}


def _listed(ious: np.ndarray) -> list[dict]:
    return [{"class": c, "iou": float(v)} for c, v in enumerate(ious) if np.isfinite(v)]


def _draws(n: int, resamples: int = RESAMPLES, seed: int = 0) -> np.ndarray:
    """How many times each image is drawn, per resample: [resamples, n]."""
    return np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=resamples)


def _resampled_ci(per_image: np.ndarray, score) -> list[float]:
    counts = _draws(len(per_image))
    flat = per_image.reshape(len(per_image), -1)
    values = [score((c @ flat).reshape(per_image.shape[1:])) for c in counts]
    return [float(v) for v in np.percentile(values, [2.5, 97.5])]


def _paired_scores(metric: str, ref_conf: np.ndarray, art_conf: np.ndarray) -> dict:
    """Both sides' mIoU against the labels, the drop in points and its paired bootstrap interval."""
    ref, art = mean_iou(ref_conf.sum(0)), mean_iou(art_conf.sum(0))
    counts = _draws(len(ref_conf))
    flat_ref, flat_art = ref_conf.reshape(len(ref_conf), -1), art_conf.reshape(len(art_conf), -1)
    shape = ref_conf.shape[1:]
    drops = [100 * (mean_iou((c @ flat_ref).reshape(shape)) - mean_iou((c @ flat_art).reshape(shape))) for c in counts]
    return {
        "metric": metric,
        "reference": ref,
        "artifact": art,
        "drop_points": 100 * (ref - art),
        "drop_ci95": [float(v) for v in np.percentile(drops, [2.5, 97.5])],
        "samples": len(ref_conf),
    }


# ---- probability maps -------------------------------------------------------------------------------------------


def binary_scores(pred: np.ndarray, truth: np.ndarray) -> dict[str, np.ndarray]:
    """Per image IoU and F1 of two boolean maps [N, H, W]; an empty map against an empty map scores 1."""
    pred, truth = pred.reshape(len(pred), -1), truth.reshape(len(truth), -1)
    tp = (pred & truth).sum(1).astype(np.float64)
    fp, fn = (pred & ~truth).sum(1), (~pred & truth).sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        iou = np.where(tp + fp + fn > 0, tp / (tp + fp + fn), 1.0)
        f1 = np.where(tp + fp + fn > 0, 2 * tp / (2 * tp + fp + fn), 1.0)
    return {"iou": iou, "f1": f1, "empty_truth": ~truth.any(1), "false_on_empty": ~truth.any(1) & pred.any(1)}


def probability_map_scores(reference: np.ndarray, artifact: np.ndarray, masks: np.ndarray | None, threshold: float) -> dict:
    """IoU and F1 of the artifact's binarized map against the reference's, image by image, and both against masks."""
    from edgekit.metrics.compare import bootstrap_ci95

    logits = holds_logits(reference)
    ref_map, art_map = (as_probability(m, logits) >= threshold for m in (reference, artifact))
    agreement = binary_scores(art_map, ref_map)
    scores = {
        "f1": float(agreement["f1"].mean()),
        "f1_ci95": bootstrap_ci95(agreement["f1"]),
        "iou": float(agreement["iou"].mean()),
        "iou_ci95": bootstrap_ci95(agreement["iou"]),
        "threshold": threshold,
        "logits": logits,  # the maps held logits: binarized at the threshold's logit
        "empty_maps": int(agreement["empty_truth"].sum()),  # images whose reference map is empty at the threshold
        "false_on_empty": int(agreement["false_on_empty"].sum()),  # of those, the ones the artifact marks anyway
    }
    labelled = None
    if masks is not None:
        truth = masks.reshape(ref_map.shape) > 0
        ref_f1, art_f1 = binary_scores(ref_map, truth)["f1"], binary_scores(art_map, truth)["f1"]
        labelled = {
            "metric": "f1",
            "reference": float(ref_f1.mean()),
            "artifact": float(art_f1.mean()),
            "drop_points": float(100 * (ref_f1.mean() - art_f1.mean())),
            "drop_ci95": bootstrap_ci95(100 * (ref_f1 - art_f1)),
            "samples": len(ref_f1),
        }
    return {"metric": "f1", "vs_reference": scores, "vs_labels": labelled, "per_image": agreement["f1"].tolist()}
