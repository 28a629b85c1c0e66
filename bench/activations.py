"""Where EfficientNet-Lite0's remaining ONNX Runtime int8 loss lies: its activations' Q/DQ pairs, each replaced by a
Clip to its quantization range (the same clamp, no rounding; a ReLU6 fused into its Conv keeps its clamp), ranked one
at a time on crops that are neither calibration nor test, then the k most sensitive together on the test crops:
agreement, cosine and int8/fp32 p50. A measurement of this host's default int8, not a scheme edgekit writes
(docs/int8-schemes.md, "Where the rest is lost")."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from bench.accuracy import _logits, _p50_ratios
from bench.common import CACHE, ISA_CLASS, artifact, code_stamp, photo_calibration, publish, ratio_text
from edgekit.calibration import load_samples

MODEL = "efficientnet_lite0"
RANK_CROPS = 100  # seed 4: other crops than the calibration (seed 0) and the test sets (seeds 1-3)
TEST_SEEDS = (1, 2, 3)
COUNTS = (0, 3, 6, 10)


def run(rounds: int = 3) -> None:
    import onnx

    int8, fp32 = artifact(MODEL, "int8"), artifact(MODEL, "fp32")
    model = onnx.load(str(int8))
    pairs = activation_pairs(model)
    ranked = _ranked(model, pairs, fp32)
    rows = [_row(model, ranked[:count], fp32, rounds) for count in (*COUNTS, len(ranked))]
    publish(
        "activations-lite0",
        f"EfficientNet-Lite0 ONNX Runtime int8 ({ISA_CLASS} scheme) with its most sensitive activations left unrounded",
        ["activations unrounded", "which", *[f"agreement, seed {s}" for s in TEST_SEEDS], "mean cosine", "int8/fp32 p50, 1 thread"],
        rows,
        [
            f"{len(pairs)} activation Q/DQ pairs; each replaced by a Clip to its quantization range, ranked alone by the mean "
            f"cosine with fp32 on {RANK_CROPS} crops of seed 4; the test sets are 600 crops each, seeds {TEST_SEEDS}.",
            "The weights stay int8 as the default writes them. An unrounded tensor makes the convolutions either side of it "
            f"run in float. p50 ratio: median over {rounds} interleaved rounds, each artifact in a fresh process.",
        ],
    )


def activation_pairs(model) -> list[tuple]:
    """(QuantizeLinear, DequantizeLinear) pairs on activations (the Q reads a computed tensor, not an initializer)."""
    initializers = {i.name for i in model.graph.initializer}
    producers = {output: node for node in model.graph.node for output in node.output}
    pairs = []
    for node in model.graph.node:
        quantize = producers.get(node.input[0]) if node.op_type == "DequantizeLinear" else None
        if quantize is not None and quantize.op_type == "QuantizeLinear" and quantize.input[0] not in initializers:
            pairs.append((quantize, node))
    return pairs


def unrounded(model, pairs: list[tuple], out: Path) -> Path:
    """`model` with each pair's DequantizeLinear replaced, in place, by a Clip of the Q's input to the Q's range."""
    import onnx
    from onnx import helper, numpy_helper

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    values = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    nodes = list(copy.graph.node)
    for quantize, dequantize in pairs:
        low, high = _quantized_range(values[quantize.input[1]], values[quantize.input[2]])
        name = f"{dequantize.name}_unrounded"
        bounds = [numpy_helper.from_array(np.array(v, np.float32), f"{name}_{end}") for v, end in ((low, "low"), (high, "high"))]
        copy.graph.initializer.extend(bounds)
        index = next(i for i, n in enumerate(nodes) if n.name == dequantize.name)
        nodes[index] = helper.make_node("Clip", [quantize.input[0], bounds[0].name, bounds[1].name], [dequantize.output[0]], name=name)
    read = {name for node in nodes for name in node.input}
    del copy.graph.node[:]  # the Clip takes its DQ's place, so graph order holds; a Q nothing reads any more goes
    copy.graph.node.extend(n for n in nodes if n.op_type != "QuantizeLinear" or n.output[0] in read)
    onnx.save(copy, str(out))
    return out


def _quantized_range(scale, zero_point) -> tuple[float, float]:
    low, high = (0, 255) if zero_point.dtype == np.uint8 else (-128, 127)
    return float((low - int(zero_point)) * scale), float((high - int(zero_point)) * scale)


def _ranked(model, pairs: list[tuple], fp32: Path) -> list[tuple]:
    """The pairs, most sensitive first: the mean cosine with fp32 when that pair alone is unrounded."""
    samples = load_samples(str(photo_calibration(RANK_CROPS, seed=4, model=MODEL)))
    reference = _logits(fp32, samples, "onnx")
    with tempfile.TemporaryDirectory() as tmp:
        cosines = [_cosine(reference, _logits(unrounded(model, [pair], Path(tmp) / "one.onnx"), samples, "onnx")) for pair in pairs]
    return [pairs[i] for i in np.argsort(cosines)[::-1]]


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).mean())


def _row(model, pairs: list[tuple], fp32: Path, rounds: int) -> list:
    path = unrounded(model, pairs, CACHE / f"{MODEL}.int8.{ISA_CLASS}.unrounded{len(pairs)}.{code_stamp()}.onnx")
    agreements, cosines = [], []
    for seed in TEST_SEEDS:
        samples = load_samples(str(photo_calibration(600, seed=seed, model=MODEL)))
        reference, out = _logits(fp32, samples, "onnx"), _logits(path, samples, "onnx")
        agreements.append(f"{(reference.argmax(1) == out.argmax(1)).mean() * 100:.2f}%")
        cosines.append(_cosine(reference, out))
    which = ", ".join(q.input[0] for q, _ in pairs) if len(pairs) <= max(COUNTS) else "all"
    return [
        len(pairs),
        which or "none (the default)",
        *agreements,
        f"{np.mean(cosines):.4f}",
        ratio_text(_p50_ratios(path, fp32, 1, rounds)),
    ]
