"""Compression stages for PyTorch modules: magnitude pruning (dynamic network surgery too), structured channel pruning,
low-rank factorization, and the fine-tuning they share."""

from __future__ import annotations

import copy

import torch

from edgekit.calibration import Samples
from edgekit.errors import EdgekitError
from edgekit.pruning import PruneOptions, StageReport, kept_rank
from edgekit.pruning.stages import class_labels, kept_channels, kept_multiple


def prunable(module) -> list[tuple[str, object]]:
    """(name, layer) of the Conv and Linear layers whose weights magnitude pruning touches."""
    return [(n, m) for n, m in module.named_modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Conv1d, torch.nn.Linear))]


def count(module) -> tuple[int, int]:
    """(parameters, non-zero parameters)."""
    params = list(module.parameters())
    return sum(p.numel() for p in params), sum(int((p != 0).sum()) for p in params)


def magnitude_masks(module, sparsity: float, scope: str) -> dict[str, object]:
    """Masks that zero the `sparsity` smallest-magnitude weights, globally or per layer."""
    layers = prunable(module)
    if scope == "global":
        magnitudes = torch.cat([m.weight.detach().abs().flatten() for _, m in layers])
        threshold = torch.quantile(magnitudes.float()[torch.randperm(len(magnitudes))[:2_000_000]], sparsity) if len(magnitudes) else 0
        return {n: (m.weight.detach().abs() > threshold) for n, m in layers}
    return {n: (m.weight.detach().abs() > torch.quantile(m.weight.detach().abs().flatten().float(), sparsity)) for n, m in layers}


def apply_masks(module, masks: dict) -> None:
    with torch.no_grad():
        for name, layer in prunable(module):
            if name in masks:
                layer.weight.mul_(masks[name].to(layer.weight.dtype))


def magnitude_prune(module, options: PruneOptions, train: Samples | None) -> tuple[object, StageReport]:
    """Unstructured magnitude pruning, optionally gradual with fine-tuning between steps."""
    model = copy.deepcopy(module).eval()
    before = count(model)
    if options.surgery:
        return _surgery_prune(model, options, train, before)
    steps = max(1, options.epochs)
    for step in range(1, steps + 1):
        target = options.sparsity * (1 - (1 - step / steps) ** 3)  # cubic schedule (Zhu & Gupta 2017)
        masks = magnitude_masks(model, target, options.scope)
        apply_masks(model, masks)
        if options.epochs and train is not None:
            finetune(model, train, 1, options.learning_rate, masks, options.seed + step)
    after = count(model)
    layers = [{"layer": n, "sparsity": float((m.weight == 0).float().mean()), "parameters": m.weight.numel()} for n, m in prunable(model)]
    notes = ["dense kernels do not skip zeros: latency is unchanged; the gain is in compressed size (and in sparse runtimes)"]
    if options.epochs:
        notes.append(f"{options.epochs} fine-tuning epoch(s) with a cubic sparsity schedule")
    return model, StageReport("magnitude", before[0], after[0], after[1], layers=layers, notes=notes)


def surgery_mask(weight, mask, cut: float, splice: float):
    """Dynamic network surgery's mask update (Guo et al. 2016): |w| < cut -> pruned, |w| > splice -> spliced back, else unchanged."""
    magnitude = weight.detach().abs()
    return torch.where(magnitude < cut, torch.zeros_like(mask), torch.where(magnitude > splice, torch.ones_like(mask), mask))


def surgery_cuts(module, sparsity: float, scope: str) -> dict[str, float]:
    """The cut `a` per layer: the magnitude below which `sparsity` of the weights lie (one value for all layers if global)."""
    layers = prunable(module)
    if scope == "global":
        magnitudes = torch.cat([m.weight.detach().abs().flatten() for _, m in layers]).float()
        cut = float(torch.quantile(magnitudes[torch.randperm(len(magnitudes))[:2_000_000]], sparsity))
        return {n: cut for n, _ in layers}
    return {n: float(torch.quantile(m.weight.detach().abs().flatten().float(), sparsity)) for n, m in layers}


