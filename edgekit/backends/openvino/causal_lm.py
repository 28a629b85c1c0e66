"""A causal language model as OpenVINO IR with its KV cache; weight-only int8/int4 through NNCF's compress_weights.

The IR is written **stateful with the attention fused to its cache**, as optimum-intel writes its LLMs: OpenVINO's
PyTorch frontend reads torch.export's program of the per-layer KV-cache signature (backends.torch.causal_lm
wrap_layers: attention stays one ScaledDotProductAttention), a `beam_idx` Gather is put before each layer's past, and
MakeStateful pairs each past with its present. The CPU plugin then fuses ReadValue -> Gather -> Concat -> SDPA ->
Assign into ScaledDotProductAttentionWithKVCache, which writes the new tokens into the state in place (no Concat of
the cache at a step) and can hold it in u8 (`--kv-cache int8`). The IR takes input_ids, logits_at (the positions
whose logits it gives: the last alone for a prompt read for generation) and beam_idx, and gives logits.
A model that graph refuses takes the route before: OpenVINO's reading of edgekit's KV-cache ONNX, made stateful, whose
cache is concatenated at every step; the provenance's `graph` says which.
int8-weights: INT8_ASYM per output channel, every weight layer. int4-weights: INT4_ASYM in groups of `--group-size`
(a layer it does not divide takes the largest group that does: NNCF's ADJUST, as optimum-intel) on `ratio` of the
layers (NNCF ranks them by sensitivity; the rest, the embedding and the head stay INT8_ASYM as optimum-intel ships
them); with calibration tokens, data-aware: AWQ and scale estimation.
Run in f32 inference precision (no bf16 on AMX) with an f32 cache unless the IR asks for u8, so fp32 decodes as
PyTorch does.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from edgekit.artifact import held_step
from edgekit.backends.onnx.causal_lm import export_onnx
from edgekit.backends.onnx.nncf_weights import nncf_int4
from edgekit.errors import ConversionError, first_line
from edgekit.quantization.groups import group_fallback

log = logging.getLogger("edgekit")
CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}
STATE = {"past_keys": "present_keys", "past_values": "present_values"}  # the ONNX route's cache inputs -> outputs
KV_PRECISION = ("runtime_options", "KV_CACHE_PRECISION")  # where the IR asks for its cache's precision (rt_info)
LOGITS_AT = "logits_at"  # the fused IR's input: the positions whose logits it gives (a prompt read for generation: the last)
FUSED = "PyTorch frontend, stateful with ScaledDotProductAttention fused to the cache"


def convert(model, shape, final: Path, options, calibration, work: Path) -> dict:
    """Write the language model as OpenVINO IR at options.precision to `final`; the notes for the provenance."""
    import openvino as ov

    layered, notes = _fp32_model(model, shape, work)
    ov_model = ov.Core().read_model(str(layered))
    if options.precision.endswith("-weights"):
        notes |= compress(ov_model, options, shape, calibration, _layered_feed(shape) if notes["graph"] == FUSED else None)
    else:
        notes |= {"weights": options.precision}
    if notes["graph"] == FUSED:
        _make_stateful_fused(ov_model, shape)
    elif options.kv_cache == "int8":
        raise ConversionError(
            f"OpenVINO holds the cache in u8 only where attention is fused to it, and this model took the ONNX route ({notes['graph']})",
            hint="drop --kv-cache int8",
        )
    else:
        _make_stateful(ov_model)
    ov_model.set_rt_info("u8" if options.kv_cache == "int8" else "f32", list(KV_PRECISION))
    ov.save_model(ov_model, str(final), compress_to_fp16=options.precision == "fp16")
    held = "u8" if options.kv_cache == "int8" else "fp32"
    return notes | {"kv_cache_held": f"in OpenVINO's state between steps (a stateful IR), {held}"}


def _fp32_model(model, shape, work: Path) -> tuple[Path, dict]:
    """The fp32 IR (stateless), kept in `work` for the next call (convert tries int4 shares one after the other):
    the PyTorch frontend's where it reads the model, else OpenVINO's reading of the KV-cache ONNX."""
    import openvino as ov

    out, notes = work / "fp32.xml", work / "openvino_graph.json"
    if out.exists():
        return out, json.loads(notes.read_text())
    try:
        ov_model = _from_torch(model, shape)
        graph = FUSED
    except Exception as exc:  # noqa: BLE001 - torch.export and the frontend raise many types; the ONNX route is tried
        why = first_line(exc, 200)
        log.info("OpenVINO language model: through ONNX, the cache concatenated at each step (%s)", why)
        onnx_path = work / "fp32.onnx"
        export_onnx(model, shape, onnx_path)
        ov_model, graph = ov.convert_model(str(onnx_path)), f"through ONNX, the cache concatenated at each step: {why}"
    ov.save_model(ov_model, str(out), compress_to_fp16=False)
    notes.write_text(json.dumps({"graph": graph}))
    return out, {"graph": graph}


def _from_torch(model, shape):
    """OpenVINO's PyTorch frontend on torch.export's program of the per-layer signature, inputs and outputs named
    (input_ids, past.{i}.key/value -> logits, present.{i}.key/value) and the cache's heads and width fixed."""
    import openvino as ov
    import torch

    from edgekit.backends.torch import causal_lm

    example, dynamic = causal_lm.layered_export_inputs(shape)
    with causal_lm.additive_mask_attention(model), torch.no_grad():
        program = torch.export.export(causal_lm.wrap_layers(model), example, dynamic_shapes=dynamic, strict=False)
    ov_model = ov.convert_model(program)
    ov_model.inputs[0].get_tensor().set_names({"input_ids"})
    ov_model.inputs[-1].get_tensor().set_names({LOGITS_AT})
    ov_model.outputs[0].get_tensor().set_names({"logits"})
    for i, (past, present) in enumerate(_cache_names(shape)):
        ov_model.inputs[1 + i].get_tensor().set_names({past})
        ov_model.outputs[1 + i].get_tensor().set_names({present})
    layer = ov.PartialShape([1, shape.kv_heads, -1, shape.head_dim])
    fixed = {"input_ids": ov.PartialShape([1, -1]), LOGITS_AT: ov.PartialShape([-1])}
    ov_model.reshape(fixed | {past: layer for past, _ in _cache_names(shape)})
    return ov_model


