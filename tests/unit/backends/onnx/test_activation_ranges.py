"""L2-optimal activation ranges (backends.onnx.activation_ranges): the range that minimises int8's squared error."""

from __future__ import annotations

import numpy as np

from edgekit.backends.onnx.activation_ranges import BINNED, BINS, best_range, sampled


def _histogram(values: np.ndarray) -> tuple[float, float, np.ndarray]:
    lowest, highest = float(values.min()), float(values.max())
    counts, _ = np.histogram(values, BINS, (lowest, highest))
    return lowest, highest, counts


def _squared_error(values: np.ndarray, a: float, b: float, levels: int = 256) -> float:
    step = (b - a) / (levels - 1)
    return float(((np.round((np.clip(values, a, b) - a) / step) * step + a - values) ** 2).mean())


def test_a_few_outliers_are_clipped_and_the_error_falls():
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.laplace(0, 1, 1_000_000), [-60.0, 45.0]])  # a linear layer's output: heavy tails, two extremes
    a, b = best_range(*_histogram(values))
    assert -30 < a < -5 and 5 < b < 20  # the extremes do not set the step
    assert _squared_error(values, a, b) < 0.35 * _squared_error(values, values.min(), values.max())


def test_a_bounded_activation_keeps_its_range():
    rng = np.random.default_rng(1)
    values = np.clip(rng.normal(2, 2.5, 200_000), 0, 6)  # ReLU6: mass at 0 and 6, nothing beyond
    a, b = best_range(*_histogram(values))
    assert a == 0.0 and b > 0.97 * 6


def test_symmetric_ranges_stay_symmetric():
    rng = np.random.default_rng(2)
    values = np.concatenate([rng.laplace(1, 1, 1_000_000), [40.0]])
    a, b = best_range(*_histogram(values), symmetric=True)
    assert a == -b and 5 < b < 20


def test_a_large_tensor_is_binned_at_a_prime_stride_that_keeps_its_error():
    rng = np.random.default_rng(3)
    batches = [rng.laplace(0, 1, (8, 32, 64, 64)).astype(np.float32) for _ in range(16)]  # 4x BINNED values in all
    for batch in batches:
        batch[:, 5] *= 4  # one channel wider: a stride in step with the layout would miss it or see only it
    whole = np.concatenate([b.ravel() for b in batches])
    kept = [sampled(b.ravel(), i, len(batches)) for i, b in enumerate(batches)]
    assert BINNED // 2 < sum(k.size for k in kept) <= BINNED
    assert kept[0][0] == batches[0].flat[0] and kept[1][0] == batches[1].flat[1]  # the offset moves from batch to batch
    assert sampled(batches[0].ravel(), 0, 1).size == batches[0].size  # one batch under BINNED: binned whole
    lowest, highest = float(whole.min()), float(whole.max())
    exact = best_range(lowest, highest, np.histogram(whole, BINS, (lowest, highest))[0])
    estimate = best_range(lowest, highest, np.histogram(np.concatenate(kept), BINS, (lowest, highest))[0])
    assert _squared_error(whole, *estimate) < 1.01 * _squared_error(whole, *exact) < 0.7 * _squared_error(whole, lowest, highest)
