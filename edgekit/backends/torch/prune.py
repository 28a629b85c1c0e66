"""The PyTorch pruner (the registry names it): each method of a chain in turn, weight sharing with fine-tuned
centroids, Deep Compression's storage table, the result saved as a .pt2 exported program."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from edgekit.artifact import TensorSpec
from edgekit.backends.torch.loader import batch_dynamic_shapes, example_tensors
from edgekit.backends.torch.prune_methods import channel_prune, count, labelled_batches, lowrank_factorize, magnitude_prune, prunable
from edgekit.calibration import Samples, load_samples
from edgekit.conversion import load_for_conversion
from edgekit.errors import EdgekitError
from edgekit.fileio import atomic_output
from edgekit.metrics.coding import int8_weights, storage_table
from edgekit.metrics.compare import accuracy_percent
from edgekit.pruning import PruneOptions, StageReport, method_chain
from edgekit.pruning.sharing import share_layer
from edgekit.pruning.stages import STAGE_NAMES, chained


def prune_torch(source, options, out, inputs, data, finetune_data) -> StageReport:
    """The PyTorch pruner (the registry names it): each method of the chain in turn, saved as .pt2."""
    module, specs = load_for_conversion(source, inputs)
    calibration = load_samples(data, 512, 0, None, specs) if data else None
    train = load_samples(finetune_data, None, 0, None, specs) if finetune_data else None
    if options.epochs and train is None:
        raise EdgekitError("--epochs needs labelled training data", hint="pass --finetune DATA with a `labels` array")
    example = example_tensors(specs, 1)
    example = example[0] if len(example) == 1 else example
    model, snapshots, reports = module, [("original", module)], []
    for method in method_chain(options.method):
        model, report = _stage(model, replace(options, method=method), example, calibration, train)
        snapshots.append((STAGE_NAMES[method], model))
        reports.append(report)
    save_exported(model, specs, out)
    combined = chained(options.method, reports)
    combined.storage = storage_rows(snapshots, load_samples(data, None, 0, None, specs) if data else None)
    return combined


def _stage(model, options, example, calibration, train):
    if options.method == "magnitude":
        return magnitude_prune(model, options, train)
    if options.method == "cluster":
        return cluster_torch(model, options, train)
    if options.method == "channels":
        return channel_prune(model, options, example, calibration, train)
    return lowrank_factorize(model, options, example, train)


def storage_rows(snapshots: list[tuple[str, object]], samples) -> list[dict]:
    """Deep Compression's storage table for each (stage, module), plus the last stage's weights in int8; torch accuracy on `samples`."""
    rows = []
    for stage, model in snapshots:
        weights, others = _weights(model)
        rows.append({"stage": stage, **storage_table(weights, others), "accuracy": torch_accuracy(model, samples)})
    weights, others = _weights(snapshots[-1][1])
    int8 = storage_table({n: int8_weights(w) for n, w in weights.items()}, others)
    rows.append({"stage": "int8", **int8, "accuracy": None})  # accuracy: the int8 ONNX row of the stage comparison
    return rows


def _weights(model) -> tuple[dict, dict]:
    """(Conv/Linear weights, every other parameter) as numpy arrays."""
    kernels = {f"{n}.weight": m.weight for n, m in prunable(model)}
    ids = {id(w) for w in kernels.values()}
    others = {n: p for n, p in model.named_parameters() if id(p) not in ids}
    return {n: w.detach().cpu().numpy() for n, w in kernels.items()}, {n: p.detach().cpu().numpy() for n, p in others.items()}


def torch_accuracy(model, samples: Samples | None, batch: int = 500) -> float | None:
    """Top-1 accuracy (%) of `model` on labelled `samples`; None without labels."""
    if samples is None or samples.labels is None:
        return None
    model.eval()
    with torch.no_grad():
        logits = [model(*[torch.from_numpy(v) for v in feeds.values()]).numpy() for feeds in samples.batches(batch)]
    return accuracy_percent(np.concatenate(logits), samples.labels)


def save_exported(model, specs: list[TensorSpec], out: Path) -> None:
    """Save as a .pt2 exported program with a dynamic batch axis (loadable by edgekit and torch.export.load)."""
    program = torch.export.export(model.eval(), example_tensors(specs, 2), dynamic_shapes=batch_dynamic_shapes(model, specs))
    with atomic_output(Path(out)) as tmp:
        torch.export.save(program, str(tmp))


def cluster_torch(module, options: PruneOptions, train: Samples | None) -> tuple[object, StageReport]:
    """Share the weights of every Conv/Linear layer (k centroids each); optionally fine-tune the centroids."""

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

    with torch.no_grad():
        for name, (_, assignment) in books.items():
            weight = layers[name].weight
            members = assignment >= 0
            weight[members] = centroids[name][assignment[members]].to(weight.dtype)