def _surgery_prune(model, options: PruneOptions, train: Samples | None, before) -> tuple[object, StageReport]:
    """Prune with masks that are recomputed while fine-tuning; the dense weights keep receiving gradients."""
    if not options.epochs or train is None:
        raise EdgekitError("--surgery fine-tunes while it prunes", hint="pass --finetune DATA --epochs N")
    returned, final = surgery_finetune(model, train, options)
    after = count(model)
    layers = [
        {
            "layer": n,
            "sparsity": float((m.weight == 0).float().mean()),
            "parameters": m.weight.numel(),
            "spliced_back": int(returned[n].sum()),  # cut, then back once they grew past b
            "spliced_kept": int((returned[n] & final[n]).sum()),  # ... and in the final model
        }
        for n, m in prunable(model)
    ]
    notes = [
        f"dynamic network surgery over {options.epochs} epoch(s): masks recomputed every step for the first "
        f"{SURGERY_SHARE:.0%} of the steps (cut below a, spliced back above b = a x {1 + options.surgery_band:g}, cubic "
        "sparsity schedule), then fixed at exactly the target sparsity for the rest",
        f"{sum(x['spliced_back'] for x in layers):,} cut weights were spliced back while training "
        f"({sum(x['spliced_kept'] for x in layers):,} of them are in the final model)",
        "dense kernels do not skip zeros: latency is unchanged; the gain is in compressed size (and in sparse runtimes)",
    ]
    return model, StageReport("magnitude", before[0], after[0], after[1], layers=layers, notes=notes)


SURGERY_SHARE = 2 / 3  # of the fine-tuning steps with moving masks; the rest trains the final mask


