"""Detection: decoding a detector's outputs into boxes, and mAP from the COCO evaluator (pycocotools).

A detector is judged as its users judge it: mAP@0.5 and mAP@0.5:0.95 from pycocotools' COCOeval (not a hand-written
AP), of the artifact's detections against the reference's (its confident detections taken as ground truth) and, where
labels are given, of both against the labels. Every interval is a bootstrap over images, drawn by re-accumulating
COCOeval's own per-image matches.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from edgekit.errors import EdgekitError
from edgekit.imports import import_attr

SCORE_FLOOR = 0.001  # detections scored below this are dropped before NMS (the COCO-evaluation convention)
REFERENCE_CONFIDENCE = 0.25  # the reference's detections at or above this stand for the truth it is judged against
NMS_IOU = 0.7
PICODET_NMS_IOU = 0.6  # PaddleDetection's PicoDet configs (MultiClassNMS nms_threshold)
MAX_DETECTIONS = 100  # per image, COCO's maxDets
MATCH_IOU = 0.5  # two detections are the same object (for the changed-images list) at this IoU and the same class
BOOTSTRAP_RESAMPLES = 100  # each re-runs COCOeval.accumulate (about 10 ms for 200 images): a second or two per interval
CHANGES_LISTED = 20
DECODERS = ("detections", "yolov5", "yolov8", "picodet")
NAMED = {"boxes": ("box",), "scores": ("score", "conf"), "classes": ("class", "label", "cls")}


@dataclass(frozen=True)
class Decoded:
    """Each sample's detections ({boxes [K, 4] x1 y1 x2 y2 in input pixels, scores [K], classes [K]}) and how they were read."""

    detections: list[dict]
    how: str


# ---- reading a detector's outputs ------------------------------------------------------------------------------


def detector_layout(outputs: dict[str, np.ndarray]) -> str | None:
    """The built-in decoder that reads these outputs (one of DECODERS), or None: named boxes/scores/classes, a single
    [N, K, 6] of finished detections, YOLOv5's [N, A, 5+C], YOLOv8's [N, 4+C, A] or PicoDet's raw heads (judged on the
    values too, so a transformer's hidden states [N, T, D] are never read as boxes)."""
    if _named_outputs(outputs):
        return "detections"
    if _gfl_heads(outputs):
        return "picodet"
    if len(outputs) != 1:
        return None
    (out,) = outputs.values()
    if out.ndim != 3 or min(out.shape[1:]) < 6 and out.shape[2] != 6:
        return None
    if out.shape[2] == 6 and _finished(out):
        return "detections"
    if out.shape[1] < out.shape[2] and _boxes_then_probabilities(np.moveaxis(out, 1, 2)):
        return "yolov8"
    if out.shape[2] < out.shape[1] and _boxes_then_probabilities(out):
        return "yolov5"
    return None


def raw_heads(outputs: dict[str, np.ndarray]) -> bool:
    """Several [N, A, D] outputs sharing anchor counts: per-stride class and box heads, a detector before its decoding."""
    shapes = [o.shape for o in outputs.values()]
    if len(shapes) < 2 or any(len(s) != 3 for s in shapes):
        return False
    anchors = [s[1] for s in shapes]
    return all(anchors.count(a) >= 2 for a in anchors) and len({s[2] for s in shapes}) > 1


def _named_outputs(outputs: dict[str, np.ndarray]) -> dict[str, str] | None:
    """{boxes, scores, classes} -> output name, where the outputs are named so (a graph with NMS inside)."""
    found = {}
    for role, words in NAMED.items():
        match = [n for n in outputs if any(w in n.lower() for w in words)]
        if len(match) != 1:
            return None
        found[role] = match[0]
    return found if len(set(found.values())) == 3 else None


def _finished(out: np.ndarray) -> bool:
    """[N, K, 6] rows x1 y1 x2 y2 score class: scores in [0, 1], whole class numbers."""
    scores, classes = out[..., 4], out[..., 5]
    return bool(np.all((scores >= 0) & (scores <= 1)) and np.all(classes == np.round(classes)))


