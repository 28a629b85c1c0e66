"""Channel orders a conversion recorded (pair-safe int8 reorders channels: backends.onnx.channel_order), read back:
which tensors were reordered and their values in the source model's order, for `edgekit debug`."""

from __future__ import annotations

import numpy as np


def restore(value: np.ndarray, order: list[int]) -> np.ndarray:
    """A reordered tensor's value in its original channel order (channels on axis 1)."""
    inverse = np.argsort(np.asarray(order))
    return np.take(value, inverse, axis=1)


def orders_by_tensor(notes: dict | None) -> dict[str, list[int]]:
    """{tensor name: its order} from reorder's notes (as recorded in an artifact's provenance)."""
    return {t: space["order"] for space in (notes or {}).get("spaces", []) for t in space["tensors"]}
