"""Rendered text pages for the text detector (zoo:text-db): PIL draws words of random letters on light, noisy pages.

Deterministic by seed. Each page comes with DBNet's training targets, made from the word boxes as DBNet makes
them from its polygons: the text-region map (each box shrunk by D = A (1 - r^2) / L, r = 0.4) and the threshold
map (0.3 .. 0.7 in a band of width D around each box's border). Pages are RGB, H and W multiples of 32
(the detector's largest stride), as float32 [3, H, W] in [0, 1].
"""

from __future__ import annotations

import string
from functools import cache
from pathlib import Path

import numpy as np

SHRINK_RATIO = 0.4  # DBNet's r
THRESH_MIN, THRESH_MAX = 0.3, 0.7  # DBNet's threshold-map range
FONT_DIRS = (Path("/usr/share/fonts/truetype/dejavu"), Path("/usr/share/fonts/truetype/liberation"))
FONT_FILES = ("DejaVuSans.ttf", "DejaVuSerif-Bold.ttf", "LiberationSerif-Regular.ttf", "LiberationMono-Regular.ttf")
SIZES = (12, 14, 16, 20, 24, 30, 36)
LETTERS = string.ascii_letters + string.digits
DATA_DIR = Path(__file__).parent / "data"
DB_WEIGHTS = DATA_DIR / "text_db.pt"  # the trained TextDB's state dict (scripts/train_text_db.py)
DB_ONNX = DATA_DIR / "text_db.onnx"  # the same, exported with batch, height and width dynamic
BINARIZE_AT = 0.3  # DBNet's post-processing threshold on the probability map


@cache
def system_font(name: str | None, size: int):
    """PIL's default font (name None), or a TrueType font shipped with the system (falling back to the default)."""
    from PIL import ImageFont

    for folder in FONT_DIRS:
        if name and (folder / name).exists():
            return ImageFont.truetype(str(folder / name), size)
    return ImageFont.load_default(size)


def fonts() -> tuple[str | None, ...]:
    """The fonts pages are drawn in: PIL's default and those of FONT_FILES this system has."""
    return (None, *(f for f in FONT_FILES if any((d / f).exists() for d in FONT_DIRS)))


def render_page(rng: np.random.Generator, height: int, width: int) -> tuple[np.ndarray, list[tuple[int, int, int, int]]]:
    """One page (uint8 RGB [H, W, 3]) and its word boxes (x0, y0, x1, y1): lines of random words, some clutter."""
    from PIL import Image, ImageDraw

    paper = rng.integers(200, 256, 3)
    page = Image.new("RGB", (width, height), tuple(int(c) for c in paper))
    draw = ImageDraw.Draw(page)
    _clutter(draw, rng, height, width, paper)
    boxes: list[tuple[int, int, int, int]] = []
    y = int(rng.integers(2, 24))
    names = fonts()
    while y < height - 12:
        font = system_font(names[rng.integers(len(names))], int(rng.choice(SIZES)))
        ink = tuple(int(c) for c in rng.integers(0, 90, 3))
        x, line_height = int(rng.integers(2, 40)), 0
        while True:
            word = "".join(rng.choice(list(LETTERS), int(rng.integers(2, 11))))
            x0, y0, x1, y1 = draw.textbbox((x, y), word, font=font)
            if x1 >= width - 2 or y1 >= height - 2:
                break
            if rng.random() < 0.85:  # some gaps in a line
                draw.text((x, y), word, fill=ink, font=font)
                boxes.append((x0, y0, x1, y1))
            line_height = max(line_height, y1 - y)
            x = x1 + int(rng.integers(6, 30))
        y += max(line_height, 10) + int(rng.integers(4, 40))
    pixels = np.asarray(page, np.float32) + rng.normal(0, rng.uniform(2, 10), (height, width, 1)).astype(np.float32)
    return np.clip(pixels, 0, 255).astype(np.uint8), boxes


def _clutter(draw, rng: np.random.Generator, height: int, width: int, paper) -> None:
    """What is not text: faint lines, rules and blobs, so the detector must tell strokes from strokes."""
    for _ in range(int(rng.integers(0, 6))):
        tone = tuple(int(c) for c in np.clip(paper - rng.integers(20, 120, 3), 0, 255))
        x0, x1 = sorted(rng.integers(0, width, 2).tolist())
        y0, y1 = sorted(rng.integers(0, height, 2).tolist())
        if rng.random() < 0.5:
            draw.line((x0, y0, x1, y0 if rng.random() < 0.7 else y1), fill=tone, width=int(rng.integers(1, 4)))
        else:
            draw.ellipse((x0, y0, min(x1, x0 + 60), min(y1, y0 + 60)), outline=tone, width=int(rng.integers(1, 3)))