def _cache_names(shape) -> list[tuple[str, str]]:
    """(past, present) names of each layer's keys, then values."""
    return [(f"past.{layer}.{kind}", f"present.{layer}.{kind}") for layer in range(shape.layers) for kind in ("key", "value")]


def _layered_feed(shape):
    """Calibration feeds for NNCF on the per-layer IR: a token row read from an empty cache."""

    def feed(row: np.ndarray) -> dict:
        empty = {past: np.zeros((1, shape.kv_heads, 0, shape.head_dim), np.float32) for past, _ in _cache_names(shape)}
        return {"input_ids": row[None], LOGITS_AT: np.arange(len(row))} | empty

    return feed


def _make_stateful_fused(ov_model, shape) -> None:
    """As optimum-intel's stateful export: a beam_idx input gathers each past (the pattern the CPU plugin's
    StatefulSDPAFusion matches), MakeStateful pairs pasts and presents, and each state starts from an empty cache
    (a ReadValue without an initializer does not compile once fused)."""
    import openvino as ov
    import openvino.opset13 as ops
    from openvino._offline_transformations import apply_make_stateful_transformation

    beam = ops.parameter([1], ov.Type.i32, name="beam_idx")
    beam.output(0).get_tensor().set_names({"beam_idx"})
    for past, _ in _cache_names(shape):
        port = ov_model.input(past)
        consumers = list(port.get_target_inputs())
        gathered = ops.gather(port, beam, ops.constant(0))
        for consumer in consumers:
            consumer.replace_source_output(gathered.output(0))
    ov_model.add_parameters([beam])
    ov_model.validate_nodes_and_infer_types()
    apply_make_stateful_transformation(ov_model, dict(_cache_names(shape)))
    empty = ops.constant(np.array([1, shape.kv_heads, 0, shape.head_dim], np.int64))
    for op in ov_model.get_ops():
        if op.get_type_name() == "ReadValue":
            op.set_arguments([ops.broadcast(ops.constant(0.0, dtype=op.get_output_element_type(0)), empty)])
    ov_model.validate_nodes_and_infer_types()


