"""Accuracy-aware static int8 on ONNX Runtime (and, through the same loop, LiteRT: backends.tflite.accuracy): return the most sensitive layers and activations to float until the limit holds.

The candidates are ranked once on calibration samples by one measure (quantization.sensitivity): 1 - the mean
cosine of the outputs vs fp32 with only that one thing in int8: a layer's weights (on ONNX Runtime the fitted codes
and corrected bias the all-int8 model holds), or (ONNX Runtime) an activation rounded to its int8 grid
(backends.onnx.float_activations). The model is calibrated once (ONNX Runtime's
calibration cache) and, per step, one more candidate goes to float: a layer is re-quantized without it, an
activation's Q/DQ pair becomes a Clip to the same range. Each step is validated on the labelled data on the
target's runtime and kept only if it brings the outputs closer to fp32 (mean cosine: top-1 moves in whole
samples); the final artifact is validated again, and every step is recorded with what it changed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgekit.errors import EdgekitError
from edgekit.metrics.task_metrics import MASK_THRESHOLD
from edgekit.source import open_source

ACTIVATION = "activation"  # LayerSensitivity.op of an activation tensor (the weight layers carry their op type)
MIN_COSINE_GAIN = 1e-5  # a step that brings the mean cosine with fp32 no closer than this is put back: float for nothing
RANKING = "1 - mean cosine vs fp32 with only that layer's weights, or that activation, as int8 holds them (calibration samples)"
MAX_STEPS = 12  # layers and activations returned to float before giving up: beyond that int8 is no longer the model's precision


@dataclass(frozen=True)
class Limit:
    """--max-drop (top-1 points vs fp32 on the labels), --min-agreement (top-1 agreement with fp32, %), --min-map-kept
    (the task's metric of fp32's own outputs kept, a fraction: a detector's mAP@0.5 of fp32's detections, a map's F1 or
    mIoU) and/or --min-cosine (the mean cosine of the first output with fp32's: the limit for a model whose output is not
    a class)."""

    max_drop: float | None
    min_agreement: float | None
    min_cosine: float | None = None
    min_kept: float | None = None

    @classmethod
    def of(cls, options) -> Limit:
        """The limit a ConvertOptions asks for."""
        return cls(options.max_drop, options.min_agreement, options.min_cosine, options.min_map_kept)

    @classmethod
    def recorded(cls, control: dict) -> Limit:
        """The limit an accuracy_control provenance entry records."""
        return cls(control.get("max_drop_points"), control.get("min_agreement"), control.get("min_cosine"), control.get("min_map_kept"))

    def count(self) -> int:
        """How many of the limits are set."""
        return sum(limit is not None for limit in (self.max_drop, self.min_agreement, self.min_cosine, self.min_kept))

    def on_task_metric(self) -> bool:
        """Whether a limit reads the task's measure (top-1, mAP, F1/mIoU), which a first output with none cannot hold."""
        return self.max_drop is not None or self.min_agreement is not None or self.min_kept is not None

    def holds(self, score: dict) -> bool:
        drop_ok = self.max_drop is None or score["drop_points"] <= self.max_drop
        agree_ok = self.min_agreement is None or score["agreement"] >= self.min_agreement
        kept_ok = self.min_kept is None or score["agreement"] >= 100 * self.min_kept
        cosine_ok = self.min_cosine is None or score["cosine"] >= self.min_cosine
        return drop_ok and agree_ok and kept_ok and cosine_ok

    def text(self) -> str:
        drop = f"drop <= {self.max_drop} pts" if self.max_drop is not None else None
        agreement = f"agreement >= {self.min_agreement}%" if self.min_agreement is not None else None
        kept = f"kept >= {self.min_kept:g} of fp32's" if self.min_kept is not None else None
        cosine = f"cosine >= {self.min_cosine}" if self.min_cosine is not None else None
        return " and ".join(filter(None, (drop, agreement, kept, cosine)))

    def notes(self) -> dict:
        """What the provenance records of the limit (read back by `recorded`)."""
        return {
            "max_drop_points": self.max_drop,
            "min_agreement": self.min_agreement,
            "min_map_kept": self.min_kept,
            "min_cosine": self.min_cosine,
        }


