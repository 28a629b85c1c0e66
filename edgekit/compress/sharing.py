"""Weight sharing (Deep Compression, stage 2): per-layer k-means of the non-zero weights, centroid fine-tuning.

Zeros stay zero and are no cluster's member, so the pruning mask survives. The k-means is 1-D and numpy;
fine-tuning (PyTorch) sums each weight's gradient into its centroid, as the paper does.
"""

from __future__ import annotations

import copy

import numpy as np

from edgekit.calibration import Samples
from edgekit.compress import PruneOptions, StageReport
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


def cluster_torch(module, options: PruneOptions, train: Samples | None) -> tuple[object, StageReport]:
    """Share the weights of every Conv/Linear layer (k centroids each); optionally fine-tune the centroids."""
    import torch

    from edgekit.compress.torch_prune import count, prunable

    model = copy.deepcopy(module).eval()
    before = count(model)
    books = {}
    for name, layer in prunable(model):
        weight = layer.weight.detach().cpu().numpy()
        shared, centroids, assignment = share_layer(weight, options.clusters, options.init)
        with torch.no_grad():
            layer.weight.copy_(torch.from_numpy(shared))
        books[name] = (torch.from_numpy(centroids.copy()), torch.from_numpy(assignment))
    notes = [f"{options.clusters} shared values per layer (k-means, {options.init} initialisation); zeros kept out of the clusters"]
    if options.epochs and train is not None:
        finetune_centroids(model, books, train, options.epochs, options.learning_rate, options.seed)
        notes.append(f"centroids fine-tuned {options.epochs} epoch(s), gradients summed per cluster")
    layers = [
        {
            "layer": name,
            "clusters": int(len(torch.unique(layer.weight[layer.weight != 0]))),
            "sparsity": float((layer.weight == 0).float().mean()),
            "parameters": layer.weight.numel(),
        }
        for name, layer in prunable(model)
    ]
    after = count(model)
    return model, StageReport("cluster", before[0], after[0], after[1], layers=layers, notes=notes)


def finetune_centroids(model, books: dict, samples: Samples, epochs: int, learning_rate: float, seed: int, batch: int = 128) -> None:
    """Train the shared centroids (gradient of a centroid = sum over its weights) and the unshared parameters."""
    import torch

    from edgekit.compress.torch_prune import labelled_batches, prunable

    layers = dict(prunable(model))
    centroids = {name: torch.nn.Parameter(c.clone()) for name, (c, _) in books.items()}
    shared = {id(layers[name].weight) for name in books}
    others = [p for p in model.parameters() if id(p) not in shared]
    optimizer = torch.optim.AdamW([*others, *centroids.values()], lr=learning_rate, weight_decay=0)
    model.train()
    for _, inputs, labels in labelled_batches(samples, epochs, seed, batch):
        loss = torch.nn.functional.cross_entropy(model(inputs), labels)
        optimizer.zero_grad()
        for layer in layers.values():
            layer.weight.grad = None
        loss.backward()
        for name, (_, assignment) in books.items():
            members = assignment >= 0
            grad = layers[name].weight.grad[members]
            centroids[name].grad = torch.zeros_like(centroids[name]).index_add_(0, assignment[members], grad)
        optimizer.step()
        _write_back(layers, books, centroids)
    model.eval()


def _write_back(layers: dict, books: dict, centroids: dict) -> None:
    import torch

    with torch.no_grad():
        for name, (_, assignment) in books.items():
            weight = layers[name].weight
            members = assignment >= 0
            weight[members] = centroids[name][assignment[members]].to(weight.dtype)
