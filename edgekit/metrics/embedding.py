"""Embeddings, judged as retrieval uses them: does each sample keep its nearest neighbours?

recall@k: the share of each sample's k nearest neighbours (cosine, itself left out) under the reference that are
still among its k nearest under the artifact; the rank correlation of all pairwise similarities; and, with class
labels, Recall@1 (a sample's nearest neighbour has its class), the metric-learning benchmarks' measure.
"""

from __future__ import annotations

import numpy as np

NEIGHBOURS = 10


def _unit(vectors: np.ndarray) -> np.ndarray:
    """[N, ...] as unit rows [N, D] (token vectors [N, T, D] are averaged over the tokens first)."""
    v = vectors.astype(np.float64)
    v = v.mean(1) if v.ndim == 3 else v.reshape(len(v), -1)
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


def _similarities(vectors: np.ndarray) -> np.ndarray:
    unit = _unit(vectors)
    sims = unit @ unit.T
    np.fill_diagonal(sims, -np.inf)
    return sims


def _nearest(sims: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-sims, axis=1, kind="stable")[:, :k]


def _ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values))
    return ranks


def embedding_scores(reference: np.ndarray, artifact: np.ndarray, labels: np.ndarray | None, k: int = NEIGHBOURS) -> dict:
    from edgekit.metrics.compare import bootstrap_ci95

    k = max(1, min(k, len(reference) - 1))
    ref_sims, art_sims = _similarities(reference), _similarities(artifact)
    ref_nn, art_nn = _nearest(ref_sims, k), _nearest(art_sims, k)
    kept = np.array([len(np.intersect1d(r, a)) / k for r, a in zip(ref_nn, art_nn, strict=True)])
    upper = np.triu_indices(len(reference), 1)
    rank_corr = float(np.corrcoef(_ranks(ref_sims[upper]), _ranks(art_sims[upper]))[0, 1]) if len(upper[0]) > 1 else 1.0
    metric = f"recall_at_{k}"
    scores = {metric: float(kept.mean()), f"{metric}_ci95": bootstrap_ci95(kept), "k": k, "rank_correlation": rank_corr}
    return {"metric": metric, "vs_reference": scores, "vs_labels": _recall_at_1(ref_nn, art_nn, labels), "per_image": kept.tolist()}


def _recall_at_1(ref_nn: np.ndarray, art_nn: np.ndarray, labels: np.ndarray | None) -> dict | None:
    """Recall@1 against class labels on both sides, its drop in points and the paired interval."""
    from edgekit.metrics.compare import bootstrap_ci95

    if labels is None or labels.ndim != 1:
        return None
    ref_ok, art_ok = labels[ref_nn[:, 0]] == labels, labels[art_nn[:, 0]] == labels
    return {
        "metric": "recall_at_1",
        "reference": float(ref_ok.mean()),
        "artifact": float(art_ok.mean()),
        "drop_points": float(100 * (ref_ok.mean() - art_ok.mean())),
        "drop_ci95": bootstrap_ci95(100.0 * (ref_ok.astype(np.float64) - art_ok)),
        "samples": len(labels),
    }
