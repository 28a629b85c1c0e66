"""Compression stages for Keras models: magnitude pruning and low-rank factorization of Dense layers.

Structured channel pruning needs a dependency graph that Keras does not offer; it is PyTorch-only here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgekit.errors import EdgekitError
from edgekit.fileio import atomic_output
from edgekit.pruning import PruneOptions, StageReport, kept_rank, method_chain
from edgekit.source import ModelSource


def prune_keras(source: ModelSource, options: PruneOptions, out: Path, inputs, data: str | None, finetune_data: str | None) -> StageReport:
    """The Keras pruner (the registry names it); `inputs` are not needed: a Keras model records its own."""
    from edgekit.backends.keras.loader import KerasModel

    chain = method_chain(options.method)
    if "channels" in chain:
        raise EdgekitError("structured channel pruning is available for PyTorch models", hint="use --method magnitude or lowrank for Keras")
    if options.epochs or options.surgery:
        raise EdgekitError(
            "fine-tuning during pruning (and centroid fine-tuning, surgery) is available for PyTorch models",
            hint="drop --epochs/--surgery, or fine-tune in Keras after pruning",
        )
    model = KerasModel(source).keras
    if model is None:
        raise EdgekitError("a SavedModel has no editable layers", hint="prune the .keras model it was exported from")
    stages = {"magnitude": _magnitude, "cluster": _cluster, "lowrank": _lowrank}
    reports = []
    for method in chain:
        model, report = stages[method](model, options)
        reports.append(report)
    with atomic_output(Path(out)) as tmp:
        model.save(str(tmp))
    if len(reports) == 1:
        return reports[0]
    return StageReport(
        options.method,
        reports[0].parameters_before,
        reports[-1].parameters_after,
        reports[-1].nonzero_after,
        layers=reports[-1].layers,
        notes=[n for r in reports for n in r.notes],
    )


def _kernels(model) -> list:
    return [layer for layer in model.layers if type(layer).__name__ in ("Conv2D", "Conv1D", "Dense", "DepthwiseConv2D")]


def _count(model) -> tuple[int, int]:
    weights = [w for w in model.get_weights()]
    return sum(w.size for w in weights), sum(int(np.count_nonzero(w)) for w in weights)


def _magnitude(model, options: PruneOptions):
    before = _count(model)
    layers = _kernels(model)
    kernels = [layer.get_weights()[0] for layer in layers]
    if options.scope == "global":
        threshold = np.quantile(np.abs(np.concatenate([k.ravel() for k in kernels])), options.sparsity)
        thresholds = [threshold] * len(kernels)
    else:
        thresholds = [np.quantile(np.abs(k), options.sparsity) for k in kernels]
    report_layers = []
    for layer, kernel, threshold in zip(layers, kernels, thresholds, strict=True):
        weights = layer.get_weights()
        weights[0] = np.where(np.abs(kernel) > threshold, kernel, 0).astype(kernel.dtype)
        layer.set_weights(weights)
        report_layers.append({"layer": layer.name, "sparsity": float((weights[0] == 0).mean()), "parameters": int(kernel.size)})
    after = _count(model)
    return model, StageReport(
        "magnitude",
        before[0],
        after[0],
        after[1],
        layers=report_layers,
        notes=["dense kernels do not skip zeros: latency is unchanged; the gain is in compressed size"],
    )


def _cluster(model, options: PruneOptions):
    """Weight sharing of every kernel (k-means of its non-zeros, zeros kept); no centroid fine-tuning in Keras."""
    from edgekit.pruning.sharing import share_layer

    before = _count(model)
    report_layers = []
    for layer in _kernels(model):
        weights = layer.get_weights()
        weights[0], centroids, _ = share_layer(weights[0], options.clusters, options.init)
        layer.set_weights(weights)
        report_layers.append({"layer": layer.name, "clusters": len(centroids), "sparsity": float((weights[0] == 0).mean())})
    after = _count(model)
    notes = [f"{options.clusters} shared values per kernel (k-means, {options.init} initialisation); zeros kept out of the clusters"]
    return model, StageReport("cluster", before[0], after[0], after[1], layers=report_layers, notes=notes)


def _lowrank(model, options: PruneOptions):
    import keras

    before = _count(model)[0]
    plans = {}
    for layer in model.layers:
        if type(layer).__name__ == "Dense":
            kernel = layer.get_weights()[0]  # [in, out]
            rank = kept_rank(kernel.T, options)
            if rank is not None:
                plans[layer.name] = rank

    def clone(layer):
        if layer.name not in plans:
            return layer.__class__.from_config(layer.get_config())
        rank = plans[layer.name]
        config = layer.get_config()
        return keras.Sequential(
            [
                keras.layers.Dense(rank, use_bias=False, name=f"{layer.name}_u"),
                keras.layers.Dense(config["units"], activation=config["activation"], use_bias=config["use_bias"], name=f"{layer.name}_v"),
            ],
            name=layer.name,
        )

    factored = keras.models.clone_model(model, clone_function=clone)
    report_layers = []
    for layer in model.layers:
        target = factored.get_layer(layer.name)
        if layer.name in plans:
            report_layers.append(_load_factors(layer, target, plans[layer.name]))
        elif layer.get_weights():
            target.set_weights(layer.get_weights())
    after = _count(factored)
    return factored, StageReport("lowrank", before, after[0], after[1], layers=report_layers)


def _load_factors(layer, target, rank: int) -> dict:
    weights = layer.get_weights()
    kernel = weights[0]  # [in, out]
    u, s, vh = np.linalg.svd(kernel, full_matrices=False)
    root = np.sqrt(s[:rank])
    first = (u[:, :rank] * root[None, :]).astype(kernel.dtype)  # [in, r]
    second = (root[:, None] * vh[:rank]).astype(kernel.dtype)  # [r, out]
    target.layers[0].set_weights([first])
    target.layers[1].set_weights([second, *weights[1:]])
    error = float(np.linalg.norm(first @ second - kernel) / np.linalg.norm(kernel))
    return {"layer": layer.name, "shape": list(kernel.shape), "rank": rank, "relative_weight_error": error}