@dataclass(frozen=True)
class Reading:
    """How accuracy control reads the outputs: the task (None: inferred from the first output) and its settings (the
    detector's decoder --postprocess, the map's --mask-threshold)."""

    task: str | None = None
    postprocess: str | None = None
    mask_threshold: float = MASK_THRESHOLD

    @classmethod
    def of(cls, options) -> Reading:
        """The reading a ConvertOptions asks for (its task, unless a language model's)."""
        task = options.task if options.task in VISION_TASKS else None
        return cls("detection" if options.postprocess and task is None else task, options.postprocess, options.mask_threshold)


VISION_TASKS = ("classification", "detection", "segmentation", "embedding", "regression")


class Validator:
    """A model's outputs against the fp32 model's on the validation samples: the mean cosine of the first output, and
    the task's own measure where it has one: top-1 agreement (and, with labels, accuracy) for class scores ([N, classes]),
    mAP@0.5 of fp32's detections (decoded by `reading.postprocess`, or by the layout of the first output; with the data's
    box labels, its drop in mAP points) for a detector, F1 or mIoU of fp32's maps for a map. `logits(model, samples)`
    returns every output by name, in order, on the target's runtime (ONNX Runtime: backends.onnx.accuracy.ort_logits); an
    artifact's outputs pair with the reference's in that order, under the reference's names."""

    def __init__(self, reference_model, samples, logits, reading: Reading = Reading()) -> None:
        from edgekit.calibration.task_labels import task_labels
        from edgekit.metrics.compare import is_classifier_output, labels_in_range

        self.logits, self.reading = logits, reading
        named = self.logits(reference_model, samples)
        self.names, outputs = list(named), list(named.values())
        reference = outputs[0]
        self.shape = reference.shape
        task = reading.task or (None if is_classifier_output(reference) else map_task(named))
        self.classes = task in (None, "classification") and is_classifier_output(reference)  # top-1: class scores only
        self.task = None if task == "classification" else task  # a classifier's top-1 is read here, not by task_metrics
        if self.classes and samples.labels is not None:  # labels outside the classes are an error, never scored as wrong
            samples.labels = labels_in_range(samples.labels, reference.shape[-1], None, samples.provenance.get("source", "--val"))
        self.samples = samples
        self.outputs = outputs
        self.reference = reference.reshape(len(samples), -1)
        self.labels = task_labels(self.task, samples) if self.task == "detection" else None  # a zoo set's boxes
        if self.task:
            labelled = self._judge(outputs)["vs_labels"]
            self.reference_accuracy = round(100 * labelled["reference"], 3) if labelled else None
        else:
            self.reference_accuracy = _accuracy(self.reference, samples.labels) if self.classes else None

    def check(self, limit: Limit) -> None:
        check_top1(limit, self.shape, self.classes or self.task is not None)
        if self.task == "regression" and (limit.min_agreement is not None or limit.min_kept is not None):
            raise EdgekitError(
                "a regression's outputs have no agreement with fp32's to hold (--min-agreement, --min-map-kept)",
                hint="hold its outputs with --min-cosine, or its R^2 against labelled targets with --max-drop",
            )

    def score(self, model) -> dict:
        outputs = list(self.logits(model, self.samples).values())
        logits = outputs[0].reshape(len(self.samples), -1)
        cosine = _cosine(self.reference, logits)
        if self.task:
            judged = self._judge(outputs)
            labelled = judged["vs_labels"]
            accuracy, drop = (round(100 * labelled["artifact"], 3), round(labelled["drop_points"], 3)) if labelled else (None, None)
            agreement = None if judged["agreement"] is None else round(judged["agreement"], 3)
            return {"accuracy": accuracy, "drop_points": drop, "agreement": agreement, "cosine": cosine}
        accuracy = _accuracy(logits, self.samples.labels) if self.classes else None
        agreement = round(float((logits.argmax(1) == self.reference.argmax(1)).mean() * 100), 3) if self.classes else None
        drop = None if accuracy is None else round(self.reference_accuracy - accuracy, 3)
        return {"accuracy": accuracy, "drop_points": drop, "agreement": agreement, "cosine": cosine}

    def _judge(self, outputs: list[np.ndarray]) -> dict:
        from edgekit.calibration.task_labels import image_size
        from edgekit.metrics.task_metrics import TaskSettings, task_metrics

        if len(outputs) != len(self.outputs):
            raise EdgekitError(
                f"the int8 model has {len(outputs)} outputs and the fp32 model {len(self.outputs)}: accuracy control pairs them in order",
                hint="report this with the model; meanwhile hold the first output with --min-cosine",
            )
        settings = TaskSettings(self.reading.postprocess, self.reading.mask_threshold, intervals=False)
        return task_metrics(self.task, self.names, self.outputs, outputs, self.labels, settings, image_size(self.samples))


