"""int8 coverage as LiteRT runs the model: the loaded interpreter's nodes after the XNNPACK delegate took its
partitions (which ops it took, loader.delegated_ops), each op's tensor types and shapes from the same graph without the
delegate. XNNPACK runs 8-bit-quantized CONV_2D / FULLY_CONNECTED / ... in int8 (its QS8 kernels)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgekit.metrics.coverage import FLOAT, INT8, Island, Layer, summarize

MULTIPLY = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "BATCH_MATMUL", "CONV_3D")
INTEGER = ("int8", "uint8")
PLUMBING = ("QUANTIZE", "DEQUANTIZE", "RESHAPE", "SQUEEZE", "EXPAND_DIMS")


def litert_coverage(path: Path, interpreter) -> dict:
    """Coverage of the .tflite at `path` as `interpreter` (the runner's, delegate applied) runs it."""
    from edgekit.backends.tflite.interpreter import loaded_interpreter
    from edgekit.backends.tflite.loader import delegated_ops

    delegated = delegated_ops(interpreter._interpreter)[2]
    plain = loaded_interpreter(path, delegate=False)  # the same ops, in the same order, with every tensor's type and shape
    layers, islands = executed(plain._get_ops_details(), {d["index"]: d for d in plain.get_tensor_details()}, delegated)
    return summarize(layers, islands, "the LiteRT interpreter's ops (XNNPACK delegate applied) and their tensor types")


def executed(ops: list[dict], tensors: dict, delegated: set[int]) -> tuple[list[Layer], list[Island]]:
    """The multiplying ops with the type they compute in, and the float ops fed (through float ops) by a DEQUANTIZE
    of an int8 activation. An op's name is its output tensor's; `op` says whether XNNPACK or the builtin kernels ran it."""
    producer = {int(t): op["index"] for op in ops for t in op["outputs"]}
    island_ops: set[int] = set()
    layers, islands = [], []
    for op in ops:
        kind, index = op["op_name"], op["index"]
        ins = [int(t) for t in op["inputs"] if int(t) >= 0]
        data = _data_input(kind, ins)
        precision = INT8 if data is not None and _dtype(tensors, data) in INTEGER else FLOAT
        name = tensors[int(op["outputs"][0])]["name"] if len(op["outputs"]) else kind
        where = f"{kind} ({'XNNPACK' if index in delegated else 'builtin kernel'})"
        macs = _macs(kind, ins, int(op["outputs"][0]), tensors) if kind in MULTIPLY else None
        if kind in MULTIPLY:
            layers.append(Layer(name, where, precision, macs))
        if precision == FLOAT and kind not in PLUMBING and any(_from_int8(t, producer, ops, tensors, island_ops) for t in ins):
            island_ops.add(index)
            islands.append(Island(name, where, macs))
    return layers, islands


def _data_input(kind: str, ins: list[int]) -> int | None:
    """The activation an op computes on (TRANSPOSE_CONV takes the output shape and the weights first)."""
    if kind == "TRANSPOSE_CONV":
        return ins[2] if len(ins) > 2 else None
    return ins[0] if ins else None


def _from_int8(tensor: int, producer: dict, ops: list[dict], tensors: dict, island_ops: set[int]) -> bool:
    """Whether `tensor` is a float value made from int8 activations: a DEQUANTIZE of a computed int8 tensor, or an island's output."""
    source = producer.get(tensor)
    if source is None or _dtype(tensors, tensor) in INTEGER:
        return False
    if source in island_ops:
        return True
    op = ops[source]
    return op["op_name"] == "DEQUANTIZE" and int(op["inputs"][0]) in producer  # an activation, not constant weights


def _dtype(tensors: dict, index: int) -> str:
    return np.dtype(tensors[index]["dtype"]).name


def _macs(kind: str, ins: list[int], out: int, tensors: dict) -> int | None:
    """Output elements x the multiplies behind each (weights are [O, kh, kw, I/groups], depthwise [1, kh, kw, O], FC [O, K])."""
    shape = lambda i: [int(d) for d in tensors[i]["shape"]]  # noqa: E731
    elements = int(np.prod(shape(out)))  # LiteRT models run one sample (batch 1) at a time
    if kind in ("CONV_2D", "CONV_3D"):
        return elements * int(np.prod(shape(ins[1])[1:]))
    if kind == "DEPTHWISE_CONV_2D":
        _, kh, kw, _ = shape(ins[1])
        return elements * kh * kw
    if kind == "TRANSPOSE_CONV":
        weight = shape(ins[1])
        return int(np.prod(shape(ins[2]))) * int(np.prod(weight[:3]))
    if kind in ("FULLY_CONNECTED", "BATCH_MATMUL"):
        return elements * shape(ins[0])[-1] if len(shape(ins[0])) else None
    return None
