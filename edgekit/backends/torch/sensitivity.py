"""Per-layer int8 sensitivity of a PyTorch module (edgekit.quantization.sensitivity's ranking): each Conv and Linear
weight fake-quantized in place in turn, the module's first output compared with its float output."""

from __future__ import annotations

import numpy as np
import torch

from edgekit.calibration.samples import unpadded
from edgekit.quantization.sensitivity import SAMPLES, LayerSensitivity, WeightLayer, fake_quantize, rank


def first_output(out) -> np.ndarray:
    """A torch model's first output (of a tuple or list, or the tensor itself) as an array."""
    first = out[0] if isinstance(out, (tuple, list)) else out
    return np.asarray(first.detach() if hasattr(first, "detach") else first)


def torch_sensitivity(module, samples, specs, count: int = SAMPLES, fixed: int | None = None) -> tuple[list[LayerSensitivity], int]:
    """(layers ranked by loss, total parameters) of a torch module: Conv and Linear weights fake-quantized
    in place one module at a time (restored after), on the first `count` samples; `fixed`: the batch a module
    exported at a fixed batch takes (backends.torch.loader.exported_batch), None for any."""
    layers = [(name, m) for name, m in module.named_modules() if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Linear))]
    feeds = [
        ([torch.from_numpy(np.ascontiguousarray(batch[s.name])) for s in specs], real)
        for batch, real in samples.head(count).counted_batches(count, fixed)
    ]

    def evaluate(layer: WeightLayer | None) -> list[np.ndarray]:
        target = dict(layers)[layer.name] if layer else None
        saved = target.weight.data.clone() if target is not None else None
        if target is not None:
            target.weight.data = torch.from_numpy(fake_quantize(saved.numpy(), 0))
        try:
            with torch.no_grad():
                outs = [(module(*args), real) for args, real in feeds]
        finally:
            if target is not None:
                target.weight.data = saved
        return [unpadded([first_output(o)], fixed, real)[0] for o, real in outs]

    weights = [WeightLayer(name, type(m).__name__, "weight", 0, m.weight.numel()) for name, m in layers]
    return rank(weights, evaluate), sum(p.numel() for p in module.parameters())
