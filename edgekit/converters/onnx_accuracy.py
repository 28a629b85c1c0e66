"""Accuracy-aware static int8 on ONNX Runtime (and, through the same loop, LiteRT: converters.litert_accuracy): return the most sensitive layers to float until the limit holds.

The layers are ranked once (converters.sensitivity, weight-only, on calibration samples); the model is
calibrated once (ONNX Runtime's calibration cache) and re-quantized with one more layer in float per
step, each step validated on the labelled data on ONNX Runtime, the target the model is made for.
The final artifact is validated again, and every step is recorded with what it changed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgekit.errors import EdgekitError

MAX_STEPS = 12  # layers returned to float before giving up: beyond that int8 is no longer the model's precision


@dataclass(frozen=True)
class Limit:
    """--max-drop (top-1 points vs fp32 on the labels) and/or --min-agreement (top-1 agreement with fp32, %)."""

    max_drop: float | None
    min_agreement: float | None

    def holds(self, score: dict) -> bool:
        drop_ok = self.max_drop is None or score["drop_points"] <= self.max_drop
        agree_ok = self.min_agreement is None or score["agreement"] >= self.min_agreement
        return drop_ok and agree_ok

    def text(self) -> str:
        drop = f"top-1 drop <= {self.max_drop} pts" if self.max_drop is not None else None
        agreement = f"agreement >= {self.min_agreement}%" if self.min_agreement is not None else None
        return " and ".join(filter(None, (drop, agreement)))


class Validator:
    """Top-1 accuracy and agreement of a model against the fp32 model on the validation samples; `logits(model,
    samples)` runs either on the target's runtime (ONNX Runtime by default)."""

    def __init__(self, reference_model, samples, logits=None) -> None:
        self.samples = samples
        self.logits = logits or _logits
        self.reference = self.logits(reference_model, samples)
        self.reference_accuracy = _accuracy(self.reference, samples.labels)

    def score(self, model) -> dict:
        logits = self.logits(model, self.samples)
        accuracy = _accuracy(logits, self.samples.labels)
        agreement = float((logits.argmax(1) == self.reference.argmax(1)).mean() * 100)
        drop = None if accuracy is None else round(self.reference_accuracy - accuracy, 3)
        return {"accuracy": accuracy, "drop_points": drop, "agreement": round(agreement, 3)}


def _logits(model, samples) -> np.ndarray:
    from edgekit.converters.onnx_sensitivity import BATCH, ort_session

    session = ort_session(str(model), 2)
    return np.concatenate([session.run(None, feeds)[0] for feeds in samples.batches(BATCH)]).reshape(len(samples), -1)


def _accuracy(logits: np.ndarray, labels) -> float | None:
    from edgekit.validate.compare import accuracy_percent

    return None if labels is None else round(accuracy_percent(logits, np.asarray(labels)), 3)


def accuracy_aware(quantizer, out, validation, limit: Limit, logits=None) -> dict:
    """Quantize into `out`, returning ranked layers to float one at a time until `limit` holds on `validation`.

    `quantizer`: `pre` (the fp32 reference), `ranked()` and `quantize(keep_float, out)`; `logits`: how to run
    the reference and the artifact (ONNX Runtime when None)."""
    validator = Validator(quantizer.pre, validation, logits)
    ranked, _ = quantizer.ranked()
    kept: list[str] = []
    quantizer.quantize(kept, out)
    score = validator.score(out)
    steps = [{"kept_in_float": None, **score}]
    for layer in ranked[:MAX_STEPS]:
        if limit.holds(score):
            break
        kept.append(layer.name)
        quantizer.quantize(kept, out)
        previous, score = score, validator.score(out)
        steps.append(
            {"kept_in_float": layer.name, "op": layer.op, "sensitivity": float(f"{layer.loss:.3g}"), **score, **_gain(previous, score)}
        )
    if not limit.holds(score):
        raise _missed(limit, steps, len(validation))
    final = validator.score(out)  # the written artifact, validated again
    return {
        "max_drop_points": limit.max_drop,
        "min_agreement": limit.min_agreement,
        "validation_samples": len(validation),
        "reference_accuracy": validator.reference_accuracy,
        "reverted_to_float": kept,
        "steps": steps,
        "final": final,
    }


def _missed(limit: Limit, steps: list[dict], samples: int) -> EdgekitError:
    """The limit no step met: where int8 stood, the best step, and every step (the cause lines)."""
    best = max(range(len(steps)), key=lambda i: (steps[i]["agreement"], -(steps[i]["drop_points"] or 0)))
    lines = [f"{_step_text(step)}: {_score_text(step)}" for step in steps]
    return EdgekitError(
        f"int8 misses the limit ({limit.text()}) on {samples} validation samples: {_score_text(steps[-1])} with "
        f"{len(steps) - 1} layers in float (all int8: {_score_text(steps[0])}; best: {_score_text(steps[best])} with {best})",
        hint="a layer returned to float keeps its int8 input, so a loss that stays is in the activations, not the weights: "
        "lower the limit, calibrate on data like the validation data (--calib-method), or keep fp16/fp32",
        cause="\n".join(lines),
    )


def _step_text(step: dict) -> str:
    if step["kept_in_float"] is None:
        return "all int8"
    return f"+ {step['kept_in_float']} in float ({step['op']}, weight-only loss {step['sensitivity']})"


def _score_text(score: dict) -> str:
    drop = f", top-1 drop {score['drop_points']:.2f} pts" if score["drop_points"] is not None else ""
    return f"agreement {score['agreement']:.2f}%{drop}"


def _gain(previous: dict, score: dict) -> dict:
    """What returning the layer to float bought: points of agreement (and of accuracy, with labels)."""
    gain = {"agreement_gain": round(score["agreement"] - previous["agreement"], 3)}
    if score["accuracy"] is not None and previous["accuracy"] is not None:
        gain["accuracy_gain"] = round(score["accuracy"] - previous["accuracy"], 3)
    return gain
