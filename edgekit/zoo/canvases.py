"""Detection canvases for the zoo's detector (zoo:fashion-det): Fashion-MNIST items pasted onto a dark canvas.

numpy only, deterministic by seed. A canvas is grayscale uint8 [SIZE, SIZE] (96x96 by default) holding 1 to 4
Fashion-MNIST items (28x28, black background), each rescaled by 0.8x to 2x (bilinear) and pasted at a random
position (the brighter pixel wins) over a faint linear background gradient (0 to VISIBLE = 16 grey levels). A
placement whose box overlaps a placed one with IoU > 0.1, or covers over a quarter of either box, is rejected.
Each item's box is the tight box of its visible pixels (value > VISIBLE) in input pixels, x1, y1, x2, y2 (x2, y2
one past the last pixel, so w = x2 - x1); its class is the Fashion-MNIST label (edgekit.zoo.fashion_mnist.CLASSES).

`coco_instances` writes the boxes as COCO instances: category_id = class index + CATEGORY_ID_OFFSET (1..10),
image file_name = FILE_NAME.format(index=i), the canvas' index in the committed npz (fashion_det_test.npz[i]).
"""

from __future__ import annotations

import numpy as np

SIZE = 96  # canvas side, input pixels
MAX_ITEMS = 4
SCALES = (0.8, 2.0)  # item side 22..56 px
MAX_IOU = 0.1  # a placement overlapping a placed box more than this is rejected
MAX_COVER = 0.25  # ... or covering more than this share of either box
VISIBLE = 16  # an item's pixel counts towards its box when brighter than this (uint8)
GRADIENT = VISIBLE  # the background gradient's largest value (uint8): at most VISIBLE, so boxes stand out
TRIES = 20  # positions tried per item before it is left out
CATEGORY_ID_OFFSET = 1  # COCO category_id = class index + 1 (1..10; 0 stays free, as COCO keeps it)
FILE_NAME = "fashion_det_test.npz[{index}]"  # COCO file_name of canvas `index`: its row in the committed npz


