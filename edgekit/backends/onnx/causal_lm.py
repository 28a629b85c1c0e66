"""A causal language model as ONNX with its KV cache, weight-only int4/int8 as ONNX Runtime's MatMulNBits.

fp32, int8-weights and int4-weights take onnxruntime-genai's builder graph where the builder takes the architecture
(backends.onnx.fused_lm: GroupQueryAttention, the cache held in place); fp16, and what the builder refuses, take
torch.onnx's dynamo export of edgekit.backends.torch.causal_lm's KV-cache signature (token and past lengths dynamic;
the cache goes in and out whole). The provenance's `graph` says which. int8-weights: every MatMul with a constant
weight in int8, groups of `--group-size` (16 to 256, what MLAS takes) along its input, asymmetric, round to nearest
(ONNX Runtime's MatMulNBitsQuantizer); the embedding (a Gather) stays fp32. int4-weights: NNCF's compress_weights
(backends.onnx.nncf_weights): `ratio` of the layers in int4, the rest and the head in int8, AWQ and scale estimation
on calibration tokens. Both run with int8 activations (accuracy_level 4).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from edgekit.backends.export_errors import quiet
from edgekit.backends.onnx import fused_lm
from edgekit.backends.onnx.nbits import ACCURACY_LEVEL, PROTOBUF_LIMIT, block_size, count, nbits_quantizer, save_onnx
from edgekit.backends.onnx.nncf_weights import compress_int4
from edgekit.backends.onnx.torchlib_registry import share_torchlib_registry
from edgekit.errors import ConversionError

log = logging.getLogger("edgekit")


def export_onnx(model, shape, out: Path) -> None:
    """fp32 ONNX of `model` behind the KV-cache signature: weights inside the file, or in `out.data` beside it where
    they pass the 2 GB a protobuf holds (a 0.5B model is 2.5 GB in fp32)."""
    import torch

    from edgekit.backends.torch import causal_lm

    example, dynamic = causal_lm.export_inputs(shape)
    share_torchlib_registry()
    with quiet(), torch.no_grad():
        try:
            torch.onnx.export(
                causal_lm.wrap(model),
                example,
                str(out),
                dynamo=True,
                input_names=list(causal_lm.INPUTS),
                output_names=list(causal_lm.OUTPUTS),
                dynamic_shapes=dynamic,
                external_data=sum(p.numel() * p.element_size() for p in model.parameters()) > PROTOBUF_LIMIT,
            )
        except Exception as exc:  # noqa: BLE001 - any exporter failure is reported as one line
            raise ConversionError(f"ONNX export of the language model failed: {str(exc).splitlines()[0][:240]}") from None


def convert(model, shape, final: Path, options, calibration, work: Path) -> dict:
    """Write the language model as ONNX at options.precision to `final`; the notes for the provenance. The fp32
    export is kept in `work` for the next call (convert tries int4 shares one after the other)."""
    fp32 = final if options.precision == "fp32" else work / "fp32.onnx"
    layout = work / "graph.json"
    if not fp32.exists() or fp32 == final:
        layout.write_text(json.dumps(_export(model, shape, fp32, work, fused=options.precision != "fp16")))
    notes = json.loads(layout.read_text())
    if options.precision == "fp16":
        _to_fp16(fp32, final)
        return notes | {"weights": "fp16 (inputs and cache fp32)"}
    if options.precision == "int4-weights":
        return notes | compress_int4(fp32, final, block_size(options.group_size), options.ratio, shape, calibration)
    if options.precision == "int8-weights":
        return notes | quantize_int8(fp32, final, block_size(options.group_size))
    return notes | {"weights": "fp32"}


def _export(model, shape, out: Path, work: Path, fused: bool) -> dict:
    """The fp32 graph: the builder's where it takes the model, else torch.onnx's; the provenance's notes on it."""
    why = fused_lm.export(model, shape, out, work) if fused else "fp16 keeps torch.onnx's graph"
    if why is None:
        return {"graph": fused_lm.LAYOUT, "kv_cache_held": fused_lm.HELD}
    if fused:
        log.info("ONNX language model: torch.onnx's graph, the cache as inputs and outputs (%s)", why)
    export_onnx(model, shape, out)
    return {"graph": f"torch.onnx (dynamo), the cache as inputs and outputs: {why}"}


def _to_fp16(fp32: Path, out: Path) -> None:
    import onnx
    from onnxconverter_common import float16

    save_onnx(float16.convert_float_to_float16(onnx.load(str(fp32)), keep_io_types=True), out)


def quantize_int8(fp32: Path, out: Path, block: int) -> dict:
    """Every MatMul with a constant weight in int8 (groups of `block` inputs, asymmetric, round to nearest), run with
    int8 activations (accuracy_level 4: without it the 8-bit kernel ran 9x slower than fp32 here). A tied head that
    reads the embedding through a Transpose, not a constant (torch.onnx's graph), stays fp32."""
    import onnx

    model = nbits_quantizer(onnx.load(str(fp32)), 8, block)
    matmuls = count(model, "MatMulNBits")
    if not matmuls:
        raise ConversionError(
            "no MatMul weight could be quantized to 8 bits", hint="the model's linear layers are not MatMuls with constant weights"
        )
    save_onnx(model, out)
    return {
        "weights": f"int8 asymmetric, groups of {block}, int8 activations as it runs (accuracy_level {ACCURACY_LEVEL}); "
        f"the embedding fp32, the head {'int8' if _head_quantized(model) else 'fp32'}",
        "group_size": block,
        "quantized_matmuls": {"int8": matmuls},
        "method": "RTN (MatMulNBits)",
    }


def _head_quantized(model) -> bool:
    """Whether the node giving the logits is a MatMulNBits."""
    logits = model.graph.output[0].name
    return any(n.op_type == "MatMulNBits" and logits in n.output for n in model.graph.node)


def OnnxLM(source, threads: int | None = None):  # noqa: N802 - the registry's lm_session, a session class before
    """A session stepping the artifact's graph: the builder's with its cache in place, else torch.onnx's.
    `source`: the artifact's ModelSource or its path."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    session = ort.InferenceSession(str(getattr(source, "path", source)), opts, providers=["CPUExecutionProvider"])
    if fused_lm.is_fused(i.name for i in session.get_inputs()):
        return fused_lm.FusedOnnxLM(session)
    return StatelessOnnxLM(session)


class StatelessOnnxLM:
    """ONNX Runtime stepping torch.onnx's KV-cache graph: the cache goes in and comes back at every step."""

    name = "onnxruntime:cpu"

    def __init__(self, session) -> None:
        self.session = session

    def step(self, ids, keys, values):
        return tuple(self.session.run(None, {"input_ids": ids, "past_keys": keys, "past_values": values}))