def surgery_finetune(model, samples: Samples, options: PruneOptions, batch: int = 128) -> tuple[dict, dict]:
    """Train `model` with DNS masks, then with the final (exact-sparsity) mask; returns (weights spliced back at least once, final masks)."""
    batches = labelled_batches(samples, options.epochs, options.seed, batch)  # refuses missing labels or label sets first
    layers = dict(prunable(model))
    masks = magnitude_masks(model, options.sparsity * (1 - (1 - 1 / options.epochs) ** 3), options.scope)
    returned = {n: torch.zeros_like(m) for n, m in masks.items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=options.learning_rate, weight_decay=0)
    steps_per_epoch = -(-len(samples) // batch)
    surgery_steps, final = int(SURGERY_SHARE * options.epochs * steps_per_epoch), None
    model.train()
    for step, (epoch, inputs, labels) in enumerate(batches):
        if step == surgery_steps:  # t = 0 from here on: exactly the target sparsity, trained as plain masked fine-tuning
            final = magnitude_masks(model, options.sparsity, options.scope)
            apply_masks(model, final)
        if final is None:
            _surgery_step(model, layers, masks, optimizer, inputs, labels)
            cuts = surgery_cuts(model, options.sparsity * (1 - (1 - epoch / options.epochs) ** 3), options.scope)
            for n, layer in layers.items():
                mask = surgery_mask(layer.weight, masks[n], cuts[n], cuts[n] * (1 + options.surgery_band))
                returned[n] |= mask & ~masks[n]  # cut before, spliced back now
                masks[n] = mask
        else:
            loss = torch.nn.functional.cross_entropy(model(inputs), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            apply_masks(model, final)
    if final is None:
        final = magnitude_masks(model, options.sparsity, options.scope)
        apply_masks(model, final)
    model.eval()
    return returned, final


def _surgery_step(model, layers: dict, masks: dict, optimizer, inputs, labels) -> None:
    """Forward and backward through the masked weights; the gradient then updates every dense weight, cut or not."""
    dense = {n: layer.weight.detach().clone() for n, layer in layers.items()}
    apply_masks(model, masks)
    loss = torch.nn.functional.cross_entropy(model(inputs), labels)
    optimizer.zero_grad()
    loss.backward()
    with torch.no_grad():
        for n, layer in layers.items():
            layer.weight.copy_(dense[n])
    optimizer.step()


def channel_prune(module, options: PruneOptions, example, calibration: Samples | None, train: Samples | None) -> tuple[object, StageReport]:
    """Structured channel pruning with torch-pruning's dependency graph; BN statistics recalibrated on data."""
    import torch_pruning as tp

    model = copy.deepcopy(module).eval()
    macs_before, params_before = tp.utils.count_ops_and_params(model, example)
    ignored = _output_layers(model, example)
    round_to, why = kept_multiple(options.round_to)
    widths = _widths(model)
    pruner = tp.pruner.MetaPruner(
        model,
        example,
        importance=tp.importance.GroupMagnitudeImportance(p=2),
        pruning_ratio=options.channel_ratio,
        ignored_layers=ignored,
        global_pruning=False,
        pruning_ratio_dict=_rounded_ratios(model, widths, options.channel_ratio, round_to) if round_to > 1 else None,
    )
    pruner.step()
    with torch.no_grad():
        out = model(example)
    reference_shape = _output_shape(module, example)
    if tuple(out.shape) != reference_shape:
        raise EdgekitError(
            f"channel pruning changed the output shape {reference_shape} -> {tuple(out.shape)}",
            hint="report this model: its output layer was not protected",
        )
    notes = [f"{options.channel_ratio:.0%} of the channels of each prunable layer removed (L2 magnitude, dependency graph)", why]
    if calibration is not None:
        recalibrate_batchnorm(model, calibration)
        notes.append(f"batch-norm statistics recalibrated on {len(calibration)} samples")
    if options.epochs and train is not None:
        finetune(model, train, options.epochs, options.learning_rate, None, options.seed)
        notes.append(f"fine-tuned {options.epochs} epoch(s)")
    macs_after, params_after = tp.utils.count_ops_and_params(model.eval(), example)
    kept = _widths(model)
    layers = [{"layer": n, "channels": f"{widths[n]} -> {kept[n]}", "multiple": kept[n] % round_to == 0} for n in widths if n in kept]
    return model, StageReport(
        "channels", int(params_before), int(params_after), count(model)[1], int(macs_before), int(macs_after), layers=layers, notes=notes
    )


def _rounded_ratios(model, widths: dict[str, int], ratio: float, multiple: int) -> dict:
    """Per layer, the ratio that keeps the multiple of `multiple` nearest to (1 - ratio) of its channels (at least one
    multiple). torch-pruning keeps int(width x (1 - ratio)) channels; its own round_to rounds down, which keeps 32 of
    64 channels where 30% pruning means 45 and the nearest multiple of 16 is 48."""
    modules = dict(model.named_modules())
    ratios = {}
    for name, width in widths.items():
        ratios[modules[name]] = 1 - (kept_channels(width, ratio, multiple) + 0.5) / width  # int(width x (1 - this)) == kept
    return ratios


def _widths(model) -> dict[str, int]:
    """Output channels (features) of each Conv and Linear layer."""
    return {
        n: m.out_channels if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d)) else m.out_features
        for n, m in model.named_modules()
        if isinstance(m, (torch.nn.Conv2d, torch.nn.Conv1d, torch.nn.Linear))
    }


def _output_layers(model, example) -> list:
    """The layers producing the model's output (their out-channels are the output shape: never pruned)."""
    last = prunable(model)[-1][1] if prunable(model) else None
    return [last] if last is not None else []


def _output_shape(module, example) -> tuple:
    with torch.no_grad():
        return tuple(module.eval()(example).shape)


