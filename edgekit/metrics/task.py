"""What the model's outputs mean (the task decides which metrics apply) and which output pairs with which."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from edgekit.errors import EdgekitError

TASKS = ("classification", "detection", "embedding", "regression", "segmentation")
_HINTS = {  # words in output names, checked before shapes
    "embedding": ("embed", "pooler", "hidden", "sentence", "feature", "vector"),
    "detection": ("box", "bbox", "detection", "anchor"),
    "segmentation": ("mask", "seg"),
}


@dataclass(frozen=True)
class Task:
    """The task, whether edgekit inferred it, and from what."""

    name: str
    inferred: bool
    why: str

    def to_dict(self) -> dict:
        return asdict(self)


def resolve_task(
    given: str | None, outputs: list[np.ndarray], names: list[str], labels: np.ndarray | None, other_names: list[str] = ()
) -> Task:
    """The task the user gave (checked), or one inferred from the reference's outputs, their names (`names`, paired with
    `outputs`; `other_names`: the same outputs as the other side names them) and the labels. A detector is told by the
    layout of its outputs (metrics.detection) before any shape rule could call its heads an embedding."""
    if given is not None:
        if given not in TASKS:
            raise EdgekitError(f"unknown task '{given}'", hint=f"choose one of: {', '.join(TASKS)}")
        return Task(given, False, "given")
    detector = _detector(outputs, names)
    if detector:
        return detector
    for task, words in _HINTS.items():
        named = [n for n in [*names, *other_names] if any(w in n.lower() for w in words)]
        if named:
            return Task(task, True, f"output name '{named[0]}'")
    name, why = _task_from_shape(outputs[0], labels)
    return Task(name, True, why)


def _detector(outputs: list[np.ndarray], names: list[str]) -> Task | None:
    from edgekit.metrics.detection import detector_layout, raw_heads

    named = dict(zip(names, outputs, strict=False)) if len(names) == len(outputs) else {f"output_{i}": o for i, o in enumerate(outputs)}
    layout = detector_layout(named)
    if layout:
        return Task("detection", True, f"the outputs read as {layout} detections")
    if raw_heads(named):
        return Task(
            "detection",
            True,
            "per-stride class and box heads (a detector before its decoding): pass --postprocess module:function to read "
            "them as detections, or --task embedding to judge them as vectors",
        )
    return None


def _labels_fit(labels: np.ndarray, classes: int) -> bool:
    """Class indices below `classes`, or label sets no wider than the class scores."""
    if labels.dtype == bool:
        return labels.shape[1] <= classes
    return len(labels) > 0 and labels.min() >= 0 and labels.max() < classes


def _task_from_shape(output: np.ndarray, labels: np.ndarray | None) -> tuple[str, str]:
    shape = "x".join(map(str, output.shape[1:]))
    if output.ndim == 4 and output.shape[2] > 1 and output.shape[3] > 1:
        return "segmentation", f"the first output is [N, {shape}] (a map per sample)"
    if output.ndim == 3:
        return "embedding", f"the first output is [N, {shape}] (a vector per token)"
    if output.ndim != 2 or output.shape[1] == 1:
        return "regression", f"the first output is [N, {shape or 1}] (values, not class scores)"
    if labels is not None and _labels_fit(labels, output.shape[1]):
        return "classification", f"[N, {shape}] scores and class labels below {output.shape[1]}"
    norms = np.linalg.norm(output.reshape(len(output), -1).astype(np.float64), axis=1)
    if len(norms) and np.allclose(norms, 1.0, atol=1e-3) and not np.allclose(output.sum(1), 1.0, atol=1e-3):
        return "embedding", f"[N, {shape}] rows of unit length"
    return "classification", f"[N, {shape}] scores (pass --task embedding for an embedding)"


def pair_outputs(artifact_names: list[str], reference_names: list[str]) -> tuple[list[int], list[dict]]:
    """For each artifact output, the index of the reference output it is compared with: by name when both sides
    name the same set of outputs, else by position; and the pairing as the report shows it."""
    by_name = (
        len(artifact_names) == len(reference_names)
        and len(set(artifact_names)) == len(artifact_names)
        and set(artifact_names) == set(reference_names)
    )
    order = [reference_names.index(n) for n in artifact_names] if by_name else list(range(len(artifact_names)))
    how = "name" if by_name else "position"
    pairing = [
        {"artifact": a, "reference": reference_names[i] if i < len(reference_names) else None, "by": how}
        for a, i in zip(artifact_names, order, strict=True)
    ]
    return order, pairing
