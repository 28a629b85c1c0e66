"""Train zoo:fashion-det, the single-stage detector, on canvases of Fashion-MNIST items; write its weights and data.

Writes edgekit/zoo/data/: fashion_det.pt (the FashionDet state dict, EMA weights), fashion_det_test.npz (uint8
`images` [200, 96, 96], canvases of items from the committed test split), fashion_det_test.json (their COCO
instances) and fashion_det_calib.npz (uint8 `images` [200, 96, 96], canvases of the committed calibration items).
Training canvases are drawn afresh each epoch from the full train split (`apt-get install dataset-fashion-mnist`).

YOLOv8's recipe, small: a task-aligned assigner (top 10 anchors by score^0.5 * IoU^6 among those inside the box,
or the one nearest its centre on each stride), BCE on the classes against the aligned IoU, CIoU and DFL on the
boxes (gains 7.5, 0.5, 1.5), AdamW with a one-cycle schedule, an EMA of the weights.

The measurement (here only): class-aware NMS (IoU 0.65) over every anchor-class pair scoring >= 0.001, at most
100 detections per canvas, then pycocotools' COCOeval. One thread: ~12 minutes on an idle 2-core host, 15-19 when
others load it (the committed weights: 1123 s, mAP@0.5 0.908, mAP@0.5:0.95 0.834 on the committed test canvases):

    .venv/bin/python scripts/train_fashion_det.py             # train, write, measure
    .venv/bin/python scripts/train_fashion_det.py --evaluate  # measure the committed weights
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import time

import numpy as np
import torch
from torch import nn

from edgekit.zoo.canvases import CATEGORY_ID_OFFSET, coco_instances, make_canvases
from edgekit.zoo.fashion_mnist import CALIB_NPZ, CLASSES, DET_CALIB_NPZ, DET_TEST_JSON, DET_TEST_NPZ, DET_WEIGHTS, TEST_NPZ, read_idx
from edgekit.zoo.models import FashionDet

SEED, TEST_SEED, CALIB_SEED, CANVASES = 0, 20240, 20241, 200
EPOCHS, PER_EPOCH, BATCH, LR = 12, 14000, 64, 3e-3
TOPK, ALPHA, BETA = 10, 0.5, 6.0  # the task-aligned assigner's
BOX_GAIN, CLS_GAIN, DFL_GAIN = 7.5, 0.5, 1.5
NMS_IOU, SCORE_MIN, MAX_DETECTIONS = 0.65, 0.001, 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--evaluate", action="store_true", help="only measure the committed weights on the committed canvases")
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--per-epoch", type=int, default=PER_EPOCH, help="training canvases per epoch")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.manual_seed(SEED)
    # ms per canvas and step, 1 vs 2 threads: 3.8 vs 2.2 on an idle 2-core host, 4.0 vs ~20 on one loaded by others
    torch.set_num_threads(args.threads)
    if not args.evaluate:
        write_data()
        model = FashionDet()
        train(model, args.epochs, args.per_epoch)
        torch.save(model.state_dict(), DET_WEIGHTS)
    model = FashionDet()
    model.load_state_dict(torch.load(DET_WEIGHTS, weights_only=True))
    report(evaluate(model.eval()))


def write_data() -> None:
    """The committed canvases: 200 test canvases with their COCO instances, 200 calibration canvases."""
    with np.load(TEST_NPZ) as npz:
        images, boxes, classes = make_canvases(npz["images"], npz["labels"], CANVASES, TEST_SEED)
    np.savez_compressed(DET_TEST_NPZ, images=images)
    DET_TEST_JSON.write_text(json.dumps(coco_instances(boxes, classes)))
    with np.load(CALIB_NPZ) as npz:
        np.savez_compressed(DET_CALIB_NPZ, images=make_canvases(npz["images"], npz["labels"], CANVASES, CALIB_SEED)[0])
    print(f"wrote {CANVASES} test canvases ({sum(map(len, boxes))} items) and {CANVASES} calibration canvases")


def train(model: FashionDet, epochs: int, per_epoch: int) -> None:
    """AdamW, one-cycle, EMA; fresh canvases every epoch (seeds 1000 + epoch), of 2 to 4 items (more items per step)."""
    items, labels = read_idx("train")
    steps = epochs * (per_epoch // BATCH)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=LR, weight_decay=5e-4)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=LR, total_steps=steps, pct_start=0.1)
    ema, step, start = copy.deepcopy(model).eval(), 0, time.perf_counter()
    for epoch in range(epochs):
        generated = time.perf_counter()
        canvases, boxes, classes = make_canvases(items, labels, per_epoch, 1000 + epoch, min_items=2)
        images = torch.from_numpy(canvases).float().div_(255).unsqueeze(1)
        gt_boxes, gt_classes, gt_mask = pad_targets(boxes, classes)
        generated = time.perf_counter() - generated
        model.train()
        order, totals = torch.randperm(per_epoch), torch.zeros(3)
        for first in range(0, per_epoch - BATCH + 1, BATCH):
            idx = order[first : first + BATCH]
            losses = detection_loss(model, images[idx], gt_boxes[idx], gt_classes[idx], gt_mask[idx])
            optimizer.zero_grad()
            (BOX_GAIN * losses[0] + CLS_GAIN * losses[1] + DFL_GAIN * losses[2]).backward()
            nn.utils.clip_grad_norm_(model.parameters(), 10.0)
            optimizer.step()
            schedule.step()
            step += 1
            update_ema(ema, model, step)
            totals += torch.stack([loss.detach() for loss in losses])
        box, cls, dfl = (totals / (per_epoch // BATCH)).tolist()
        print(
            f"epoch {epoch + 1}/{epochs}: loss box {box:.3f} cls {cls:.3f} dfl {dfl:.3f} "
            f"(canvases {generated:.0f}s, total {time.perf_counter() - start:.0f}s)",
            flush=True,
        )
    model.load_state_dict(ema.state_dict())
    print(f"trained {steps} steps of {BATCH} in {time.perf_counter() - start:.0f}s")


def update_ema(ema: nn.Module, model: nn.Module, step: int, decay: float = 0.999) -> None:
    """Exponential moving average of parameters and BN statistics, ramped in over the first ~2000 steps."""
    d = decay * (1 - math.exp(-step / 400))
    with torch.no_grad():
        for e, m in zip(ema.state_dict().values(), model.state_dict().values(), strict=True):
            if e.dtype.is_floating_point:
                e.mul_(d).add_(m.detach(), alpha=1 - d)
            else:
                e.copy_(m)


def pad_targets(boxes, classes) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-canvas boxes and classes -> padded [N, M, 4] x1y1x2y2, [N, M] class, [N, M] valid mask."""
    most = max(max(len(b) for b in boxes), 1)
    gt_boxes, gt_classes, mask = (
        torch.zeros(len(boxes), most, 4),
        torch.zeros(len(boxes), most, dtype=torch.long),
        torch.zeros(len(boxes), most, dtype=torch.bool),
    )
    for i, (b, c) in enumerate(zip(boxes, classes, strict=True)):
        gt_boxes[i, : len(b)], gt_classes[i, : len(b)], mask[i, : len(b)] = torch.from_numpy(b), torch.from_numpy(c), True
    return gt_boxes, gt_classes, mask