def resize_bilinear(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """uint8 [h, w] -> uint8 [height, width], bilinear with pixel centres aligned (as align_corners=False)."""
    h, w = image.shape
    ys = np.clip((np.arange(height) + 0.5) * h / height - 0.5, 0, h - 1)
    xs = np.clip((np.arange(width) + 0.5) * w / width - 0.5, 0, w - 1)
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
    fy, fx = (ys - y0)[:, None], (xs - x0)[None, :]
    img = image.astype(np.float32)
    top = img[y0][:, x0] * (1 - fx) + img[y0][:, x1] * fx
    bottom = img[y1][:, x0] * (1 - fx) + img[y1][:, x1] * fx
    return np.clip(np.rint(top * (1 - fy) + bottom * fy), 0, 255).astype(np.uint8)


def tight_box(item: np.ndarray) -> np.ndarray | None:
    """x1, y1, x2, y2 of the pixels of `item` brighter than VISIBLE (x2, y2 exclusive), or None if none are."""
    rows, cols = np.nonzero((item > VISIBLE).any(1))[0], np.nonzero((item > VISIBLE).any(0))[0]
    if not len(rows):
        return None
    return np.array([cols[0], rows[0], cols[-1] + 1, rows[-1] + 1], np.float32)


def background(rng: np.random.Generator, size: int) -> np.ndarray:
    """A faint linear gradient in a random direction, 0..GRADIENT*U(0, 1) grey levels, float32 [size, size]."""
    angle, peak = rng.uniform(0, 2 * np.pi), rng.uniform(0, GRADIENT)
    ramp = np.cos(angle) * np.arange(size)[None, :] + np.sin(angle) * np.arange(size)[:, None]
    ramp = (ramp - ramp.min()) / max(float(ramp.max() - ramp.min()), 1e-6)
    return (ramp * peak).astype(np.float32)


def place_items(rng: np.random.Generator, items: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Paste `items` (uint8 [k, 28, 28]) onto one canvas: (uint8 canvas, boxes [j, 4], indices of the j placed)."""
    canvas = background(rng, size)
    boxes, placed = np.zeros((0, 4), np.float32), []
    for index, item in enumerate(items):
        side = int(round(28 * rng.uniform(*SCALES)))
        scaled = resize_bilinear(item, side, side)
        box = tight_box(scaled)
        for _ in range(TRIES if box is not None else 0):
            y, x = (int(v) for v in rng.integers(0, size - side + 1, 2))
            shifted = box + np.array([x, y, x, y], np.float32)
            if fits(shifted, boxes):
                canvas[y : y + side, x : x + side] = np.maximum(canvas[y : y + side, x : x + side], scaled)
                boxes, placed = np.vstack([boxes, shifted[None]]), placed + [index]
                break
    return np.clip(np.rint(canvas), 0, 255).astype(np.uint8), boxes, placed


def fits(box: np.ndarray, boxes: np.ndarray) -> bool:
    """Whether `box` may join the placed `boxes`: IoU <= MAX_IOU with each, and covering at most MAX_COVER of
    either box's area (so a small item is not pasted inside a large one)."""
    if not len(boxes):
        return True
    wh = np.clip(np.minimum(box[2:], boxes[:, 2:]) - np.maximum(box[:2], boxes[:, :2]), 0, None)
    inter = wh[:, 0] * wh[:, 1]
    area, areas = _area(box), _area(boxes)
    return bool((inter / (area + areas - inter) <= MAX_IOU).all() and (inter / np.minimum(area, areas) <= MAX_COVER).all())


def _area(boxes: np.ndarray) -> np.ndarray:
    return (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])


def make_canvases(
    images: np.ndarray, labels: np.ndarray, count: int, seed: int, size: int = SIZE, min_items: int = 1
) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """`count` canvases from the items `images` (uint8 [M, 28, 28]) and `labels` [M], deterministic by `seed`,
    each trying min_items..MAX_ITEMS items (an item that finds no free place after TRIES positions is left out).

    Returns uint8 canvases [count, size, size], and per canvas its boxes (float32 [k, 4], x1, y1, x2, y2 in
    input pixels) and its classes (int64 [k]). Items are drawn without replacement until the pool is used up.
    """
    rng = np.random.default_rng(seed)
    order, cursor = rng.permutation(len(images)), 0
    canvases, boxes, classes = np.zeros((count, size, size), np.uint8), [], []
    for i in range(count):
        k = int(rng.integers(min_items, MAX_ITEMS + 1))
        if cursor + k > len(order):
            order, cursor = rng.permutation(len(images)), 0
        chosen = order[cursor : cursor + k]
        cursor += k
        canvases[i], canvas_boxes, placed = place_items(rng, images[chosen], size)
        boxes.append(canvas_boxes)
        classes.append(labels[chosen][placed].astype(np.int64))
    return canvases, boxes, classes


def coco_instances(boxes_per_image, classes_per_image, size: int = SIZE, file_names=None) -> dict:
    """A COCO instances dict of the canvases' boxes (x1, y1, x2, y2 each) and class indices.

    images: id (1-based, = canvas index + 1), file_name (`file_names[i]`, by default FILE_NAME), width, height;
    annotations: id, image_id, category_id (class + CATEGORY_ID_OFFSET), bbox [x, y, w, h], area (w * h), iscrowd 0;
    categories: id, name (edgekit.zoo.fashion_mnist.CLASSES).
    """
    from edgekit.zoo.fashion_mnist import CLASSES

    images, annotations = [], []
    for i, (boxes, classes) in enumerate(zip(boxes_per_image, classes_per_image, strict=True)):
        name = file_names[i] if file_names is not None else FILE_NAME.format(index=i)
        images.append({"id": i + 1, "file_name": name, "width": size, "height": size})
        for box, cls in zip(np.asarray(boxes, np.float64).reshape(-1, 4), classes, strict=True):
            w, h = float(box[2] - box[0]), float(box[3] - box[1])
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": i + 1,
                    "category_id": int(cls) + CATEGORY_ID_OFFSET,
                    "bbox": [float(box[0]), float(box[1]), w, h],
                    "area": w * h,
                    "iscrowd": 0,
                }
            )
    categories = [{"id": k + CATEGORY_ID_OFFSET, "name": name} for k, name in enumerate(CLASSES)]
    return {"images": images, "annotations": annotations, "categories": categories}
