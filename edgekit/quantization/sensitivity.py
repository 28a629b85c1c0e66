"""Per-layer int8 sensitivity, and the rule that keeps the outliers in float.

A layer's sensitivity is what quantizing its weights alone costs the model's outputs: the weights of
that one layer go through symmetric per-channel int8 (as every backend edgekit drives quantizes
weights), all else stays float, and the loss is 1 - the mean cosine of the outputs against fp32 on a
few calibration samples. Per-channel quantization is invariant to a per-channel scale, so batch-norm
folding does not change the figure: a backend may measure on folded or unfolded weights.

The backends supply the layers and an evaluator (onnx_sensitivity for ONNX Runtime, the OpenVINO and
PyTorch converters theirs); ranking and the outlier rule live here, once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

SAMPLES = 16  # calibration samples the ranking runs on: enough to rank layers by cosine, cheap on a 2-core CPU
OUTLIER_FACTOR = 10.0  # a layer stands out when its loss exceeds 10x the median layer's
OUTLIER_FLOOR = 1e-4  # ... and costs more than 0.01% of cosine on its own (a well-behaved model keeps all in int8)
MAX_KEPT = 3  # the default keeps at most this many layers in float: int8 must stay int8


@dataclass(frozen=True)
class WeightLayer:
    """A layer whose weights int8 would quantize: its node name, op, weight name and output-channel axis."""

    name: str
    op: str
    weight: str
    axis: int
    parameters: int


@dataclass(frozen=True)
class LayerSensitivity:
    """What quantizing this one layer's weights costs the outputs (1 - mean cosine vs fp32)."""

    name: str
    op: str
    parameters: int
    loss: float

    def to_dict(self) -> dict:
        return {**asdict(self), "loss": float(f"{self.loss:.3g}")}


def fake_quantize(weights: np.ndarray, axis: int = 0) -> np.ndarray:
    """Symmetric per-channel int8 (scale = max |w| / 127 per slice along `axis`), back in float."""
    moved = np.moveaxis(weights, axis, 0)
    flat = moved.reshape(len(moved), -1) if moved.ndim > 1 else moved.reshape(-1, 1)
    scale = np.maximum(np.abs(flat).max(1, keepdims=True), 1e-30) / 127.0
    quantized = np.clip(np.round(flat / scale), -127, 127) * scale
    return np.moveaxis(quantized.reshape(moved.shape), 0, axis).astype(weights.dtype)


def output_loss(reference: list[np.ndarray], outputs: list[np.ndarray]) -> float:
    """1 - the mean per-sample cosine, averaged over the outputs."""
    losses = []
    for ref, out in zip(reference, outputs, strict=True):
        r, o = ref.reshape(len(ref), -1).astype(np.float64), out.reshape(len(out), -1).astype(np.float64)
        norms = np.maximum(np.linalg.norm(r, axis=1) * np.linalg.norm(o, axis=1), 1e-30)
        losses.append(1.0 - float(((r * o).sum(1) / norms).mean()))
    return max(float(np.mean(losses)), 0.0)


def rank(layers: list[WeightLayer], evaluate: Callable[[WeightLayer | None], list[np.ndarray]]) -> list[LayerSensitivity]:
    """Each layer's loss with only its weights in int8, most sensitive first.

    `evaluate(layer)` returns the model's outputs on the samples with that layer's weights fake-quantized
    (`None`: all float, the reference)."""
    reference = evaluate(None)
    measured = [LayerSensitivity(layer.name, layer.op, layer.parameters, output_loss(reference, evaluate(layer))) for layer in layers]
    return sorted(measured, key=lambda s: s.loss, reverse=True)


def outliers(ranked: list[LayerSensitivity], factor: float = OUTLIER_FACTOR, cap: int = MAX_KEPT) -> list[LayerSensitivity]:
    """The layers whose loss stands out: > `factor` x the median loss and > OUTLIER_FLOOR, at most `cap`."""
    if not ranked:
        return []
    median = float(np.median([s.loss for s in ranked]))
    limit = max(factor * median, OUTLIER_FLOOR)
    return [s for s in ranked if s.loss > limit][:cap]


def losses_by_kept(candidates: list[LayerSensitivity], losses: list[float]) -> dict:
    """The provenance's `output_loss_by_kept`: each prefix of `candidates` kept in float (losses[i]: the first i)."""
    return {", ".join(s.name for s in candidates[:i]) or "none (all int8)": float(f"{loss:.3g}") for i, loss in enumerate(losses)}


def provenance(ranked: list[LayerSensitivity], kept: list[LayerSensitivity], samples: int, total_parameters: int) -> dict:
    """What the provenance records: the rule, the layers kept in float with their loss and share of weights."""
    median = float(np.median([s.loss for s in ranked])) if ranked else 0.0
    return {
        "method": "weights of one layer at a time in symmetric per-channel int8, 1 - mean cosine of the outputs vs fp32",
        "samples": samples,
        "layers_measured": len(ranked),
        "median_loss": float(f"{median:.3g}"),
        "rule": f"loss > {OUTLIER_FACTOR:g}x the median and > {OUTLIER_FLOOR:g}, at most {MAX_KEPT} layers",
        "kept_in_float": [
            {
                **s.to_dict(),
                "x_median": round(s.loss / median, 1) if median else None,
                "weight_share": round(s.parameters / max(total_parameters, 1), 5),
            }
            for s in kept
        ],
        "most_sensitive": [s.to_dict() for s in ranked[:5]],
    }
