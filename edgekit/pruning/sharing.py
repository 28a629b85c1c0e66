"""Weight sharing (Deep Compression, stage 2): per-layer 1-D k-means of the non-zero weights, in numpy.

Zeros stay zero and are no cluster's member, so the pruning mask survives. Each framework's pruner shares its layers'
weights with `share_layer` (and PyTorch's fine-tunes the centroids: edgekit.backends.torch.prune).
"""

from __future__ import annotations

import numpy as np

from edgekit.errors import EdgekitError

INITS = ("linear", "density")


def initial_centroids(values: np.ndarray, k: int, init: str) -> np.ndarray:
    """Linear: evenly spaced between min and max (the paper's best); density: evenly spaced on the CDF."""
    if init == "linear":
        return np.linspace(values.min(), values.max(), k)
    if init == "density":
        return np.quantile(values, (np.arange(k) + 0.5) / k)
    raise EdgekitError(f"unknown centroid initialisation '{init}'", hint=f"choose one of: {', '.join(INITS)}")


def kmeans_1d(values: np.ndarray, k: int, init: str = "linear", iterations: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """(centroids [<=k], assignment per value) by Lloyd's algorithm; empty clusters are dropped."""
    values = np.asarray(values, np.float64).ravel()
    centroids = np.unique(initial_centroids(values, min(k, len(np.unique(values))), init))
    for _ in range(iterations):
        assignment = _nearest(values, centroids)
        sums = np.bincount(assignment, values, len(centroids))
        counts = np.bincount(assignment, minlength=len(centroids))
        updated = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
        updated = updated[counts > 0]
        if len(updated) == len(centroids) and np.allclose(updated, centroids, rtol=0, atol=1e-12):
            break
        centroids = np.sort(updated)
    return centroids, _nearest(values, centroids)


def _nearest(values: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Index of the nearest of the sorted `centroids` for every value."""
    edges = (centroids[1:] + centroids[:-1]) / 2
    return np.searchsorted(edges, values)


def share_layer(weight: np.ndarray, k: int, init: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(shared weight, centroids, assignment with -1 for zeros): the non-zeros replaced by their centroid."""
    mask = weight != 0
    assignment = np.full(weight.shape, -1, np.int64)
    if not mask.any():
        return weight.copy(), np.zeros(0, weight.dtype), assignment
    centroids, members = kmeans_1d(weight[mask], k, init)
    centroids = np.where(centroids == 0, np.finfo(np.float32).tiny, centroids)  # a centroid of 0 would drop members from the mask
    assignment[mask] = members
    shared = np.zeros_like(weight)
    shared[mask] = centroids[members].astype(weight.dtype)
    return shared, centroids.astype(weight.dtype), assignment