def recalibrate_batchnorm(model, samples: Samples, batch: int = 64) -> None:
    """Re-estimate BN running mean/var as exact averages over `samples` (weights unchanged)."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    for bn in norms:
        bn.reset_running_stats()
        bn.momentum = None  # cumulative moving average: every batch counts equally
    model.train()
    with torch.no_grad():
        for feeds in samples.batches(batch):
            model(*[torch.from_numpy(v) for v in feeds.values()])
    model.eval()


def labelled_batches(samples: Samples, epochs: int, seed: int, batch: int = 128):
    """(epoch, inputs, labels) mini-batches for fine-tuning, shuffled per epoch by a seeded generator (epochs count from 1).
    The labels are checked when it is called (class_labels), not at the first batch."""
    labels = torch.from_numpy(class_labels(samples))
    return _shuffled_batches(torch.from_numpy(next(iter(samples.arrays.values()))), labels, epochs, seed, batch)


def _shuffled_batches(inputs, labels, epochs: int, seed: int, batch: int):
    generator = torch.Generator().manual_seed(seed)
    for epoch in range(1, epochs + 1):
        order = torch.randperm(len(inputs), generator=generator)
        for start in range(0, len(inputs), batch):
            idx = order[start : start + batch]
            yield epoch, inputs[idx], labels[idx]


def finetune(model, samples: Samples, epochs: int, learning_rate: float, masks: dict | None, seed: int, batch: int = 128) -> None:
    """Cross-entropy fine-tuning on labelled samples; masks (if any) are re-applied after every step."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0)
    model.train()
    for _, inputs, labels in labelled_batches(samples, epochs, seed, batch):
        loss = torch.nn.functional.cross_entropy(model(inputs), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if masks:
            apply_masks(model, masks)
    model.eval()


def lowrank_factorize(module, options: PruneOptions, example, train: Samples | None = None) -> tuple[object, StageReport]:
    """Replace Linear layers (not the output layer) by two thinner ones from a truncated SVD; rank by energy or target compression."""
    model = copy.deepcopy(module).eval()
    before = count(model)[0]
    layers = []
    protected = set(map(id, _output_layers(model, example)))
    for name, layer in [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and id(m) not in protected]:
        rank = kept_rank(layer.weight.detach().float().numpy(), options)
        if rank is None:
            continue
        replacement, error = _factorized(layer, rank)
        _set_module(model, name, replacement)
        layers.append(
            {
                "layer": name,
                "shape": list(layer.weight.shape),
                "rank": rank,
                "relative_weight_error": error,
                "parameters": [layer.weight.numel(), rank * sum(layer.weight.shape)],
            }
        )
    notes = [f"output layer kept whole; relative output error before fine-tuning: {_output_error(module, model, example):.4f}"]
    if options.epochs and train is not None:
        finetune(model, train, options.epochs, options.learning_rate, None, options.seed)
        notes.append(f"fine-tuned {options.epochs} epoch(s); relative output error after: {_output_error(module, model, example):.4f}")
    after = count(model)[0]
    return model, StageReport("lowrank", before, after, count(model)[1], layers=layers, notes=notes)


def _output_error(reference, model, example) -> float:
    with torch.no_grad():
        ref, out = reference.eval()(example), model.eval()(example)
    return float(torch.linalg.norm(ref - out) / max(float(torch.linalg.norm(ref)), 1e-12))


def _factorized(layer, rank: int):
    u, s, vh = torch.linalg.svd(layer.weight.detach().float(), full_matrices=False)
    first = torch.nn.Linear(layer.in_features, rank, bias=False)
    second = torch.nn.Linear(rank, layer.out_features, bias=layer.bias is not None)
    with torch.no_grad():
        root = s[:rank].sqrt()
        first.weight.copy_(root[:, None] * vh[:rank])
        second.weight.copy_(u[:, :rank] * root[None, :])
        if layer.bias is not None:
            second.bias.copy_(layer.bias)
        approx = second.weight @ first.weight
    weight = layer.weight.detach()
    error = float(torch.linalg.norm(approx - weight) / torch.linalg.norm(weight))
    return torch.nn.Sequential(first, second), error


def _set_module(model, name: str, replacement) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, replacement)