def map_task(outputs: dict[str, np.ndarray]) -> str | None:
    """detection for outputs a built-in detection decoder reads, segmentation for a first output that is a map
    [N, C, H, W]; None otherwise."""
    from edgekit.metrics.detection import detector_layout

    if detector_layout(outputs):
        return "detection"
    output = next(iter(outputs.values()))
    return "segmentation" if output.ndim == 4 and output.shape[-1] > 1 and output.shape[-2] > 1 else None


def check_top1(limit: Limit, shape, measured: bool | None = None) -> None:
    """Refuse a limit on the task's measure (--max-drop, --min-agreement) for a first output that has none: `measured`
    says whether it has one (Validator knows from the values: class scores, detections, a map); None judges the `shape`
    alone, before any calibration: class scores [N, C], or a rank that detections ([N, 4+C, A]) and maps ([N, C, H, W])
    have, which the validation run then reads."""
    from edgekit.metrics.compare import is_classifier_shape

    if measured is None:
        measured = is_classifier_shape(shape) or len(shape) in (3, 4)
    if not measured and limit.on_task_metric():
        raise EdgekitError(
            f"--max-drop, --min-agreement and --min-map-kept measure top-1 classes, detections (mAP) or maps (F1, mIoU), and the model's first "
            f"output ({'x'.join(map(str, shape))}) is none of them",
            hint="hold it to the fp32 model's outputs with --min-cosine instead, e.g. --min-cosine 0.999",
        )


def on_target(target: str | None):
    """Validator's `logits`: a model file run on `target` (None: its format's own runtime), one sample at a time; every
    output by name, in order."""

    def logits(model, samples) -> dict[str, np.ndarray]:
        from edgekit.metrics.compare import run_batches
        from edgekit.targets import make_runner

        runner = make_runner(open_source(str(model)), target)
        runner.load()
        return dict(zip(runner.output_names, run_batches(runner, samples.bind(runner.inputs), 1), strict=True))

    return logits


def _cosine(reference: np.ndarray, logits: np.ndarray) -> float:
    from edgekit.metrics.compare import compare_output

    return round(compare_output("logits", reference, logits).cosine_mean, 6)


def _accuracy(logits: np.ndarray, labels) -> float | None:
    from edgekit.metrics.compare import accuracy_percent

    return None if labels is None else round(accuracy_percent(logits, np.asarray(labels)), 3)