def _boxes_then_probabilities(rows: np.ndarray) -> bool:
    """[N, A, 4+C]: four non-negative box values then probabilities in [0, 1]."""
    boxes, rest = rows[..., :4], rows[..., 4:]
    return rows.shape[-1] > 4 and bool(np.all(boxes[..., 2:] >= 0) and np.all((rest >= 0) & (rest <= 1)))


def decode(outputs: dict[str, np.ndarray], postprocess: str | None, image_size: tuple[int, int] | None) -> Decoded:
    """Each sample's detections from a batch-first dict of outputs: by `postprocess` (a decoder's name or module:function)
    or by the layout the outputs have; boxes given in [0, 1] are scaled to `image_size` (H, W)."""
    name = postprocess or detector_layout(outputs)
    if name is None:
        shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in outputs.items())
        raise EdgekitError(
            f"edgekit cannot read these outputs as detections ({shapes})",
            hint="pass --postprocess module:function: it gets the outputs as a dict name -> array (batch first) and returns one "
            "dict per sample with boxes [K, 4] (x1, y1, x2, y2 in input pixels), scores [K] and classes [K]",
        )
    if name in DECODERS:
        detections = _BUILT_IN[name](outputs, image_size)
    else:
        detections = _user_decoder(name)(outputs)
    checked = [_checked(d, i, name) for i, d in enumerate(detections)]
    how = name if name in DECODERS else f"--postprocess {name}"
    if image_size and checked and _normalized(checked):
        checked = [_scaled(d, image_size) for d in checked]
        how += ", boxes in [0, 1] scaled to the input"
    return Decoded(checked, how)


def _from_detections(outputs: dict[str, np.ndarray], image_size=None) -> list[dict]:
    named = _named_outputs(outputs)
    if named is None:
        (out,) = outputs.values()
        return [_kept(o[:, :4], o[:, 4], o[:, 5]) for o in out.astype(np.float64)]
    boxes, scores, classes = (np.asarray(outputs[named[k]]) for k in ("boxes", "scores", "classes"))
    return [_kept(b.reshape(-1, 4), s.reshape(-1), c.reshape(-1)) for b, s, c in zip(boxes, scores, classes, strict=True)]


def _kept(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray) -> dict:
    """Finished detections without their padding rows (score 0 or below the floor)."""
    keep = scores >= SCORE_FLOOR
    return {"boxes": boxes[keep], "scores": scores[keep], "classes": classes[keep]}


def _from_yolov5(outputs: dict[str, np.ndarray], image_size=None) -> list[dict]:
    """[N, A, 5+C]: cx cy w h, objectness, class probabilities (score = objectness x class probability)."""
    (out,) = outputs.values()
    return [_nms(_xyxy(rows[:, :4]), rows[:, 4:5] * rows[:, 5:]) for rows in out.astype(np.float64)]


def _from_yolov8(outputs: dict[str, np.ndarray], image_size=None) -> list[dict]:
    """[N, 4+C, A]: cx cy w h, then class probabilities (no objectness)."""
    (out,) = outputs.values()
    return [_nms(_xyxy(rows[:4].T), rows[4:].T) for rows in out.astype(np.float64)]


def _gfl_heads(outputs: dict[str, np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]] | None:
    """PicoDet's (and NanoDet's: Generalized Focal Loss) raw heads, one pair per stride: class probabilities [N, A, C]
    (values in [0, 1]) and box distributions [N, A, 4 (R + 1)] (logits over R + 1 distance bins per side), the levels
    sharing anchor counts; (scores, distributions) by level, finest first, or None."""
    arrays = list(outputs.values())
    if len(arrays) < 2 or len(arrays) % 2 or any(a.ndim != 3 for a in arrays):
        return None
    scores = [a for a in arrays if a.size and a.min() >= 0 and a.max() <= 1]
    boxes = [a for a in arrays if not any(a is s for s in scores)]
    if len(scores) != len(boxes) or len({a.shape[2] for a in scores}) != 1 or len({a.shape[2] for a in boxes}) != 1:
        return None
    if boxes[0].shape[2] % 4 or boxes[0].shape[2] < 8:
        return None
    scores, boxes = (sorted(group, key=lambda a: -a.shape[1]) for group in (scores, boxes))
    if [a.shape[:2] for a in scores] != [a.shape[:2] for a in boxes]:
        return None
    return scores, boxes


