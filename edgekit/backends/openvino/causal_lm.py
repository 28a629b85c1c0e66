"""A causal language model as OpenVINO IR with its KV cache; weight-only int8/int4 through NNCF's compress_weights.

The IR is OpenVINO's reading of edgekit's KV-cache ONNX (backends.onnx.causal_lm), token and past lengths dynamic.
int8-weights: INT8_ASYM per output channel, every weight layer. int4-weights: INT4_ASYM in groups of `--group-size`
(a layer it does not divide takes the largest group that does: NNCF's ADJUST, as optimum-intel) on `ratio` of the
layers (NNCF ranks them by sensitivity; the rest, the embedding and the head stay INT8_ASYM as optimum-intel ships
them); with calibration tokens, data-aware: AWQ and scale estimation.
Run in f32 inference precision (no bf16 on AMX), so fp32 decodes as PyTorch does.

The IR is written stateful, as optimum-intel writes its LLMs: the cache is an OpenVINO state variable (MakeStateful
pairs past_keys/past_values with present_keys/present_values), so it stays inside the runtime between steps instead of
being copied out and back in at every token; the IR takes input_ids and gives logits. Same tokens as the stateless IR.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgekit.backends.onnx.causal_lm import export_onnx
from edgekit.backends.onnx.nncf_weights import nncf_int4
from edgekit.quantization.groups import group_fallback

CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}
STATE = {"past_keys": "present_keys", "past_values": "present_values"}  # the cache's inputs -> the outputs that update them


def convert(model, shape, final: Path, options, calibration, work: Path) -> dict:
    """Write the language model as OpenVINO IR at options.precision to `final`; the notes for the provenance."""
    import openvino as ov

    onnx_path = work / "fp32.onnx"
    if not onnx_path.exists():  # kept for the next call: convert tries int4 shares one after the other
        export_onnx(model, shape, onnx_path)
    ov_model = ov.convert_model(str(onnx_path))
    notes = {"weights": options.precision}
    if options.precision.endswith("-weights"):
        notes = compress(ov_model, options, shape, calibration)
    _make_stateful(ov_model)
    ov.save_model(ov_model, str(final), compress_to_fp16=options.precision == "fp16")
    return notes | {"kv_cache_held": "in OpenVINO's state between steps (a stateful IR)"}


def _make_stateful(ov_model) -> None:
    """The cache's inputs and outputs become state variables (after compression: NNCF feeds the cache as inputs)."""
    from openvino._offline_transformations import apply_make_stateful_transformation

    apply_make_stateful_transformation(ov_model, STATE)


def compress(ov_model, options, shape, calibration) -> dict:
    """NNCF weight compression in place: the mode, groups, ratio and data-aware methods used."""
    import nncf

    if options.precision == "int8-weights":
        nncf.compress_weights(ov_model, mode=nncf.CompressWeightsMode.INT8_ASYM)
        return {"weights": "int8 asymmetric per channel (NNCF)", "method": "RTN"}
    widths = _input_widths(ov_model)
    group = _group(options.group_size, max(widths, default=0))
    nncf_int4(
        ov_model, group, options.ratio, shape, calibration, hint="try another --group-size (a divisor of the layers' input widths) or -1"
    )
    method = "RTN" if calibration is None else f"AWQ + scale estimation on {len(calibration)} calibration sequences"
    return {
        "weights": f"int4 asymmetric, {'one group per channel' if group < 0 else f'groups of {group}'}, on {options.ratio:.0%} of the "
        "weight layers; the rest, the embedding and the head int8 (NNCF's backup mode)",
        "group_size": group,
        "group_fallback": group_fallback(widths, group),
        "ratio": options.ratio,
        "method": method,
        "calibrated": calibration is not None,
    }


def _group(group_size: int, widest: int) -> int:
    """NNCF's group size: -1 (one group per output channel) for -1 or a group at least as wide as every layer's input
    (a group spans at most a whole input row, so that is what it means)."""
    return -1 if group_size <= 0 or group_size >= widest else group_size


def _input_widths(ov_model) -> list[int]:
    """The input (reduction) width of each of the model's MatMuls with a constant weight."""
    widths = []
    for op in ov_model.get_ordered_ops():
        if op.get_type_name() != "MatMul" or not op.input_value(1).get_partial_shape().is_static:
            continue
        shape = op.input_value(1).get_shape()
        transposed = op.get_attributes().get("transpose_b", False)
        if len(shape) >= 2:
            widths.append(int(shape[-1] if transposed else shape[-2]))
    return widths


class OpenVinoLM:
    """One compiled OpenVINO model stepping the KV-cache graph (dynamic shapes: one compilation for every length).

    A stateful IR keeps the cache in its infer request: step() takes and gives back zero-byte stand-ins of the cache's
    shape (their length axis counts the tokens held), a past of length 0 resets the state. A stateless IR (written
    before edgekit kept the cache in the runtime) takes and gives the cache itself."""

    def __init__(self, source, threads: int | None = None) -> None:
        """`source`: the artifact's ModelSource or its path."""
        path = getattr(source, "path", source)
        import openvino as ov

        config = dict(CONFIG) | ({"INFERENCE_NUM_THREADS": str(threads)} if threads else {})
        self.compiled = ov.Core().compile_model(str(path), "CPU", config)
        self.request = self.compiled.create_infer_request()
        self.stateful = not any("past_keys" in i.get_names() for i in self.compiled.inputs)
        self.name = "openvino:cpu"

    def step(self, ids, keys, values):
        if not self.stateful:
            result = self.request.infer({"input_ids": ids, "past_keys": keys, "past_values": values})
            return tuple(result[out] for out in self.compiled.outputs)
        if keys.shape[3] == 0:
            self.request.reset_state()
        logits = self.request.infer({"input_ids": ids})[self.compiled.outputs[0]]
        held = np.empty((*keys.shape[:3], keys.shape[3] + ids.shape[1], 0), np.float32)  # the length the state holds
        return logits, held, held
