"""Image preprocessing given as `key=value,...` or a small YAML/JSON file."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from edgekit.artifact import TensorSpec
from edgekit.errors import EdgekitError

KEYS = "resize, crop, scale, mean, std, order (rgb|bgr), layout (nchw|nhwc), dtype"


@dataclass(frozen=True)
class Preprocess:
    """Resize the shorter side, center-crop, scale, normalise, order channels, lay out, cast."""

    resize: int | None = None
    crop: tuple[int, int] | None = None
    scale: float = 1 / 255
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)
    order: str = "rgb"
    layout: str = "nchw"
    dtype: str = "float32"
    channels: int = 3

    @classmethod
    def parse(cls, text: str | None, spec: TensorSpec) -> Preprocess:
        """From flags or a file; unset keys follow the model input (size, layout, channels, dtype)."""
        given = _read_settings(text)
        unknown = set(given) - set(cls.__dataclass_fields__)
        if unknown:
            raise EdgekitError(f"unknown preprocessing key(s) {sorted(unknown)}", hint=f"known keys: {KEYS}")
        base = _defaults_for(spec)
        try:
            return cls(**{**base, **{k: _coerce(k, v) for k, v in given.items()}})._checked()
        except (TypeError, ValueError) as exc:
            raise EdgekitError(f"bad preprocessing setting: {exc}", hint=f"known keys: {KEYS}") from None

    def _checked(self) -> Preprocess:
        """Values that parse but cannot work (found by fuzzing: scale=0/0, std=0, crop=0x0)."""
        sizes = [self.resize or 1, *(self.crop or (1, 1))]
        if any(v <= 0 for v in sizes):
            raise ValueError(f"sizes must be positive: resize={self.resize}, crop={self.crop}")
        if self.channels not in (1, 3):
            raise ValueError(f"channels={self.channels} (1 or 3)")
        numbers = (self.scale, *self.mean, *self.std)
        if not all(np.isfinite(numbers)) or not all(self.std):
            raise ValueError(f"scale, mean and std must be finite and std non-zero: {numbers}")
        if len(self.mean) not in (1, self.channels) or len(self.std) not in (1, self.channels):
            raise ValueError(f"mean/std need 1 or {self.channels} values")
        np.dtype(self.dtype)
        return self

    def apply(self, image) -> np.ndarray:
        """PIL image -> one preprocessed array (no batch axis)."""
        from PIL import Image

        image = image.convert("L" if self.channels == 1 else "RGB")
        if self.resize:
            w, h = image.size
            ratio = self.resize / min(w, h)
            image = image.resize((max(1, round(w * ratio)), max(1, round(h * ratio))), Image.BILINEAR)
        if self.crop:
            image = _center_crop(image, self.crop)
        array = np.asarray(image, np.float32).reshape(image.size[1], image.size[0], self.channels) * self.scale
        array = (array - np.asarray(self.mean, np.float32)) / np.asarray(self.std, np.float32)
        if self.order == "bgr":
            array = array[..., ::-1]
        if self.layout == "nchw":
            array = array.transpose(2, 0, 1)
        return np.ascontiguousarray(array).astype(self.dtype)

    def describe(self) -> dict:
        return asdict(self)


def _read_settings(text: str | None) -> dict:
    if not text:
        return {}
    path = Path(text)
    if path.is_file():
        import yaml

        data = yaml.safe_load(path.read_text()) if path.suffix in (".yaml", ".yml") else json.loads(path.read_text())
        if not isinstance(data, dict):
            raise EdgekitError(f"{path} must hold a mapping of preprocessing keys", hint=f"known keys: {KEYS}")
        return data
    pairs = [p.split("=", 1) for p in text.split(",") if p.strip()]
    if any(len(p) != 2 for p in pairs):
        raise EdgekitError(
            f"preprocessing '{text}' is not key=value,...", hint="e.g. resize=256,crop=224,mean=0.485/0.456/0.406,std=0.229/0.224/0.225"
        )
    return {k.strip(): v.strip() for k, v in pairs}


def _coerce(key: str, value):
    if key in ("mean", "std"):
        return tuple(float(v) for v in (value if isinstance(value, (list, tuple)) else str(value).split("/")))
    if key == "crop":
        parts = value if isinstance(value, (list, tuple)) else str(value).lower().split("x")
        return (int(parts[0]), int(parts[-1]))
    if key in ("resize", "channels"):
        return int(value)
    if key == "scale":
        return float(eval_fraction(str(value)))
    if key in ("order", "layout") and str(value).lower() not in ("rgb", "bgr", "nchw", "nhwc"):
        raise ValueError(f"{key}={value}")
    return str(value).lower()


def eval_fraction(text: str) -> float:
    """'1/255' or '0.0039' -> float."""
    num, _, den = text.partition("/")
    if den and float(den) == 0:
        raise ValueError(f"{text} divides by zero")
    return float(num) / float(den) if den else float(num)


def _defaults_for(spec: TensorSpec) -> dict:
    shape = spec.shape
    nhwc = len(shape) == 4 and shape[-1] in (1, 3)
    h, w, c = (shape[1], shape[2], shape[3]) if nhwc else (shape[2], shape[3], shape[1]) if len(shape) == 4 else (None, None, 3)
    size = (h, w) if isinstance(h, int) and isinstance(w, int) else None
    return {
        "resize": min(size) if size else None,
        "crop": size,
        "layout": "nhwc" if nhwc else "nchw",
        "channels": c if isinstance(c, int) else 3,
        "dtype": spec.dtype,
    }


def _center_crop(image, size: tuple[int, int]):
    h, w = size
    left, top = (image.size[0] - w) // 2, (image.size[1] - h) // 2
    return image.crop((left, top, left + w, top + h))