def shrink_offset(box: tuple[int, int, int, int]) -> float:
    """DBNet's shrink distance D = A (1 - r^2) / L of a box."""
    w, h = box[2] - box[0], box[3] - box[1]
    return w * h * (1 - SHRINK_RATIO**2) / max(2 * (w + h), 1)


def targets(boxes, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """DBNet's targets: the shrunk text-region map (float32 0/1) and the threshold map (float32, 0.3 .. 0.7)."""
    region = np.zeros((height, width), np.float32)
    border = np.zeros((height, width), np.float32)
    for box in boxes:
        d = shrink_offset(box)
        x0, y0, x1, y1 = box
        sx0, sy0, sx1, sy1 = (round(v) for v in (x0 + d, y0 + d, x1 - d, y1 - d))
        if sx1 > sx0 and sy1 > sy0:
            region[sy0:sy1, sx0:sx1] = 1.0
        # inside the box dilated by D: 1 at the box's border, falling to 0 at D away from it (either side)
        pad = int(np.ceil(d)) + 1
        wy0, wx0, wy1, wx1 = max(y0 - pad, 0), max(x0 - pad, 0), min(y1 + pad, height), min(x1 + pad, width)
        ys, xs = np.arange(wy0, wy1)[:, None], np.arange(wx0, wx1)[None, :]
        dx = np.maximum(np.maximum(x0 - xs, xs - x1), 0).astype(np.float32)
        dy = np.maximum(np.maximum(y0 - ys, ys - y1), 0).astype(np.float32)
        inside = np.minimum(np.minimum(xs - x0, x1 - xs), np.minimum(ys - y0, y1 - ys)).clip(min=0).astype(np.float32)
        distance = np.where((dx > 0) | (dy > 0), np.hypot(dx, dy), inside)
        closeness = np.clip(1 - distance / max(d, 1.0), 0, 1)
        border[wy0:wy1, wx0:wx1] = np.maximum(border[wy0:wy1, wx0:wx1], closeness)
    return region, THRESH_MIN + (THRESH_MAX - THRESH_MIN) * border


def text_pages(count: int, seed: int, height: int, width: int) -> dict[str, np.ndarray]:
    """`count` pages of one size: `image` float32 [N, 3, H, W] in [0, 1], `region` and `threshold` float32 [N, H, W]."""
    rng = np.random.default_rng(seed)
    images, regions, thresholds = [], [], []
    for _ in range(count):
        pixels, boxes = render_page(rng, height, width)
        region, threshold = targets(boxes, height, width)
        images.append(pixels.transpose(2, 0, 1).astype(np.float32) / 255.0)
        regions.append(region)
        thresholds.append(threshold)
    return {"image": np.stack(images), "region": np.stack(regions), "threshold": np.stack(thresholds)}


def pixel_scores(predicted: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """Pixel precision, recall, F1 and IoU of a binary map against another (boolean arrays of one shape)."""
    hits = float(np.count_nonzero(predicted & truth))
    said, real = float(np.count_nonzero(predicted)), float(np.count_nonzero(truth))
    union = said + real - hits
    precision = hits / said if said else float(real == 0)
    recall = hits / real if real else float(said == 0)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "iou": hits / union if union else 1.0}


def map_fidelity(reference: np.ndarray, quantized: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """How a quantized detector's probability maps [N, 1, H, W] keep the reference's: cosine (all pages as one
    vector), pixel F1 / IoU of the maps binarized at 0.3 against the reference's, and pixel F1 of each against
    the ground-truth text regions [N, H, W]."""
    ref, art = reference.astype(np.float64).ravel(), quantized.astype(np.float64).ravel()
    cosine = float(ref @ art / (np.linalg.norm(ref) * np.linalg.norm(art) or 1.0))
    ref_bin, art_bin, real = reference[:, 0] > BINARIZE_AT, quantized[:, 0] > BINARIZE_AT, truth > 0.5
    vs_reference = pixel_scores(art_bin, ref_bin)
    return {
        "cosine": cosine,
        "f1_vs_reference": vs_reference["f1"],
        "iou_vs_reference": vs_reference["iou"],
        "f1_vs_truth": pixel_scores(art_bin, real)["f1"],
        "reference_f1_vs_truth": pixel_scores(ref_bin, real)["f1"],
    }