def _make_stateful(ov_model) -> None:
    """The ONNX route: the cache's inputs and outputs become state variables (after compression: NNCF feeds the cache
    as inputs)."""
    from openvino._offline_transformations import apply_make_stateful_transformation

    apply_make_stateful_transformation(ov_model, STATE)


def compress(ov_model, options, shape, calibration, feed=None) -> dict:
    """NNCF weight compression in place: the mode, groups, ratio and data-aware methods used."""
    import nncf

    if options.precision == "int8-weights":
        nncf.compress_weights(ov_model, mode=nncf.CompressWeightsMode.INT8_ASYM)
        return {"weights": "int8 asymmetric per channel (NNCF)", "method": "RTN"}
    widths = _input_widths(ov_model)
    group = _group(options.group_size, max(widths, default=0))
    nncf_int4(
        ov_model,
        group,
        options.ratio,
        shape,
        calibration,
        hint="try another --group-size (a divisor of the layers' input widths) or -1",
        feed=feed,
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
    before edgekit kept the cache in the runtime) takes and gives the cache itself. The cache is f32 unless the IR asks
    for u8 (its rt_info's runtime_options, as optimum-intel writes them); OpenVINO's own default where the attention is
    fused to it is u8. A prompt's own attention reads its fp32 keys and values before they are cached, so with a u8
    cache a sequence's logits are read token by token (`all_logits` False), each token reading the cache."""

    def __init__(self, source, threads: int | None = None) -> None:
        """`source`: the artifact's ModelSource or its path."""
        path = getattr(source, "path", source)
        import openvino as ov

        core = ov.Core()
        model = core.read_model(str(path))
        self.kv_precision = model.get_rt_info(list(KV_PRECISION)).astype(str) if model.has_rt_info(list(KV_PRECISION)) else "f32"
        config = dict(CONFIG) | {"KV_CACHE_PRECISION": self.kv_precision} | ({"INFERENCE_NUM_THREADS": str(threads)} if threads else {})
        self.compiled = core.compile_model(model, "CPU", config)
        self.request = self.compiled.create_infer_request()
        names = {name for i in self.compiled.inputs for name in i.get_names()}
        self.stateful = "past_keys" not in names
        self.beam = {"beam_idx": np.zeros(1, np.int32)} if "beam_idx" in names else {}
        self.positions = LOGITS_AT in names
        self.all_logits = self.kv_precision == "f32"  # a u8 cache is read by later tokens only: sequences go token by token
        self.name = "openvino:cpu"

    def step(self, ids, keys, values):
        return self._run(ids, keys, values, np.arange(ids.shape[1]))

    def step_last(self, ids, keys, values):
        """step() giving the last position's logits only (a prompt read for generation: the head runs once)."""
        return self._run(ids, keys, values, np.array([ids.shape[1] - 1]))

    def _run(self, ids, keys, values, logits_at: np.ndarray):
        if not self.stateful:
            result = self.request.infer({"input_ids": ids, "past_keys": keys, "past_values": values})
            return tuple(result[out] for out in self.compiled.outputs)
        if keys.shape[3] == 0:
            self.request.reset_state()
        feed = {"input_ids": ids} | self.beam | ({LOGITS_AT: logits_at} if self.positions else {})
        logits = self.request.infer(feed)[self.compiled.outputs[0]]
        return held_step(logits, keys, keys.shape[3] + ids.shape[1])
