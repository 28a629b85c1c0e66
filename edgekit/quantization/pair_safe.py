"""u8 x s8 int8 weights that x86 without VNNI multiplies without saturating.

ONNX Runtime's u8 x s8 GEMM on AVX2 (and SSSE3/AVX-512BW without VNNI) packs the weights in groups of four
along K and multiplies with VPMADDUBSW, which adds the products of each adjacent pair (k = 2j, 2j+1) into a
saturating int16: a_2j w_2j + a_2j+1 w_2j+1 with activations up to 255. The sum cannot clip when
|w_2j| + |w_2j+1| <= 128 (255 x 128 = 32,640 <= 32,767). ONNX Runtime's `reduce_range` keeps every weight to
7 bits (|w| <= 64), which meets that with half the resolution; most pairs hold one large weight and one
small, so a per-channel scale set by the largest pair sum (not twice the largest weight) keeps about 1.5x
finer steps (EfficientNet-Lite0 on an AVX2 EPYC: 96.67% top-1 agreement with fp32 against 93.50% with
7-bit weights; u8 x u8, which cannot saturate either, runs 3x slower than fp32 there).

Which weights: a 1x1 Conv, a Gemm and a MatMul multiply along their input channels, so their pairs are
adjacent input channels; a larger or grouped Conv's K order is the kernel's own (im2col), so those keep to
7 bits; a depthwise Conv runs in a widening kernel (int16 x int16 into int32) that cannot saturate.
"""

from __future__ import annotations

import numpy as np

LIMIT = 128  # |w_2j| + |w_2j+1| at most: 255 x 128 fits VPMADDUBSW's int16
NARROW = (-64, 64)  # 7-bit codes: every pair is within LIMIT whatever the K order


def kind(op_type: str, weight_shape, group: int) -> str | None:
    """'pairs' (adjacent input channels pair up), 'narrow' (7-bit codes) or None (a kernel that cannot saturate)."""
    if op_type in ("Gemm", "MatMul"):
        return "pairs" if len(weight_shape) == 2 else None
    if op_type != "Conv" or len(weight_shape) < 3:
        return None
    if group > 1:
        return None if group == weight_shape[0] and weight_shape[1] == 1 else "narrow"  # depthwise: widening kernel
    return "pairs" if all(k == 1 for k in weight_shape[2:]) else "narrow"


def scales(rows: np.ndarray, layer_kind: str) -> np.ndarray:
    """Per-row (output channel) scales whose rounded codes meet the pair limit: the largest pair sum over 127
    (one step of headroom for rounding), or the largest weight over 64 for 7-bit codes."""
    rows = np.abs(np.asarray(rows, np.float64))
    if layer_kind == "pairs":
        largest = pair_sums(rows).max(1) / (LIMIT - 1)
    else:
        largest = rows.max(1) / NARROW[1]
    return np.maximum(largest, np.finfo(np.float32).tiny)


def project(codes: np.ndarray) -> np.ndarray:
    """Codes (C x K) whose adjacent pairs meet the limit: the larger code of a pair over it moves towards zero."""
    c = codes.astype(np.int64)
    even, odd = c[:, 0::2], np.zeros_like(c[:, 0::2])
    odd[:, : c.shape[1] // 2] = c[:, 1::2]
    over = np.maximum(np.abs(even) + np.abs(odd) - LIMIT, 0)
    shrink_even = np.abs(even) >= np.abs(odd)
    even = even - np.sign(even) * np.where(shrink_even, over, 0)
    odd = odd - np.sign(odd) * np.where(shrink_even, 0, over)
    c[:, 0::2], c[:, 1::2] = even, odd[:, : c.shape[1] // 2]
    return c.astype(codes.dtype)


def partner_magnitude(codes: np.ndarray) -> np.ndarray:
    """|code| of each code's pair partner (0 for an unpaired last code)."""
    c = np.abs(codes.astype(np.int64))
    partner = np.zeros_like(c)
    k = c.shape[1] - c.shape[1] % 2
    partner[:, 0:k:2], partner[:, 1:k:2] = c[:, 1:k:2], c[:, 0:k:2]
    return partner


def worst_pair(codes: np.ndarray) -> int:
    """The largest |w_2j| + |w_2j+1| in the codes (C x K)."""
    return int(pair_sums(np.abs(codes.astype(np.int64))).max(initial=0))


def pair_sums(rows: np.ndarray) -> np.ndarray:
    """Per row, the sums of adjacent pairs along K (k = 2j, 2j+1; an odd last column alone)."""
    even, odd = rows[:, 0::2], np.zeros_like(rows[:, 0::2])
    odd[:, : rows.shape[1] // 2] = rows[:, 1::2]
    return even + odd
