"""Where EfficientNet-Lite0's remaining ONNX Runtime int8 loss lies: its activations' Q/DQ pairs, each replaced by a
Clip to its quantization range (the same clamp, no rounding; a ReLU6 fused into its Conv keeps its clamp), ranked one
at a time on crops that are neither calibration nor test, then the k most sensitive together on the test crops:
agreement, cosine and int8/fp32 p50. A measurement of this host's default int8, not a scheme edgekit writes
(docs/int8-schemes.md, "Where the rest is lost"). Accuracy control returns activations to float the same way
(edgekit.backends.onnx.float_activations). Two last rows bound what equalizing channels (cross-layer equalization,
SmoothQuant) could recover: the linear stream tensors quantized per channel, against the default, both run as written."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import numpy as np

from bench.accuracy import _logits, _p50_ratios
from bench.common import (
    CACHE,
    CONTROL_LIMIT,
    CONTROL_VALIDATION,
    ISA_CLASS,
    artifact,
    code_stamp,
    photo_calibration,
    publish,
    ratio_text,
)
from edgekit.backends.onnx.float_activations import activation_pairs, quantized_range, unrounded
from edgekit.calibration import load_samples
from edgekit.metrics.compare import compare_output
from edgekit.provenance import read_provenance

MODEL = "efficientnet_lite0"
RANK_CROPS = 100  # seed 4: other crops than the calibration (seed 0) and the test sets (seeds 1-3)
TEST_SEEDS = (1, 2, 3)
COUNTS = (0, 3, 6, 10)
STREAM_CROPS = 64  # calibration crops (seed 0) that set the per-channel ranges of the per-channel row
AS_WRITTEN = "onnxruntime:cpu[optimization=disable]"


def run(rounds: int = 3) -> None:
    import onnx

    int8, fp32 = artifact(MODEL, "int8"), artifact(MODEL, "fp32")
    model = onnx.load(str(int8))
    pairs = activation_pairs(model)
    ranked = _ranked(model, pairs, fp32)
    rows = [_row(model, ranked[:count], fp32, rounds) for count in (*COUNTS, len(ranked))]
    rows.append(_controlled_row(fp32, rounds))
    rows.extend(_per_channel_rows(model, int8, fp32))
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
            f"Last row: what `--val` ({CONTROL_VALIDATION[0]} crops of seed {CONTROL_VALIDATION[1]}) with `--min-agreement {CONTROL_LIMIT}` writes: accuracy "
            "control returns the most sensitive layers and activations to float one at a time, keeping a step only where it "
            "brings the outputs closer to fp32 (edgekit.quantization.accuracy).",
            "The two rows after it run the Q/DQ as written (`onnxruntime:cpu[optimization=disable]`: ONNX Runtime's int8 kernels "
            "take no per-channel activation scale): the default, then the same model with each linear stream tensor (a Conv "
            f"output with no ReLU6, an Add) quantized per channel, each channel's range its own |max| on {STREAM_CROPS} "
            "calibration crops within the tensor's range. No equalization of channels (cross-layer equalization, "
            "SmoothQuant) can do better than that on those tensors.",
        ],
    )


def _unrounded(model, pairs: list[tuple], out: Path) -> Path:
    import onnx

    onnx.save(unrounded(model, [quantize.input[0] for quantize, _ in pairs]), str(out))
    return out


def _ranked(model, pairs: list[tuple], fp32: Path) -> list[tuple]:
    """The pairs, most sensitive first: the mean cosine with fp32 when that pair alone is unrounded."""
    samples = load_samples(str(photo_calibration(RANK_CROPS, seed=4, model=MODEL)))
    reference = _logits(fp32, samples, "onnx")
    with tempfile.TemporaryDirectory() as tmp:
        cosines = [_cosine(reference, _logits(_unrounded(model, [pair], Path(tmp) / "one.onnx"), samples, "onnx")) for pair in pairs]
    return [pairs[i] for i in np.argsort(cosines)[::-1]]


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return compare_output("logits", a, b).cosine_mean


def _row(model, pairs: list[tuple], fp32: Path, rounds: int) -> list:
    path = _unrounded(model, pairs, CACHE / f"{MODEL}.int8.{ISA_CLASS}.unrounded{len(pairs)}.{code_stamp()}.onnx")
    which = ", ".join(q.input[0] for q, _ in pairs) if len(pairs) <= max(COUNTS) else "all"
    return [len(pairs), which or "none (the default)", *_scores(path, fp32, rounds)]


def _controlled_row(fp32: Path, rounds: int) -> list:
    """The int8 that accuracy control writes with --val on CONTROL_VALIDATION's crops and --min-agreement CONTROL_LIMIT."""
    path = artifact(MODEL, "int8", min_agreement=CONTROL_LIMIT)
    control = read_provenance(path)["quantization"]["accuracy_control"]
    label = f"accuracy control, --min-agreement {CONTROL_LIMIT}: {len(control['activations_in_float'])}"
    which = f"{', '.join(control['activations_in_float'])} (and layers {', '.join(control['reverted_to_float']) or 'none'} in float)"
    return [label, which, *_scores(path, fp32, rounds)]


