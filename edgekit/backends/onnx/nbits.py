"""ONNX Runtime's MatMulNBits: weight-only int4/int8 of every MatMul with a constant weight, round to nearest; and
saving a language model's ONNX of any size."""

from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path

from edgekit.errors import ConversionError

BLOCK_SIZES = (16, 32, 64, 128, 256)  # what MLAS takes
ACCURACY_LEVEL = 4  # MatMulNBits computes with int8 activations (quantized per block as it runs)
PROTOBUF_LIMIT = 2**31 - 2**26  # a file's protobuf holds at most 2 GB: weights beyond this go to external data (64 MB spare)


def nbits_quantizer(model, bits: int, block: int, exclude: list[str] | None = None):
    """`model` (a ModelProto) with every MatMul of a constant weight but those in `exclude` as MatMulNBits: `bits`,
    asymmetric, groups of `block` along the input, accuracy_level 4. (ORT's `nodes_to_include` filters nothing: it is
    OR'ed with the op types, so a selection is made by exclusion.)"""
    from onnxruntime.quantization import matmul_nbits_quantizer as nbits

    for name in ("onnxruntime.quantization.matmul_nbits_quantizer", "neural_compressor"):  # it sets the root logger to INFO
        logging.getLogger(name).setLevel(logging.ERROR)
    config = nbits.DefaultWeightOnlyQuantConfig(
        block_size=block,
        is_symmetric=False,
        accuracy_level=ACCURACY_LEVEL,
        bits=bits,
        op_types_to_quantize=("MatMul",),
        quant_axes=(("MatMul", 0),),
    )
    quantizer = nbits.MatMulNBitsQuantizer(
        model,
        bits=bits,
        block_size=block,
        is_symmetric=False,
        accuracy_level=ACCURACY_LEVEL,
        nodes_to_exclude=exclude or [],
        algo_config=config,
    )
    with contextlib.redirect_stdout(io.StringIO()):  # a progress bar
        quantizer.process()
    return quantizer.model.model


def block_size(group_size: int) -> int:
    """MatMulNBits quantizes in blocks of 16, 32, 64, 128 or 256 weights along the input (ONNX Runtime's MLAS)."""
    if group_size not in BLOCK_SIZES:
        raise ConversionError(
            f"ONNX Runtime's MatMulNBits takes --group-size {', '.join(map(str, BLOCK_SIZES))}, not {group_size}",
            hint="use 32 (the default) or 128; one group per channel (-1) or larger groups: --to openvino (NNCF)",
        )
    return group_size


def count(model, op_type: str) -> int:
    return sum(node.op_type == op_type for node in model.graph.node)


def save_onnx(model, out: Path) -> None:
    """`model` to `out`, its weights in `out.data` beside it where they pass the 2 GB a protobuf holds."""
    import onnx

    weights = sum(len(t.raw_data) for t in model.graph.initializer)
    if weights <= PROTOBUF_LIMIT:
        onnx.save(model, str(out))
        return
    onnx.save(model, str(out), save_as_external_data=True, all_tensors_to_one_file=True, location=out.name + ".data", size_threshold=1024)