def detection_loss(model: FashionDet, image, gt_boxes, gt_classes, gt_mask) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(CIoU, BCE, DFL) losses of a batch, each normalised by the sum of the target scores."""
    bins, logits = model.raw(image)
    points, strides = model.anchors(image)  # [2, A] in strides, [1, A]
    distances = model.distances(bins)  # [N, 4, A] in strides
    anchor_px = (points * strides).T  # [A, 2]
    pred_boxes = torch.cat([points - distances[:, :2], points + distances[:, 2:]], 1).mul(strides).transpose(1, 2)  # [N, A, 4]
    scores = logits.sigmoid().transpose(1, 2)  # [N, A, C]
    target_boxes, target_scores, positive = assign(
        scores.detach(), pred_boxes.detach(), anchor_px, strides[0], gt_boxes, gt_classes, gt_mask
    )
    total = target_scores.sum().clamp(min=1)
    cls_loss = nn.functional.binary_cross_entropy_with_logits(logits.transpose(1, 2), target_scores, reduction="sum") / total
    if not positive.any():
        zero = pred_boxes.sum() * 0
        return zero, cls_loss, zero
    weight = target_scores.sum(-1)[positive]
    box_loss = ((1 - ciou(pred_boxes[positive], target_boxes[positive])) * weight).sum() / total
    stride = strides[0].expand_as(positive)[positive][:, None]
    anchor = anchor_px.expand(positive.shape[0], -1, -1)[positive]
    target_ltrb = torch.cat([anchor - target_boxes[positive][:, :2], target_boxes[positive][:, 2:] - anchor], 1) / stride
    pred_bins = bins.view(bins.shape[0], 4, model.reg_max, -1).permute(0, 3, 1, 2)[positive]  # [P, 4, reg_max]
    dfl = (distribution_focal_loss(pred_bins, target_ltrb.clamp(0, model.reg_max - 1.01)) * weight).sum() / total
    return box_loss, cls_loss, dfl


def assign(scores, pred_boxes, anchors, strides, gt_boxes, gt_classes, gt_mask):
    """YOLOv8's task-aligned assignment: per box, the TOPK anchors by score^ALPHA * IoU^BETA among its candidates
    (anchors inside it, and on each stride the one nearest its centre); an anchor claimed twice goes to the box it
    overlaps most. Returns target boxes [N, A, 4], target scores [N, A, C] (one-hot times the aligned metric,
    normalised so each box's best anchor gets its IoU) and the positive mask [N, A]."""
    n, a, c = scores.shape
    x, y = anchors[:, 0], anchors[:, 1]
    inside = (x > gt_boxes[..., 0:1]) & (x < gt_boxes[..., 2:3]) & (y > gt_boxes[..., 1:2]) & (y < gt_boxes[..., 3:4])  # [N, M, A]
    centre = (gt_boxes[..., :2] + gt_boxes[..., 2:]) / 2
    near = ((anchors - centre[..., None, :]).abs() <= strides[:, None] / 2).all(-1)  # the centre's cell, per stride
    candidate = (inside | near) & gt_mask[..., None]
    ious = box_iou_pairs(gt_boxes, pred_boxes).clamp(min=0) * candidate  # [N, M, A]
    class_scores = scores.transpose(1, 2).gather(1, gt_classes[..., None].expand(-1, -1, a))  # [N, M, A]
    metric = class_scores.pow(ALPHA) * ious.pow(BETA) * candidate
    top = metric.topk(TOPK, -1).indices
    chosen = torch.zeros_like(candidate).scatter_(-1, top, True) & candidate
    claimed = chosen.sum(1)  # [N, A]
    if (claimed > 1).any():
        best = nn.functional.one_hot(ious.argmax(1), gt_boxes.shape[1]).transpose(1, 2).bool()  # [N, M, A]
        chosen = torch.where((claimed > 1)[:, None], best & candidate, chosen)
    positive = chosen.any(1)
    gt_index = chosen.float().argmax(1)  # [N, A]
    target_boxes = gt_boxes.gather(1, gt_index[..., None].expand(-1, -1, 4))
    target_classes = gt_classes.gather(1, gt_index)
    metric = metric * chosen
    norm = (metric * (ious * chosen).amax(-1, keepdim=True) / (metric.amax(-1, keepdim=True) + 1e-9)).amax(1)  # [N, A]
    target_scores = nn.functional.one_hot(target_classes, c).float() * (norm * positive)[..., None]
    return target_boxes, target_scores, positive


def box_iou_pairs(gt: torch.Tensor, pred: torch.Tensor) -> torch.Tensor:
    """IoU of every box [N, M, 4] with every prediction [N, A, 4] (x1y1x2y2): [N, M, A]."""
    lt = torch.maximum(gt[:, :, None, :2], pred[:, None, :, :2])
    rb = torch.minimum(gt[:, :, None, 2:], pred[:, None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area = lambda b: (b[..., 2] - b[..., 0]).clamp(min=0) * (b[..., 3] - b[..., 1]).clamp(min=0)  # noqa: E731
    return inter / (area(gt)[:, :, None] + area(pred)[:, None, :] - inter + 1e-9)


def ciou(pred: torch.Tensor, target: torch.Tensor, eps: float = 1e-7) -> torch.Tensor:
    """Complete IoU of paired boxes [P, 4] (x1y1x2y2)."""
    w1, h1 = pred[:, 2] - pred[:, 0], (pred[:, 3] - pred[:, 1]).clamp(min=eps)
    w2, h2 = target[:, 2] - target[:, 0], (target[:, 3] - target[:, 1]).clamp(min=eps)
    inter = (torch.minimum(pred[:, 2:], target[:, 2:]) - torch.maximum(pred[:, :2], target[:, :2])).clamp(min=0).prod(-1)
    iou = inter / (w1 * h1 + w2 * h2 - inter + eps)
    hull = torch.maximum(pred[:, 2:], target[:, 2:]) - torch.minimum(pred[:, :2], target[:, :2])
    diagonal = hull.pow(2).sum(-1) + eps
    centre_distance = ((pred[:, :2] + pred[:, 2:]) - (target[:, :2] + target[:, 2:])).pow(2).sum(-1) / 4
    v = (4 / math.pi**2) * (torch.atan(w2 / h2) - torch.atan(w1 / h1)).pow(2)
    with torch.no_grad():
        alpha = v / (v - iou + (1 + eps))
    return iou - (centre_distance / diagonal + v * alpha)


def distribution_focal_loss(bins: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """GFL's DFL: cross-entropy to the two bins around each target distance, weighted by nearness. [P, 4, R] -> [P]."""
    left = target.long()
    w_left = left + 1 - target
    ce = lambda k: nn.functional.cross_entropy(bins.reshape(-1, bins.shape[-1]), k.reshape(-1), reduction="none").view_as(target)  # noqa: E731
    return (ce(left) * w_left + ce(left + 1) * (1 - w_left)).mean(-1)


def detect(model: FashionDet, images: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(boxes x1y1x2y2 [K, 4], scores [K], classes [K]) per canvas: the model's [N, 4 + C, A] output, decoded."""
    with torch.no_grad():
        output = torch.cat(
            [model(torch.from_numpy(images[i : i + 50]).float().div(255)[:, None]) for i in range(0, len(images), 50)]
        ).numpy()
    return [postprocess(o) for o in output]


def postprocess(output: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One canvas' [4 + C, A] -> detections: every anchor-class pair scoring >= SCORE_MIN, class-aware NMS."""
    cx, cy, w, h = output[:4]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1)
    anchor, cls = np.nonzero(output[4:].T >= SCORE_MIN)
    boxes, scores = boxes[anchor], output[4:].T[anchor, cls]
    keep = nms(boxes + cls[:, None] * 1e4, scores)[:MAX_DETECTIONS]  # offset per class: class-aware
    return boxes[keep], scores[keep], cls[keep]


def nms(boxes: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Indices of the boxes kept by greedy NMS at NMS_IOU, best score first."""
    order, keep = np.argsort(-scores, kind="stable"), []
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    while len(order):
        i, rest = order[0], order[1:]
        keep.append(i)
        wh = np.clip(np.minimum(boxes[i, 2:], boxes[rest, 2:]) - np.maximum(boxes[i, :2], boxes[rest, :2]), 0, None)
        inter = wh[:, 0] * wh[:, 1]
        order = rest[inter / (area[i] + area[rest] - inter + 1e-9) <= NMS_IOU]
    return np.array(keep, dtype=np.int64)


def evaluate(model: FashionDet) -> dict:
    """COCO mAP of the model on the committed test canvases: mAP@0.5, mAP@0.5:0.95 and AP@0.5 per class."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with np.load(DET_TEST_NPZ) as npz:
        images = npz["images"]
    start = time.perf_counter()
    detections = detect(model, images)
    seconds = time.perf_counter() - start
    results = [
        {
            "image_id": i + 1,
            "category_id": int(c) + CATEGORY_ID_OFFSET,
            "bbox": [float(b[0]), float(b[1]), float(b[2] - b[0]), float(b[3] - b[1])],
            "score": float(s),
        }
        for i, (boxes, scores, classes) in enumerate(detections)
        for b, s, c in zip(boxes, scores, classes, strict=True)
    ]
    truth = COCO()
    truth.dataset = json.loads(DET_TEST_JSON.read_text())
    truth.createIndex()
    coco_eval = COCOeval(truth, truth.loadRes(results), "bbox")
    coco_eval.evaluate()
    coco_eval.accumulate()
    coco_eval.summarize()
    precision = coco_eval.eval["precision"][0, :, :, 0, 2]  # IoU 0.5, all recalls, classes, all areas, 100 detections
    per_class = {name: float(precision[:, k][precision[:, k] > -1].mean()) for k, name in enumerate(CLASSES)}
    return {
        "map50": float(coco_eval.stats[1]),
        "map": float(coco_eval.stats[0]),
        "per_class": per_class,
        "seconds": seconds,
        "images": len(images),
    }


def report(scores: dict) -> None:
    print(
        f"fp32 on {scores['images']} test canvases ({scores['seconds']:.1f}s): mAP@0.5 {scores['map50']:.3f}, mAP@0.5:0.95 {scores['map']:.3f}"
    )
    print("AP@0.5 per class: " + ", ".join(f"{name} {ap:.3f}" for name, ap in scores["per_class"].items()))


if __name__ == "__main__":
    main()