def _per_channel_rows(model, int8: Path, fp32: Path) -> list[list]:
    """The default run as written, and with its linear stream tensors quantized per channel: the bound of equalization."""
    stream = _stream_pairs(model)
    path = CACHE / f"{MODEL}.int8.{ISA_CLASS}.stream-per-channel.{code_stamp()}.onnx"
    _save_per_channel(model, stream, _channel_max(fp32, [q.input[0] for q, _ in stream]), path)
    return [
        ["0, run as written", "none (the default)", *_scores(int8, fp32, 0, AS_WRITTEN)],
        [
            f"0, {len(stream)} per channel, run as written",
            "the linear stream tensors (Conv without ReLU6, Add)",
            *_scores(path, fp32, 0, AS_WRITTEN),
        ],
    ]


def _stream_pairs(model) -> list[tuple]:
    """The Q/DQ pairs on an Add's output or a Conv's whose range goes below zero (no ReLU6 fused into it)."""
    producers = {output: node for node in model.graph.node for output in node.output}
    pairs = []
    for quantize, dequantize in activation_pairs(model):
        producer = producers.get(quantize.input[0])
        if producer is not None and (
            producer.op_type == "Add" or (producer.op_type == "Conv" and quantized_range(model.graph, quantize)[0] < 0)
        ):
            pairs.append((quantize, dequantize))
    return pairs


def _channel_max(fp32: Path, tensors: list[str]) -> dict[str, np.ndarray]:
    """Each tensor's per-channel |max| over STREAM_CROPS calibration crops, from the float model."""
    import onnx

    from edgekit.backends.onnx.sensitivity import tensor_batches
    from edgekit.calibration.samples import Samples

    crops = load_samples(str(photo_calibration(300, seed=0, model=MODEL)))
    crops = Samples({name: array[:STREAM_CROPS] for name, array in crops.arrays.items()})
    peaks: dict[str, np.ndarray] = {}
    for batch in tensor_batches(onnx.load(str(fp32)), tensors, crops):
        for name in tensors:
            peaks[name] = np.maximum(peaks.get(name, 0.0), np.abs(batch[name]).max(axis=(0, 2, 3)))
    return peaks


def _save_per_channel(model, pairs: list[tuple], peaks: dict[str, np.ndarray], out: Path) -> None:
    """A copy of `model` whose `pairs` quantize per channel (axis 1): u8 over each channel's range within the tensor's."""
    import onnx
    from onnx import helper, numpy_helper

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    nodes = {node.output[0]: node for node in copy.graph.node}
    for quantize, dequantize in pairs:
        name = quantize.input[0]
        low, high = quantized_range(model.graph, quantize)
        low, high = np.maximum(low, -peaks[name]), np.minimum(high, peaks[name])
        scale = np.maximum((high - low) / 255.0, 1e-8).astype(np.float32)
        zero = np.clip(np.round(-low / scale), 0, 255).astype(np.uint8)
        copy.graph.initializer.extend(
            [numpy_helper.from_array(scale, f"{name}_channel_scale"), numpy_helper.from_array(zero, f"{name}_channel_zero")]
        )
        for node in (nodes[quantize.output[0]], nodes[dequantize.output[0]]):
            node.input[1], node.input[2] = f"{name}_channel_scale", f"{name}_channel_zero"
            node.attribute.append(helper.make_attribute("axis", 1))
    onnx.save(copy, str(out))


def _scores(path: Path, fp32: Path, rounds: int, target: str | None = None) -> list:
    """Agreement with fp32 on each test seed's 600 crops, the mean cosine over them, and the int8/fp32 p50 ratio (not
    timed where `rounds` is 0). `target` runs `path` (default: ONNX Runtime's CPU, as fp32 always runs)."""
    agreements, cosines = [], []
    for seed in TEST_SEEDS:
        samples, reference = _test_set(fp32, seed)
        out = _logits(path, samples, "onnx", target)
        agreements.append(f"{(reference.argmax(1) == out.argmax(1)).mean() * 100:.2f}%")
        cosines.append(_cosine(reference, out))
    return [*agreements, f"{np.mean(cosines):.4f}", ratio_text(_p50_ratios(path, fp32, 1, rounds)) if rounds else "- (not what runs)"]


@functools.cache
def _test_set(fp32: Path, seed: int) -> tuple:
    """A test seed's 600 crops and the fp32 model's logits on them: computed once, every row compares against them."""
    samples = load_samples(str(photo_calibration(600, seed=seed, model=MODEL)))
    return samples, _logits(fp32, samples, "onnx")
