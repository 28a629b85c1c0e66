"""Accuracy-aware static int8 on LiteRT (from PyTorch): the most sensitive layers return to float until the limit holds.

The same loop as ONNX Runtime's (quantization.accuracy.accuracy_aware): layers ranked once by what their
weights alone cost in int8 (quantization.sensitivity, on the PyTorch module), then one more layer left out of
PT2E's annotation per step (pt2e_patterns.unannotate_modules: it runs in float inside the int8 graph), each
step's .tflite run on LiteRT and scored against the fp32 PyTorch model on the labelled validation samples; the
final artifact is validated again.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from edgekit.conversion import ConversionData, ConvertOptions


class LiteRTQuantization:
    """What accuracy_aware drives: the fp32 reference (`pre`), the ranked layers, and quantize(keep_float, out).
    `build(keep_float, out)` writes the int8 .tflite with the `keep_float` modules float."""

    def __init__(self, module, specs, data: ConversionData, build: Callable) -> None:
        self.pre = module
        self.specs = specs
        self.data = data
        self.build = build

    def ranked(self, int8: Path | None = None):
        """The layers by weight-only loss, round-to-nearest on the PyTorch module (`int8` is not read)."""
        from edgekit.backends.torch.loader import exported_batch
        from edgekit.backends.torch.sensitivity import torch_sensitivity

        return torch_sensitivity(self.pre, self.data.calibration, self.specs, fixed=exported_batch(self.pre))

    def activations(self, out: Path) -> list:
        """None: PT2E quantizes an activation with the ops around it, so only layers return to float here."""
        return []

    def quantize(self, keep_float: list[str], out: Path, float_activations: list[str] = ()) -> None:
        self.build(tuple(keep_float), out)

    def logits(self, model, samples) -> dict[str, np.ndarray]:
        """The outputs over `samples` by name: the PyTorch reference's first (`output`), or a .tflite's on LiteRT."""
        if isinstance(model, (str, Path)):
            from edgekit.quantization.accuracy import on_target

            return on_target(None)(model, samples)
        import torch

        from edgekit.backends.torch.loader import exported_batch
        from edgekit.backends.torch.pt2e import first_outputs
        from edgekit.calibration.samples import unpadded

        fixed = exported_batch(model)
        counted = list(samples.counted_batches(64, fixed))
        batches = [tuple(torch.from_numpy(feeds[s.name]) for s in self.specs) for feeds, _ in counted]
        outputs = first_outputs(model, batches)
        return {"output": np.concatenate([unpadded([out], fixed, real)[0] for out, (_, real) in zip(outputs, counted, strict=True)])}


def accuracy_controlled(module, specs, data: ConversionData, options: ConvertOptions, build: Callable, out: Path) -> dict:
    """Write the int8 .tflite with as few float layers as meet --max-drop / --min-agreement / --min-cosine; the provenance of the steps."""
    from edgekit.quantization.accuracy import Limit, Reading, accuracy_aware

    quantization = LiteRTQuantization(module, specs, data, build)
    return accuracy_aware(quantization, out, data.validation, Limit.of(options), quantization.logits, Reading.of(options))