def _from_picodet(outputs: dict[str, np.ndarray], image_size: tuple[int, int] | None) -> list[dict]:
    """PicoDet's raw heads decoded as its post-processing does: each level's stride from its anchor count and the input's
    size, anchor centres at (column + 0.5, row + 0.5) x stride, each side's distance the expectation of its softmax
    over the bins x stride; then class-aware NMS."""
    if image_size is None:
        raise EdgekitError("PicoDet's raw heads need the input's height and width to place their anchors", hint="feed images [N, 3, H, W]")
    scores, distributions = _gfl_heads(outputs)
    levels = [_anchor_centres(a.shape[1], image_size) for a in scores]
    boxes = [_distances_to_boxes(d.astype(np.float64), centres, stride) for d, (centres, stride) in zip(distributions, levels, strict=True)]
    return [
        _nms(np.concatenate([b[i] for b in boxes]), np.concatenate([s[i] for s in scores]).astype(np.float64), PICODET_NMS_IOU)
        for i in range(len(scores[0]))
    ]


def _anchor_centres(anchors: int, image_size: tuple[int, int]) -> tuple[np.ndarray, int]:
    """([A, 2] x, y of each anchor's centre, row by row, the stride) of a level of `anchors` anchors over `image_size`."""
    height, width = image_size
    stride = 2 ** round(np.log2(np.sqrt(height * width / anchors)))
    rows, cols = -(-height // stride), -(-width // stride)
    if rows * cols != anchors:
        raise EdgekitError(
            f"a PicoDet level of {anchors} anchors matches no stride of a {height}x{width} input",
            hint="pass --postprocess module:function with the model's own decoder",
        )
    y, x = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    return np.stack([x.ravel() + 0.5, y.ravel() + 0.5], 1) * stride, stride


def _distances_to_boxes(distribution: np.ndarray, centres: np.ndarray, stride: int) -> np.ndarray:
    """[N, A, 4 (R + 1)] logits -> [N, A, 4] boxes x1 y1 x2 y2: each side's expected distance in strides."""
    bins = distribution.reshape(*distribution.shape[:2], 4, -1)
    weights = np.exp(bins - bins.max(-1, keepdims=True))
    distance = (weights / weights.sum(-1, keepdims=True) * np.arange(bins.shape[-1])).sum(-1) * stride
    return np.concatenate([centres - distance[..., :2], centres + distance[..., 2:]], -1)


_BUILT_IN: dict[str, Callable] = {
    "detections": _from_detections,
    "yolov5": _from_yolov5,
    "yolov8": _from_yolov8,
    "picodet": _from_picodet,
}


def _xyxy(cxcywh: np.ndarray) -> np.ndarray:
    half = cxcywh[:, 2:] / 2
    return np.concatenate([cxcywh[:, :2] - half, cxcywh[:, :2] + half], 1)


def _nms(boxes: np.ndarray, class_scores: np.ndarray, iou: float = NMS_IOU) -> dict:
    """Class-aware NMS over every (box, class) scored at least SCORE_FLOOR (a box may stand for two classes it is unsure
    between, as Ultralytics' validation reads it: multi-label), at most MAX_DETECTIONS."""
    anchors, classes = np.nonzero(class_scores >= SCORE_FLOOR)
    scores = class_scores[anchors, classes]
    order = np.argsort(-scores, kind="stable")[: MAX_DETECTIONS * 30]
    anchors, classes, scores = anchors[order], classes[order], scores[order]
    offset = boxes[anchors] + (classes * (boxes.max(initial=0.0) + 1.0))[:, None]  # boxes of different classes never overlap
    chosen = _greedy_nms(offset, iou)
    return {"boxes": boxes[anchors[chosen]], "scores": scores[chosen], "classes": classes[chosen]}


def _greedy_nms(boxes: np.ndarray, iou: float) -> np.ndarray:
    """Indices kept by greedy NMS over boxes sorted by descending score."""
    kept, alive = [], np.ones(len(boxes), bool)
    for i in range(len(boxes)):
        if not alive[i]:
            continue
        kept.append(i)
        if len(kept) == MAX_DETECTIONS:
            break
        alive[i + 1 :] &= box_iou(boxes[i : i + 1], boxes[i + 1 :])[0] <= iou
    return np.asarray(kept, np.int64)


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box in `a` with every box in `b` (x1 y1 x2 y2), [len(a), len(b)]."""
    low, high = np.maximum(a[:, None, :2], b[None, :, :2]), np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(high - low, 0, None), axis=2)
    union = _area(a)[:, None] + _area(b)[None, :] - inter
    return inter / np.maximum(union, 1e-12)


def _area(boxes: np.ndarray) -> np.ndarray:
    return np.prod(np.clip(boxes[:, 2:] - boxes[:, :2], 0, None), axis=1)


def _user_decoder(spec: str) -> Callable:

    if ":" not in spec:
        raise EdgekitError(f"--postprocess {spec}: neither a built-in decoder nor module:function", hint=f"built in: {', '.join(DECODERS)}")
    return import_attr(spec, "--postprocess")


def _checked(d: dict, index: int, how: str) -> dict:
    """One sample's detections as float64 boxes [K, 4], scores [K] and int classes [K]; a wrong shape is one clear error."""
    try:
        boxes = np.asarray(d["boxes"], np.float64).reshape(-1, 4)
        scores, classes = np.asarray(d["scores"], np.float64).reshape(-1), np.asarray(d["classes"]).reshape(-1)
    except (KeyError, TypeError, ValueError) as e:
        raise EdgekitError(
            f"{how} returned something other than detections for sample {index} ({type(e).__name__}: {e})",
            hint="return one dict per sample with boxes [K, 4] (x1, y1, x2, y2), scores [K] and classes [K]",
        ) from None
    if not len(boxes) == len(scores) == len(classes):
        raise EdgekitError(
            f"{how}: sample {index} has {len(boxes)} boxes, {len(scores)} scores and {len(classes)} classes",
            hint="give every detection a box, a score and a class",
        )
    return {"boxes": boxes, "scores": scores, "classes": classes.astype(np.int64)}


def _normalized(detections: list[dict]) -> bool:
    boxes = [d["boxes"] for d in detections if len(d["boxes"])]
    return bool(boxes) and max(float(np.abs(b).max()) for b in boxes) <= 1.0


def _scaled(d: dict, image_size: tuple[int, int]) -> dict:
    h, w = image_size
    return {**d, "boxes": d["boxes"] * np.array([w, h, w, h], np.float64)}


# ---- scoring with COCOeval --------------------------------------------------------------------------------------


@dataclass
class CocoScore:
    """COCOeval run once over all images; `resample` re-accumulates its per-image matches over drawn images."""

    evaluator: object
    categories: list[int]
    images: int

    @property
    def map50(self) -> float:
        return _mean_ap(self.evaluator.eval["precision"][0])

    @property
    def map50_95(self) -> float:
        return _mean_ap(self.evaluator.eval["precision"])

    def per_class(self) -> dict[int, float]:
        """AP@0.5 per category that has ground truth (or detections)."""
        precision = self.evaluator.eval["precision"][0]
        return {c: _mean_ap(precision[:, k]) for k, c in enumerate(self.categories) if (precision[:, k] > -1).any()}

    def resampled_map50(self, draws: np.ndarray) -> np.ndarray:
        """mAP@0.5 over each row of image indices in `draws` (with repeats): COCOeval.accumulate re-run on the same
        per-image matches, cut to the 0.5 IoU threshold (ten times faster than all ten)."""
        ev = self.evaluator
        saved = ev.evalImgs, ev.params.imgIds, ev._paramsEval.imgIds, ev.params.iouThrs, ev.eval
        at50 = [None if e is None else {**e, "dtMatches": e["dtMatches"][:1], "dtIgnore": e["dtIgnore"][:1]} for e in ev.evalImgs]
        cells = len(at50) // self.images
        ev.params.iouThrs = ev.params.iouThrs[:1]
        values = []
        try:
            for draw in draws:
                ev.evalImgs = [at50[cell * self.images + i] for cell in range(cells) for i in draw]
                ev.params.imgIds = ev._paramsEval.imgIds = list(range(len(draw)))
                with _quiet():
                    ev.accumulate()
                values.append(_mean_ap(ev.eval["precision"][0]))
        finally:
            ev.evalImgs, ev.params.imgIds, ev._paramsEval.imgIds, ev.params.iouThrs, ev.eval = saved
        return np.asarray(values)


def _mean_ap(precision: np.ndarray) -> float:
    """COCOeval.summarize's mean over the valid cells (-1 marks a category without ground truth); 0 where none."""
    valid = precision[precision > -1]
    return float(valid.mean()) if valid.size else 0.0


@contextlib.contextmanager
def _quiet():
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def coco_score(truth: list[dict], detections: list[dict], categories: list[int]) -> CocoScore:
    """COCOeval (bbox, all areas, 100 detections per image) of `detections` against `truth`, image by image; classes are
    category ids. A truth box may carry `ignore` (crowd) flags."""
    try:
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    except ImportError:
        raise EdgekitError("detection metrics need pycocotools", hint="pip install pycocotools") from None
    with _quiet():
        gt = COCO()
        gt.dataset = _coco_dataset(truth, categories)
        gt.createIndex()
        dt = gt.loadRes(_coco_results(detections)) if any(len(d["scores"]) for d in detections) else _empty_results(gt)
        ev = COCOeval(gt, dt, "bbox")
        ev.params.imgIds = list(range(len(truth)))
        ev.params.catIds = categories
        ev.params.areaRng, ev.params.areaRngLbl = [[0, 1e10]], ["all"]
        ev.params.maxDets = [MAX_DETECTIONS]
        ev.evaluate()
        ev.accumulate()
    return CocoScore(ev, categories, len(truth))


def _coco_dataset(truth: list[dict], categories: list[int]) -> dict:
    annotations = []
    for image, t in enumerate(truth):
        crowd = t.get("crowd", np.zeros(len(t["boxes"]), bool))
        for box, cls, is_crowd in zip(t["boxes"], t["classes"], crowd, strict=True):
            w, h = float(box[2] - box[0]), float(box[3] - box[1])
            annotations.append(
                {"id": len(annotations) + 1, "image_id": image, "category_id": int(cls), "bbox": [float(box[0]), float(box[1]), w, h],
                 "area": w * h, "iscrowd": int(is_crowd)}
            )  # fmt: skip
    return {
        "images": [{"id": i} for i in range(len(truth))],
        "annotations": annotations,
        "categories": [{"id": int(c)} for c in categories],
    }


def _coco_results(detections: list[dict]) -> np.ndarray:
    """[image_id, x, y, w, h, score, category] rows, COCO.loadRes's array form."""
    rows = [
        np.column_stack([np.full(len(d["scores"]), i), d["boxes"][:, :2], d["boxes"][:, 2:] - d["boxes"][:, :2], d["scores"], d["classes"]])
        for i, d in enumerate(detections)
        if len(d["scores"])
    ]
    return np.concatenate(rows)


def _empty_results(gt):
    from pycocotools.coco import COCO

    dt = COCO()
    dt.dataset = {"images": gt.dataset["images"], "annotations": [], "categories": gt.dataset["categories"]}
    dt.createIndex()
    return dt


def confident(detections: list[dict], threshold: float = REFERENCE_CONFIDENCE) -> list[dict]:
    """The detections scored at or above `threshold`: the ones a user acts on."""
    return [{k: v[d["scores"] >= threshold] for k, v in d.items()} for d in detections]


def image_changes(reference: list[dict], artifact: list[dict]) -> list[dict]:
    """Per image, the confident detections of each side matched one to one (same class, IoU >= MATCH_IOU): the objects
    the artifact missed, the ones it added, and the F1 of the match (1: the same detections)."""
    changes = []
    for i, (ref, art) in enumerate(zip(confident(reference), confident(artifact), strict=True)):
        matched = _matches(ref, art)
        missed, extra = len(ref["scores"]) - matched, len(art["scores"]) - matched
        total = len(ref["scores"]) + len(art["scores"])
        changes.append(
            {"sample": i, "reference": len(ref["scores"]), "artifact": len(art["scores"]), "matched": matched,
             "missed": missed, "added": extra, "f1": 2 * matched / total if total else 1.0}
        )  # fmt: skip
    return changes


def _matches(ref: dict, art: dict) -> int:
    """Greedy one-to-one matches, the artifact's surest detections first."""
    if not len(ref["scores"]) or not len(art["scores"]):
        return 0
    iou = box_iou(art["boxes"], ref["boxes"])
    iou[art["classes"][:, None] != ref["classes"][None, :]] = 0
    taken, count = np.zeros(len(ref["scores"]), bool), 0
    for a in np.argsort(-art["scores"], kind="stable"):
        candidates = np.where(taken, 0, iou[a])
        best = int(candidates.argmax())
        if candidates[best] >= MATCH_IOU:
            taken[best], count = True, count + 1
    return count


def most_changed(changes: list[dict], limit: int = CHANGES_LISTED) -> list[dict]:
    """The images whose detections changed, most changed first (lowest F1, then most boxes missed or added)."""
    changed = [c for c in changes if c["f1"] < 1.0]
    return sorted(changed, key=lambda c: (c["f1"], -(c["missed"] + c["added"])))[:limit]


# ---- the verdict ------------------------------------------------------------------------------------------------


def detection_scores(
    reference: dict[str, np.ndarray],
    artifact: dict[str, np.ndarray],
    labels,
    postprocess: str | None,
    image_size: tuple[int, int] | None,
    intervals: bool = True,
) -> dict:
    """mAP of the artifact's detections against the reference's confident ones, and (with `labels`, a BoxLabels) of both
    against the labels: each with its bootstrap interval over images (unless not `intervals`: accuracy control's steps
    need the values alone), per-class AP and the images that changed most."""
    how = postprocess or detector_layout(reference)  # the reference's layout read the artifact's outputs too (int8 may stray out of [0, 1])
    ref, art = decode(reference, how, image_size), decode(artifact, how, image_size)
    truth = confident(ref.detections)
    categories = sorted({int(c) for d in truth + art.detections for c in d["classes"]}) or [0]
    score = coco_score(truth, art.detections, categories)
    draws = np.random.default_rng(0).integers(0, score.images, (BOOTSTRAP_RESAMPLES if intervals else 0, score.images))
    names = labels.names if labels is not None else {}
    vs_reference = {
        "map50": score.map50,
        "map50_ci95": _interval(score.resampled_map50(draws)),
        "map50_95": score.map50_95,
        "reference_confidence": REFERENCE_CONFIDENCE,
        "reference_detections": sum(len(t["scores"]) for t in truth),
        "class_ap50": [{"class": c, "name": names.get(c), "ap50": ap} for c, ap in score.per_class().items()],
    }
    changes = image_changes(ref.detections, art.detections)
    return {
        "metric": "map50",
        "decoded": ref.how,
        "vs_reference": vs_reference,
        "vs_labels": None if labels is None else _against_labels(labels, ref.detections, art.detections, draws),
        "per_image": [c["f1"] for c in changes],
        "changes": most_changed(changes),
    }


def _against_labels(labels, ref: list[dict], art: list[dict], draws: np.ndarray) -> dict:
    """Both sides' mAP against the labels, the drop in mAP points with its paired interval, and the classes that lost most."""
    truth = labels.truth
    categories = sorted(set(labels.names) | {int(c) for t in truth for c in t["classes"]}) or [0]
    ref_score, art_score = coco_score(truth, ref, categories), coco_score(truth, art, categories)
    drops = 100 * (ref_score.resampled_map50(draws) - art_score.resampled_map50(draws))
    ref_ap, art_ap = ref_score.per_class(), art_score.per_class()
    lost = sorted(ref_ap, key=lambda c: art_ap.get(c, 0.0) - ref_ap[c])
    return {
        "metric": "map50",
        "reference": ref_score.map50,
        "artifact": art_score.map50,
        "reference_map50_95": ref_score.map50_95,
        "artifact_map50_95": art_score.map50_95,
        "drop_points": 100 * (ref_score.map50 - art_score.map50),
        "drop_ci95": _interval(drops),
        "samples": len(truth),
        "classes_lost": [
            {"class": c, "name": labels.names.get(c), "reference": ref_ap[c], "artifact": art_ap.get(c, 0.0)}
            for c in lost[:5]
            if art_ap.get(c, 0.0) < ref_ap[c]
        ],
    }


def _interval(values: np.ndarray) -> list[float] | None:
    return [float(v) for v in np.percentile(values, [2.5, 97.5])] if len(values) else None
