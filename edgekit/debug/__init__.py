"""`edgekit debug`: where an artifact starts to differ from its reference, tensor by tensor.

Both models run on the same samples, one at a time (or in the batch a model with a fixed batch takes, the
repeated samples that fill up its last batch left out); every intermediate tensor they share (matched by name)
is compared (metrics.tensors). One capture module per format family: onnx (ONNX Runtime), tflite (LiteRT),
openvino, torch (forward hooks named through an ONNX export's module scopes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgekit import registry
from edgekit.errors import EdgekitError, InputMismatchError
from edgekit.imports import import_attr
from edgekit.metrics.tensors import FLOOR_DB, JUMP_DB, ErrorStats, TensorRef, first_jump, table_rows, worst
from edgekit.quantization.channel_order import orders_by_tensor, restore
from edgekit.report.schema import new_report
from edgekit.source import ModelSource

SHOWN_UNMATCHED = 20


@dataclass(frozen=True)
class DebugRequest:
    artifact: ModelSource
    reference: ModelSource
    data: str
    samples: int = 8
    seed: int = 0
    jump_db: float = JUMP_DB
    floor_db: float = FLOOR_DB
    preprocess: str | None = None  # an image folder's (calibration.preprocess)


def debug(request: DebugRequest) -> dict:
    """The per-tensor comparison report: rows in graph order, the first jump, the worst rows, what was not matched."""
    from edgekit.calibration import load_samples
    from edgekit.validation.validate import align_inputs

    artifact = capture(request.artifact)
    reference = capture(request.reference, partner=artifact)
    samples = load_samples(request.data, request.samples, request.seed, request.preprocess, artifact.inputs)
    ref_samples, alignment = align_inputs(samples, artifact.inputs, reference.inputs)
    by_order = getattr(reference, "ops_kept", False) and getattr(artifact, "ops_kept", False)
    matched, unmatched = match(reference.tensors, artifact.tensors, by_order)
    if not matched:
        raise EdgekitError(
            f"{request.artifact.spec} and {request.reference.spec} share no intermediate tensor names",
            hint="debug an artifact against the model it was converted from, in a format pair edgekit can match (docs/debug.md)",
        )
    provenance = (_provenance(request.reference), _provenance(request.artifact))
    orders = (_channel_orders(provenance[0]), _channel_orders(provenance[1]))
    stats = compare(reference, artifact, matched, ref_samples, samples, unmatched, orders)
    matched = [pair for pair in matched if pair[0].key in stats]
    rows = table_rows(matched, stats)
    jump = first_jump(rows, request.jump_db, request.floor_db)
    report = new_report("debug")
    report.update(
        artifact={"path": request.artifact.spec, "format": request.artifact.format},
        reference={"path": request.reference.spec, "format": request.reference.format},
        data=samples.provenance,
        input_alignment=alignment,
        rule={"jump_db": request.jump_db, "floor_db": request.floor_db},
        rows=rows,
        first_jump=None if jump is None else rows[jump],
        worst=worst(rows),
        matched=len(rows),
        unmatched=unmatched,
        advice=_naming_advice(request, provenance[1], len(rows), unmatched),
    )
    return report


def _naming_advice(request: DebugRequest, provenance: dict, matched: int, unmatched: dict) -> str | None:
    """What to compare an OpenVINO int8 IR made through ONNX (a CNN for x86: ONNX Runtime's QDQ route) with, when it shares few
    tensor names with an IR made straight from PyTorch; `provenance`: the artifact's."""
    built_from_qdq = all(registry.backend(m.family).takes_quantized for m in (request.artifact, request.reference))
    if not built_from_qdq or matched >= len(unmatched["reference_only"]):
        return None
    if (provenance.get("quantization") or {}).get("tool") != "onnxruntime":
        return None
    origin = provenance.get("source") or {}
    source = origin.get("zoo") or origin.get("spec", "MODEL")
    return (
        "this IR was quantized through ONNX (ONNX Runtime's Q/DQ, as OpenVINO int8 of a CNN for x86 is), so its tensors carry the ONNX "
        f"export's names: compare it with the fp32 ONNX (edgekit convert {source} --to onnx -o fp32.onnx; "
        f"edgekit debug {request.artifact.spec} -r fp32.onnx)"
    )


def capture(source: ModelSource, partner=None):
    """The capture object for a model: its inputs, its tensors in graph order, run(feeds) -> values by key."""
    captured = registry.backend(source.family).debug_capture
    if captured is None:
        raise EdgekitError(
            f"edgekit debug cannot read the intermediate tensors of {source.format} models ({source.spec})",
            hint="debug ONNX, TFLite or OpenVINO artifacts, with a reference in the same format, or PyTorch vs ONNX",
        )
    return import_attr(captured)(source, partner)


def match(reference: list[TensorRef], artifact: list[TensorRef], by_order: bool = False) -> tuple[list[tuple[TensorRef, TensorRef]], dict]:
    """Pairs of tensors with a name in common, in the reference's order, and what had no partner.

    `by_order` (two graphs from the same converter, whose ops keep their types: TFLite): a name match needs the
    same op type too, and the tensors left are paired by op type and order where both graphs have as many of that type.
    """
    by_name: dict[str, TensorRef] = {}
    for tensor in artifact:
        for name in tensor.names:
            by_name.setdefault(name, tensor)
    pairs: dict[str, TensorRef] = {}
    used: set[str] = set()
    for tensor in reference:
        partner = next((by_name[n] for n in tensor.names if n in by_name and by_name[n].key not in used), None)
        if partner is not None and (not by_order or partner.op == tensor.op):
            pairs[tensor.key] = partner
            used.add(partner.key)
    if by_order:
        _pair_by_order([t for t in reference if t.key not in pairs], [t for t in artifact if t.key not in used], pairs, used)
    unmatched = {
        "reference_only": [t.key for t in reference if t.key not in pairs],
        "artifact_only": [t.key for t in artifact if t.key not in used],
        "skipped": [],
    }
    return [(t, pairs[t.key]) for t in reference if t.key in pairs], unmatched


def _pair_by_order(reference: list[TensorRef], artifact: list[TensorRef], pairs: dict, used: set) -> None:
    """The k-th unpaired output of an op type in one graph with the k-th in the other, where the counts agree."""
    for op in dict.fromkeys(t.op for t in reference):
        mine, theirs = [t for t in reference if t.op == op], [t for t in artifact if t.op == op]
        if len(mine) == len(theirs):
            for ref, art in zip(mine, theirs, strict=True):
                pairs[ref.key] = art
                used.add(art.key)


def compare(
    reference, artifact, pairs, ref_samples, samples, unmatched: dict, orders: tuple[dict, dict] = ({}, {})
) -> dict[str, ErrorStats]:
    """Error statistics per reference tensor over all samples; pairs of different shapes go to unmatched['skipped'].
    `orders`: the reference's and the artifact's reordered channels ({tensor name: order}), compared in the source's order."""
    stats: dict[str, ErrorStats] = {}
    dropped: set[str] = set()
    fixed = debug_batch(reference, artifact)
    size = fixed or 1
    batches = zip(ref_samples.counted_batches(1, fixed), samples.counted_batches(1, fixed), strict=True)
    for (ref_feeds, real), (art_feeds, _) in batches:
        ref_values, art_values = reference.run(ref_feeds), artifact.run(art_feeds)
        for ref, art in pairs:
            if ref.key in dropped:
                continue
            why = _unfit(ref_values.get(ref.key), art_values.get(art.key))
            if why:
                dropped.add(ref.key)
                stats.pop(ref.key, None)
                unmatched["skipped"].append({"tensor": ref.key, "artifact_tensor": art.key, "why": why})
                continue
            ref_value, art_value = _source_order(ref_values[ref.key], ref, orders[0]), _source_order(art_values[art.key], art, orders[1])
            for ref_row, art_row in _per_sample(ref_value, art_value, size, real):
                stats.setdefault(ref.key, ErrorStats()).add(ref_row, art_row)
    if not stats:
        raise InputMismatchError(
            "no tensor shared by name has the same shape in both models",
            hint="debug an artifact against the model it was converted from (layouts must agree: NCHW vs NCHW)",
        )
    return stats


def debug_batch(reference, artifact) -> int | None:
    """The batch both models are fed: the one a model with a fixed batch takes (artifact.fixed_batch), None (one sample
    at a time) where both take any; two different fixed batches are an error."""
    from edgekit.artifact import fixed_batch

    sizes = {name: fixed_batch(capture.inputs) for name, capture in (("artifact", artifact), ("reference", reference))}
    fixed = sorted({size for size in sizes.values() if size is not None})
    if len(fixed) > 1:
        raise InputMismatchError(
            f"the artifact takes batches of {sizes['artifact']} only and the reference batches of {sizes['reference']}: "
            "edgekit debug feeds both the same batches",
            hint="debug the artifact against the model it was converted from, exported with the same batch",
        )
    return fixed[0] if fixed else None


def _per_sample(ref: np.ndarray, art: np.ndarray, size: int, real: int):
    """A tensor's values sample by sample, for the `real` samples of a batch of `size` (the rest repeat samples to fill
    a fixed batch): rows along axis 0 where it holds the batch, else the whole tensor once."""
    if size == 1 or not ref.ndim or ref.shape[0] != size:
        return [(ref, art)]
    return [(ref[j : j + 1], art[j : j + 1]) for j in range(real)]


def _provenance(source: ModelSource) -> dict:
    """What edgekit wrote beside a model it converted ({} for any other model)."""
    from edgekit.provenance import read_provenance

    return (read_provenance(source.path) if source.path else None) or {}


def _channel_orders(provenance: dict) -> dict[str, list[int]]:
    """The tensors whose channels a conversion reordered (pair-safe int8: backends.onnx.channel_order), by name."""
    return orders_by_tensor((provenance.get("quantization") or {}).get("channel_order"))


def _source_order(value: np.ndarray, tensor: TensorRef, orders: dict[str, list[int]]) -> np.ndarray:
    """A tensor's value with its channels back in the order of the model it was converted from."""
    order = next((orders[n] for n in tensor.names if n in orders), None)
    return value if order is None or value.ndim < 2 or value.shape[1] != len(order) else restore(value, order)


def _unfit(ref: np.ndarray | None, art: np.ndarray | None) -> str:
    if ref is None or art is None:
        return "not readable in the " + ("reference" if ref is None else "artifact")
    if ref.shape != art.shape:
        shapes = "x".join(map(str, ref.shape)), "x".join(map(str, art.shape))
        return f"shape {shapes[0]} vs {shapes[1]}"
    return ""
