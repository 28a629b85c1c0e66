"""Pair-safe u8 x s8 weights for x86 without VNNI (quantization.pair_safe); the kernel side of it is checked on
ONNX Runtime's own AVX2 kernel in tests/unit/test_isa_emulated.py."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.quantization import pair_safe
from edgekit.quantization.rounding import best_codes, output_error


@pytest.mark.parametrize(
    "op_type, shape, group, expected",
    [
        ("Conv", (64, 32, 1, 1), 1, "pairs"),  # pointwise: K is the input channels
        ("Conv", (32, 3, 3, 3), 1, "narrow"),  # a stem: K is im2col's order, kept to 7 bits
        ("Conv", (64, 8, 3, 3), 8, "narrow"),  # grouped, not depthwise
        ("Conv", (96, 1, 3, 3), 96, None),  # depthwise: a widening kernel, cannot saturate
        ("Gemm", (1000, 1280), 1, "pairs"),
        ("MatMul", (384, 384), 1, "pairs"),
        ("MatMul", (4, 384, 384), 1, None),
    ],
)
def test_which_weights_are_kept_pair_safe(op_type, shape, group, expected):
    assert pair_safe.kind(op_type, shape, group) == expected


def test_pair_scales_round_within_the_limit_and_are_finer_than_7_bits():
    rng = np.random.default_rng(0)
    rows = rng.standard_t(3, (64, 96)) * 0.05  # heavy tails: a few large weights per channel, as trained layers have
    scale = pair_safe.scales(rows, "pairs")[:, None]
    codes = np.round(rows / scale).astype(np.int8)
    assert pair_safe.worst_pair(codes) <= pair_safe.LIMIT
    seven_bit = np.abs(rows).max(1, keepdims=True) / 64
    assert np.all(scale <= seven_bit * 128 / 127) and np.median(seven_bit / scale) > 1.3  # finer steps than reduce_range
    narrow = np.round(rows / pair_safe.scales(rows, "narrow")[:, None])
    assert np.abs(narrow).max() <= 64


def test_project_moves_only_the_pairs_over_the_limit():
    codes = np.array([[127, 127, 100, -40, 5, 7, -90], [-128, 0, 64, 65, 0, 0, 128]], np.int16)
    projected = pair_safe.project(codes)
    assert pair_safe.worst_pair(projected) <= pair_safe.LIMIT
    assert projected.tolist() == [[1, 127, 88, -40, 5, 7, -90], [-128, 0, 64, 64, 0, 0, 128]]  # the larger of each pair gives


def test_the_fit_keeps_every_pair_within_the_limit_and_still_lowers_the_error():
    rng = np.random.default_rng(1)
    weights = rng.normal(0, 0.1, (16, 64))
    weights[:, :24] = np.sign(weights[:, :24]) * rng.uniform(0.29, 0.3, (16, 24))  # pairs at the limit: a move out crosses it
    patches = rng.normal(0.5, 0.3, (8192, 64))
    gram = patches.T @ patches / len(patches)
    scale = pair_safe.scales(weights, "pairs")[:, None] * 0.98  # the largest pairs of w / scale sum past the limit
    zero = np.zeros((16, 1))
    nearest = pair_safe.project(np.round(weights / scale).astype(np.int8))
    fitted = best_codes(weights, nearest, scale, zero, gram, (-127, 127), pairs=True)
    assert pair_safe.worst_pair(fitted) <= pair_safe.LIMIT
    assert output_error(weights, fitted, scale, zero, gram) < 0.5 * output_error(weights, nearest, scale, zero, gram)
    unconstrained = best_codes(weights, nearest, scale, zero, gram, (-127, 127))
    assert pair_safe.worst_pair(unconstrained) > pair_safe.LIMIT  # what the constraint prevents
