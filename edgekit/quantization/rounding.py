"""Data-aware int8 weight rounding, backend-neutral (numpy): the codes of a layer's weights chosen for the error of its
output, not of the weights.

Round-to-nearest is not the best int8 weight for a layer: what matters is the error of the layer's
output, `(W_q - W) x`, over the inputs it sees. With the input's second moment `G = E[x x^T]` (the
patches of a convolution, the rows of a Gemm/MatMul, measured over calibration samples), each output
channel's error is `d G d^T` (`d` its row of W_q - W); `best_codes` moves single codes to their other
grid neighbour while that lowers the error (a greedy AdaRound, Nagel et al. 2020, without training).
ONNX's QDQ pass (backends.onnx.int8_rounding) and PT2E's (backends.torch.pt2e_weights) measure G their way
and call it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgekit.quantization import pair_safe

SAMPLES = 16  # calibration samples the input statistics are measured on
POSITIONS = 1024  # output positions (patches) sampled per sample for a convolution's G
DAMPING = 0.01  # G + 1% of its mean diagonal: keeps the fit off directions the samples did not cover
MAX_ROUNDS = 256  # moves per channel at most


@dataclass
class LayerStats:
    """One layer's input statistics: G (K x K, or C x K x K for a depthwise conv) and the mean input."""

    gram: np.ndarray
    mean: np.ndarray
    rows: int = 0  # input rows (patches) G was summed over


def best_codes(
    weights: np.ndarray, codes: np.ndarray, scale: np.ndarray, zero: np.ndarray, gram: np.ndarray, bounds, pairs: bool = False
) -> np.ndarray:
    """Codes (C x K) near `codes` that lower each channel's output error d G d^T, d = (q - zero) * scale - w,
    one code moved by one step per channel and round, while a move lowers it. `pairs`: the codes start from,
    and every move keeps to, the pair limit of quantization.pair_safe."""
    if pairs:
        codes = pair_safe.project(codes)
    q = codes.astype(np.float64)
    d = (q - zero) * scale - weights
    gram = gram + DAMPING * _mean_diagonal(gram)
    per_channel = gram.ndim == 3
    grad = np.einsum("ck,ckj->cj", d, gram) if per_channel else d @ gram
    diag = np.einsum("ckk->ck", gram) if per_channel else np.broadcast_to(np.diag(gram), d.shape)
    active = np.arange(len(q))
    for _ in range(min(2 * q.shape[1], MAX_ROUNDS)):
        step = np.where(d[active] > 0, -1.0, 1.0)  # towards the other grid neighbour of w
        moved = step * scale[active]
        gain = 2 * moved * grad[active] + moved * moved * diag[active]
        gain[(q[active] + step < bounds[0]) | (q[active] + step > bounds[1])] = np.inf
        if pairs:
            gain[np.abs(q[active] + step) + pair_safe.partner_magnitude(q[active]) > pair_safe.LIMIT] = np.inf
        best = gain.argmin(1)
        picked = np.arange(len(active))
        improves = gain[picked, best] < -1e-12 * max(float(np.abs(grad).max()), 1e-30)
        if not improves.any():
            break
        r, k, delta = active[improves], best[improves], moved[picked[improves], best[improves]]
        q[r, k] += step[picked[improves], best[improves]]
        d[r, k] += delta
        grad[r] += delta[:, None] * (gram[r, k] if per_channel else gram[k])
        active = r  # a channel no move improves is done
    return q.astype(codes.dtype)


def _mean_diagonal(gram: np.ndarray) -> np.ndarray:
    if gram.ndim == 3:
        return np.einsum("ckk->c", gram)[:, None, None] / gram.shape[1] * np.eye(gram.shape[1])
    return np.trace(gram) / len(gram) * np.eye(len(gram))


def output_error(weights, codes, scale, zero, gram) -> float:
    """Sum over channels of d G d^T for these codes."""
    d = (codes.astype(np.float64) - zero) * scale - weights
    product = np.einsum("ck,ckj->cj", d, gram) if gram.ndim == 3 else d @ gram
    return float((product * d).sum())
