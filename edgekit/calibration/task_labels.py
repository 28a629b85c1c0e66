"""Labels for tasks other than classification, matched to the samples they label: boxes (COCO instances JSON or a
YOLO labels folder) and masks (a folder of PNGs).

Boxes come out in the model's input pixels (x1, y1, x2, y2) with the model's class indices: the labels' category ids,
sorted, are the model's classes 0, 1, 2... (ids 0..C-1 stay as they are; COCO's 91 ids map to the 80 classes its
detectors score, as Ultralytics maps them). Images are assumed resized to the input without letterboxing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgekit.errors import EdgekitError, InputMismatchError
from edgekit.zoo.names import zoo_labels

_ROW = re.compile(r"\[(\d+)\]$")  # an .npz sample's id ends with its row: file.npz[12]


@dataclass
class BoxLabels:
    """Each sample's true boxes [K, 4] (input pixels), classes [K] (model class indices) and crowd flags [K]."""

    truth: list[dict]
    names: dict[int, str] = field(default_factory=dict)  # model class index -> the labels' category name
    source: str = ""


def read_box_labels(path: str | Path, ids: list[str] | None, image_size: tuple[int, int]) -> BoxLabels:
    """The boxes for the samples named `ids` (their image paths, or file.npz[row]) from a COCO instances JSON or a YOLO
    labels folder (one <image stem>.txt per image: class cx cy w h, in [0, 1])."""
    path = Path(path)
    if not ids:
        raise EdgekitError("box labels need data whose samples have names to match", hint="give the images as a folder or an .npz")
    if path.is_dir():
        return _yolo_folder(path, ids, image_size)
    if not path.exists():
        raise EdgekitError(f"labels not found: {path}", hint="give a COCO instances .json or a folder of YOLO .txt labels")
    try:
        coco = json.loads(path.read_text())
        images, annotations, categories = coco["images"], coco.get("annotations", []), coco["categories"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise EdgekitError(f"{path} is not a COCO instances file ({type(e).__name__}: {e})", hint="give a COCO instances .json") from None
    return _coco(images, annotations, categories, ids, image_size, str(path))


def _coco(images: list, annotations: list, categories: list, ids: list[str], image_size: tuple[int, int], source: str) -> BoxLabels:
    order = sorted(c["id"] for c in categories)
    index = {cid: k for k, cid in enumerate(order)}
    names = {index[c["id"]]: c.get("name", str(c["id"])) for c in categories}
    by_image: dict[int, list] = {}
    for a in annotations:
        by_image.setdefault(a["image_id"], []).append(a)
    matched = [_coco_image(images, i) for i in ids]
    missing = [i for i, m in zip(ids, matched, strict=True) if m is None]
    if missing:
        raise InputMismatchError(
            f"{len(missing)} of {len(ids)} samples have no image in {source} (first: {missing[0]})",
            hint="the COCO images' file_name must name the samples' files (or, for .npz data, list one image per row)",
        )
    h, w = image_size
    truth = [_coco_boxes(by_image.get(m["id"], []), index, w / m.get("width", w), h / m.get("height", h)) for m in matched]
    return BoxLabels(truth, names, source)


def _coco_image(images: list, sample_id: str) -> dict | None:
    """The COCO image of a sample: by file name, else (an .npz row) by position in id order."""
    base = Path(sample_id).name
    for image in images:
        if image.get("file_name") in (sample_id, base) or Path(str(image.get("file_name", ""))).name == base:
            return image
    row = _ROW.search(sample_id)
    if row:
        ordered = sorted(images, key=lambda m: m["id"])
        return ordered[int(row.group(1))] if int(row.group(1)) < len(ordered) else None
    return None


def _coco_boxes(annotations: list, index: dict, sx: float, sy: float) -> dict:
    boxes = np.array([a["bbox"] for a in annotations], np.float64).reshape(-1, 4)
    boxes[:, 2:] += boxes[:, :2]
    boxes *= np.array([sx, sy, sx, sy])
    classes = np.array([index.get(a["category_id"], -1) for a in annotations], np.int64)
    crowd = np.array([bool(a.get("iscrowd", 0)) for a in annotations], bool)
    known = classes >= 0  # an annotation of a category the file does not list is left out
    return {"boxes": boxes[known], "classes": classes[known], "crowd": crowd[known]}


def _yolo_folder(folder: Path, ids: list[str], image_size: tuple[int, int]) -> BoxLabels:
    """YOLO labels: <stem>.txt per image (an image without one has no objects, as YOLO reads it)."""
    files = {p.stem: p for p in folder.glob("*.txt")}
    stems = [Path(i).stem for i in ids]
    if not files or not any(s in files for s in stems):
        raise InputMismatchError(
            f"no label file in {folder} names a sample (first sample: {ids[0]})",
            hint="a YOLO labels folder holds <image stem>.txt for each image: class cx cy w h, in [0, 1]",
        )
    h, w = image_size
    truth = [_yolo_boxes(files.get(s), w, h) for s in stems]
    return BoxLabels(truth, {}, str(folder))


def _yolo_boxes(path: Path | None, w: int, h: int) -> dict:
    rows = np.loadtxt(path, ndmin=2) if path is not None and path.stat().st_size else np.zeros((0, 5))
    if rows.shape[1] < 5:
        raise InputMismatchError(f"{path}: a YOLO label row is class cx cy w h", hint="one object per line, five numbers")
    cx, cy, bw, bh = (rows[:, i] for i in range(1, 5))
    boxes = np.column_stack([(cx - bw / 2) * w, (cy - bh / 2) * h, (cx + bw / 2) * w, (cy + bh / 2) * h])
    return {"boxes": boxes, "classes": rows[:, 0].astype(np.int64), "crowd": np.zeros(len(rows), bool)}


def read_mask_labels(folder: str | Path, ids: list[str] | None, size: tuple[int, int]) -> np.ndarray:
    """[N, H, W] class indices from a folder of PNG masks named after the samples' images (255: not labelled), resized
    to the model's output map size with nearest neighbour."""
    from PIL import Image

    folder = Path(folder)
    if not folder.is_dir() or not ids:
        raise EdgekitError(f"mask labels need a folder of PNGs named after the images: {folder}", hint="give --labels FOLDER")
    files = {p.stem: p for p in folder.glob("*.png")}
    missing = [i for i in ids if Path(i).stem not in files]
    if missing:
        raise InputMismatchError(
            f"{len(missing)} samples have no mask in {folder} (first: {missing[0]})", hint="one <image stem>.png per image"
        )
    h, w = size
    masks = [np.asarray(Image.open(files[Path(i).stem]).convert("L").resize((w, h), Image.NEAREST)) for i in ids]
    return np.stack(masks).astype(np.int64)


def image_size(samples) -> tuple[int, int] | None:
    """(H, W) of the samples' first image input as the model takes it (NCHW or NHWC); None without one."""
    first = next(samples.batches(1), {})
    for array in first.values():
        if array.ndim == 4:
            return tuple(array.shape[2:4]) if array.shape[1] in (1, 3, 4) else tuple(array.shape[1:3])
    return None


def task_labels(task: str, samples, path: str | None = None, map_size: tuple[int, int] | None = None):
    """What a task is scored against: `path` (boxes for detection, masks for segmentation), else the data's own (a zoo
    set's declared boxes), else the class labels (embeddings); None without any."""

    path = path or zoo_labels(samples.provenance.get("source", ""))
    if task == "detection" and path:
        return read_box_labels(path, samples.ids, image_size(samples))
    if task == "segmentation" and path:
        return read_mask_labels(path, samples.ids, map_size)
    if path and task not in ("detection", "segmentation"):
        raise EdgekitError(f"--labels applies to detection and segmentation; the task is {task}", hint="give class labels in the data")
    if task == "regression" and samples.labels is not None:
        return samples.labels.astype(np.float64)  # the targets (read as class labels: their values are kept)
    return samples.labels if task == "embedding" else None
