"""int4 weights of a KV-cache ONNX through NNCF's compress_weights, written as ONNX Runtime's MatMulNBits.

NNCF picks the layers kept in int8 by sensitivity (`ratio`: the share in int4) and, with calibration tokens, fits the
int4 codes to them (AWQ and scale estimation). Three things make its graph load and run well in ONNX Runtime 1.32:
- the tied head reads the embedding through a Transpose, which NNCF does not see as a weight: it is folded into a
  constant first (the head is then quantized like any layer);
- NNCF writes one 4-bit zero point per byte; MatMulNBits wants two per byte (unpacked, ORT refuses the file:
  "zero_points initializer shape {576,18} does not match");
- every MatMulNBits runs with int8 activations (accuracy_level 4: 9 tokens/s without it on SmolLM2-135M), and the
  layers NNCF keeps in int8 (a DequantizeLinear feeding a MatMul) become 8-bit MatMulNBits, ORT's fast int8 kernel;
- the int8 embedding (a DequantizeLinear feeding the Gather) is gathered first, then dequantized: ONNX Runtime keeps a
  DequantizeLinear of constants in the graph, so every decode step dequantized the whole table (28 of a 64 ms step on
  SmolLM2-135M) to read one row.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from edgekit.backends.onnx import fused_lm
from edgekit.backends.onnx.nbits import ACCURACY_LEVEL, nbits_quantizer, save_onnx
from edgekit.errors import ConversionError, first_line
from edgekit.quantization.groups import group_fallback

log = logging.getLogger("edgekit")
INT8_BLOCK = 32  # the 8-bit layers' groups


def compress_int4(fp32: Path, out: Path, group: int, ratio: float, shape, calibration) -> dict:
    """`fp32` (a KV-cache ONNX) with `ratio` of its weight layers in int4 (groups of `group`, asymmetric) and the rest
    in int8, written to `out`; the notes for the provenance."""
    import onnx

    model = fold_tied_head(onnx.load(str(fp32)))
    widths = _input_widths(model)
    feed = None
    if fused_lm.is_fused(i.name for i in model.graph.input):
        model, feed = fused_lm.nbits_opset(model), fused_lm.prefill_feed(shape)
    model = nncf_int4(model, group, ratio, shape, calibration, hint="try --group-size 32 or 64", feed=feed)
    model = _fit_for_onnxruntime(model)
    bits = [int(_attribute(n, "bits")) for n in model.graph.node if n.op_type == "MatMulNBits"]
    save_onnx(model, out)
    return {
        "weights": f"int4 asymmetric in groups of {group} on {ratio:.0%} of the weight layers, the rest int8 (NNCF picks them "
        f"by sensitivity), the embedding and the head int8 (NNCF's backup mode); int8 activations as it runs (accuracy_level "
        f"{ACCURACY_LEVEL})",
        "group_size": group,
        "group_fallback": group_fallback(widths, group),
        "ratio": ratio,
        "quantized_matmuls": {"int4": bits.count(4), "int8": bits.count(8)},
        "method": "AWQ + scale estimation (NNCF)" if calibration is not None else "RTN (NNCF)",
        "calibrated": calibration is not None,
    }


def nncf_int4(model, group: int, ratio: float, shape, calibration, hint: str, feed=None):
    """NNCF's compress_weights of `model` (an ONNX ModelProto or an OpenVINO Model): INT4_ASYM in groups of `group`
    (NNCF's ADJUST where a width is not a multiple) on `ratio` of the weight layers, the rest int8; with calibration
    token sequences, AWQ and scale estimation. `feed(row)` gives the model's inputs for a token row read from an
    empty cache (default: the KV-cache signature's). The compressed model; one line if NNCF fails."""
    import nncf
    from nncf.quantization.advanced_parameters import AdvancedCompressionParameters, GroupSizeFallbackMode

    logging.getLogger("nncf").setLevel(logging.ERROR)
    kwargs = {
        "mode": nncf.CompressWeightsMode.INT4_ASYM,
        "group_size": group,
        "ratio": ratio,
        "advanced_parameters": AdvancedCompressionParameters(group_size_fallback_mode=GroupSizeFallbackMode.ADJUST),
    }
    if calibration is not None:  # only the flags that are on: NNCF's ONNX backend refuses gptq=False
        feed = feed or (lambda row: {"input_ids": row[None], "past_keys": shape.empty(), "past_values": shape.empty()})
        feeds = [feed(row) for row in calibration]
        kwargs |= {"dataset": nncf.Dataset(feeds), "subset_size": len(feeds), "awq": True, "scale_estimation": True}
    try:
        return nncf.compress_weights(model, **kwargs)
    except Exception as exc:  # noqa: BLE001 - NNCF raises its own errors and numpy's
        raise ConversionError(f"NNCF weight compression failed: {first_line(exc, 240)}", hint=hint) from None


def fold_tied_head(model):
    """A Transpose of a constant (the tied head reading the embedding) becomes a constant: a transposed copy."""
    from onnx import numpy_helper

    constants = {i.name: i for i in model.graph.initializer}
    for node in list(model.graph.node):
        if node.op_type == "Transpose" and node.input[0] in constants:
            perm = _attribute(node, "perm")
            folded = np.ascontiguousarray(np.transpose(numpy_helper.to_array(constants[node.input[0]]), perm))
            model.graph.initializer.append(numpy_helper.from_array(folded, node.output[0]))
            model.graph.node.remove(node)
    return model


def _input_widths(model) -> list[int]:
    """The input (reduction) width of every MatMul with a constant weight."""
    shapes = {i.name: list(i.dims) for i in model.graph.initializer}
    return [shapes[n.input[1]][0] for n in model.graph.node if n.op_type == "MatMul" and len(shapes.get(n.input[1], [])) == 2]


def _fit_for_onnxruntime(model):
    """accuracy_level 4 on every MatMulNBits, 4-bit zero points packed two per byte, the int8 layers as 8-bit
    MatMulNBits."""
    from onnx import helper, numpy_helper

    constants = {i.name: i for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type != "MatMulNBits":
            continue
        levels = [a for a in node.attribute if a.name == "accuracy_level"]
        if levels:
            levels[0].i = ACCURACY_LEVEL
        else:
            node.attribute.append(helper.make_attribute("accuracy_level", ACCURACY_LEVEL))
        if _attribute(node, "bits") == 4 and len(node.input) > 3 and node.input[3]:
            zero_points = constants[node.input[3]]
            zero_points.CopyFrom(numpy_helper.from_array(_pack_nibbles(numpy_helper.to_array(zero_points)), zero_points.name))
    return _gather_before_dequantize(_int8_layers_as_nbits(model))


def _pack_nibbles(zero_points: np.ndarray) -> np.ndarray:
    """[N, blocks] uint8 zero points -> [N, ceil(blocks / 2)], two per byte, low nibble first (already packed: as is)."""
    if zero_points.ndim != 2:
        return zero_points
    blocks = zero_points.shape[1]
    padded = np.zeros((zero_points.shape[0], (blocks + 1) // 2 * 2), np.uint8)
    padded[:, :blocks] = zero_points & 0x0F
    return (padded[:, 0::2] | (padded[:, 1::2] << 4)).astype(np.uint8)


def _int8_layers_as_nbits(model):
    """MatMuls reading a DequantizeLinear of int8 constants (NNCF's int8 layers) re-written as 8-bit MatMulNBits
    (the same weights dequantized, then ONNX Runtime's round to nearest in groups of INT8_BLOCK)."""
    from onnx import numpy_helper

    constants = {i.name: i for i in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    names = []
    for node in model.graph.node:
        source = producer.get(node.input[1]) if node.op_type == "MatMul" else None
        if source is None or source.op_type != "DequantizeLinear" or not all(i in constants for i in source.input if i):
            continue
        weight = _dequantized(source, constants)
        model.graph.initializer.append(numpy_helper.from_array(weight, node.input[1] + "_f32"))
        node.input[1] = node.input[1] + "_f32"
        names.append(node.name)
    if not names:
        return model
    model = nbits_quantizer(
        model, 8, INT8_BLOCK, exclude=[n.name for n in model.graph.node if n.op_type == "MatMul" and n.name not in names]
    )
    return _drop_unused(model)


def _gather_before_dequantize(model):
    """Gather(DequantizeLinear(codes, scale, zero point; per row), ids) -> (Cast(Gather(codes)) - Gather(zero point)) *
    Gather(scale): the rows read, then dequantized, with DequantizeLinear's arithmetic (exact integers in float)."""
    from onnx import TensorProto, helper, numpy_helper

    constants = {i.name: i for i in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    for gather in [n for n in model.graph.node if n.op_type == "Gather" and not _attribute(n, "axis")]:
        source = producer.get(gather.input[0])
        if not _per_row_dequantize(source, constants):
            continue
        scale, zero = (numpy_helper.to_array(constants[i]) for i in source.input[1:])
        name, ids, out = source.input[0], gather.input[1], gather.output[0]
        for suffix, table in (("_row_scale", scale), ("_row_zero", zero)):
            model.graph.initializer.append(numpy_helper.from_array(table.astype(np.float32).reshape(-1, 1), name + suffix))
        index = list(model.graph.node).index(gather)
        model.graph.node.remove(gather)
        nodes = [
            helper.make_node("Gather", [name, ids], [out + "_codes"], axis=0),
            helper.make_node("Cast", [out + "_codes"], [out + "_float"], to=TensorProto.FLOAT),
            helper.make_node("Gather", [name + "_row_zero", ids], [out + "_zero"], axis=0),
            helper.make_node("Sub", [out + "_float", out + "_zero"], [out + "_centred"]),
            helper.make_node("Gather", [name + "_row_scale", ids], [out + "_scale"], axis=0),
            helper.make_node("Mul", [out + "_centred", out + "_scale"], [out]),
        ]
        for offset, node in enumerate(nodes):
            model.graph.node.insert(index + offset, node)
    return _drop_unused(model)


def _per_row_dequantize(node, constants) -> bool:
    """A DequantizeLinear of a constant 2-D table with one scale and zero point per row (axis 0)."""
    if node is None or node.op_type != "DequantizeLinear" or len(node.input) != 3 or not all(i in constants for i in node.input):
        return False
    rows = constants[node.input[0]].dims
    per_row = [list(constants[i].dims) == [rows[0]] for i in node.input[1:]]
    return len(rows) == 2 and all(per_row) and (_attribute(node, "axis") or 0) == 0


def _dequantized(node, constants) -> np.ndarray:
    from onnx import numpy_helper

    codes = numpy_helper.to_array(constants[node.input[0]]).astype(np.float32)
    scale = numpy_helper.to_array(constants[node.input[1]]).astype(np.float32)
    zero = numpy_helper.to_array(constants[node.input[2]]).astype(np.float32) if len(node.input) > 2 and node.input[2] else 0.0
    if np.ndim(scale) == 1:
        axis = _attribute(node, "axis")
        axis = 1 if axis is None else axis
        shape = [1] * codes.ndim
        shape[axis] = -1
        scale, zero = scale.reshape(shape), np.reshape(zero, shape) if np.ndim(zero) else zero
    return ((codes - zero) * scale).astype(np.float32)


def _drop_unused(model):
    """DequantizeLinear nodes no one reads any more, and initializers no node reads."""
    while True:
        used = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output}
        dead = [n for n in model.graph.node if n.op_type == "DequantizeLinear" and not any(o in used for o in n.output)]
        if not dead:
            break
        for node in dead:
            model.graph.node.remove(node)
    for init in [i for i in model.graph.initializer if i.name not in used]:
        model.graph.initializer.remove(init)
    return model


def _attribute(node, name: str):
    from onnx import helper

    found = [a for a in node.attribute if a.name == name]
    return helper.get_attribute_value(found[0]) if found else None