def accuracy_aware(quantizer, out, validation, limit: Limit, logits, reading: Reading = Reading()) -> dict:
    """Quantize into `out`, returning ranked layers and activations to float one at a time until `limit` holds on
    `validation`.

    `quantizer`: `pre` (the fp32 reference), `ranked(out)` (the weight layers of the int8 model `out`, ranked),
    `activations(out)` (its activations, ranked) and `quantize(float_layers, out, float_activations)`; `logits`: how to run the
    reference and the artifact."""
    validator = Validator(quantizer.pre, validation, logits, reading)
    validator.check(limit)
    kept: dict[bool, list[str]] = {False: [], True: []}  # is an activation -> names in float
    quantizer.quantize([], out, [])
    score = validator.score(out)
    steps = [{"kept_in_float": None, **score}]
    ranked = [] if limit.holds(score) else _ranked(quantizer, out)  # the ranking (a run per layer) only where int8 misses
    for candidate in ranked[:MAX_STEPS]:
        if limit.holds(score):
            break
        group = kept[candidate.op == ACTIVATION]
        group.append(candidate.name)
        quantizer.quantize(kept[False], out, kept[True])
        trial = validator.score(out)
        gain = _gain(score, trial)
        better = _closer(validator, gain)
        steps.append(
            {
                "kept_in_float": candidate.name,
                "op": candidate.op,
                "sensitivity": float(f"{candidate.loss:.3g}"),
                **trial,
                **gain,
                "kept": better,
            }
        )
        if better:
            score = trial
        else:
            group.pop()
    if not limit.holds(score):
        raise _missed(limit, steps, len(validation))
    # the written artifact, validated again after steps (the limit holds only after a step kept, so `out` is it); all-int8
    # that met the limit was scored as written just above
    final = validator.score(out) if ranked else score
    return {
        **limit.notes(),
        "validation_samples": len(validation),
        "reference_accuracy": validator.reference_accuracy,
        "ranking": RANKING if ranked else "none: all-int8 met the limit",
        "reverted_to_float": kept[False],
        "activations_in_float": kept[True],
        "steps": steps,
        "final": final,
    }


def _ranked(quantizer, out) -> list:
    """The int8 model's weight layers and activations, most sensitive first."""
    return sorted([*quantizer.ranked(out)[0], *quantizer.activations(out)], key=lambda s: s.loss, reverse=True)


def _closer(validator: Validator, gain: dict) -> bool:
    """Whether a step brought the model closer to fp32: by cosine (the finer measure: top-1 moves in whole samples), or
    for a detector or a map by its own measure (a box output's cosine is its coordinates', not its scores')."""
    if validator.task:
        return gain.get("agreement_gain", 0.0) > 0
    return gain["cosine_gain"] > MIN_COSINE_GAIN


def _missed(limit: Limit, steps: list[dict], samples: int) -> EdgekitError:
    """The limit no step met: where int8 stood, where the kept steps got it, and every step (the cause lines)."""
    kept = [step for step in steps if step.get("kept", True)]
    lines = [f"{_step_text(step)}: {score_text(step)}" for step in steps]
    return EdgekitError(
        f"int8 misses the limit ({limit.text()}) on {samples} validation samples: {score_text(kept[-1])} with "
        f"{len(kept) - 1} layers or activations in float (all int8: {score_text(steps[0])})",
        hint=f"the {len(steps) - 1} most sensitive layers and activations went back to float one at a time, each kept where it "
        "brought the outputs closer to fp32 (below): lower the limit, calibrate on data like the validation data "
        "(--calib-method), or keep fp16/fp32",
        cause="\n".join(lines),
    )


def _step_text(step: dict) -> str:
    if step["kept_in_float"] is None:
        return "all int8"
    if step["op"] == ACTIVATION:
        return f"+ activation {step['kept_in_float']} in float (unrounded, rounding loss alone {step['sensitivity']})"
    return f"+ {step['kept_in_float']} in float ({step['op']}, its int8 weights alone: loss {step['sensitivity']})"


def score_text(score: dict) -> str:
    """A score in one line: agreement (top-1, mAP@0.5 or map F1/mIoU with fp32), drop (labelled), cosine."""
    agreement = f"agreement {score['agreement']:.2f}%, " if score["agreement"] is not None else ""
    drop = f"drop {score['drop_points']:.2f} pts, " if score["drop_points"] is not None else ""
    back = "" if score.get("kept", True) else " (no closer to fp32: put back)"
    return f"{agreement}{drop}cosine {score['cosine']:.6g}{back}"


def _gain(previous: dict, score: dict) -> dict:
    """What returning the layer to float bought: cosine, and points of agreement (class scores) and accuracy (labels)."""
    gain = {"cosine_gain": round(score["cosine"] - previous["cosine"], 6)}
    if score["agreement"] is not None:
        gain["agreement_gain"] = round(score["agreement"] - previous["agreement"], 3)
    if score["accuracy"] is not None and previous["accuracy"] is not None:
        gain["accuracy_gain"] = round(score["accuracy"] - previous["accuracy"], 3)
    return gain
