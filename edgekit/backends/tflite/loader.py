"""Read .tflite files: signature, precision, ops and which of them the XNNPACK delegate takes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from edgekit.artifact import Artifact
from edgekit.backends.tflite.interpreter import loaded_interpreter, tensor_name, tensor_spec


def tflite_artifact(path: Path, precision: str | None = None) -> Artifact:
    model = loaded_interpreter(path)
    inputs = [tensor_spec(d) for d in model.get_input_details()]
    outputs = [tensor_spec(d) for d in model.get_output_details()]
    io_types = sorted({np.dtype(d["dtype"]).name for d in model.get_input_details()})
    meta = {"io_dtype": io_types, "input_tensors": [tensor_name(d["name"]) for d in model.get_input_details()]}
    return Artifact(Path(path), "tflite", precision or _precision(path), inputs, outputs, meta)


def _precision(path: Path) -> str:
    """fp16 (float16 tensors), int8 (QUANTIZE ops or integer I/O), int8-dynamic (int8 weights only), fp32."""
    plain = loaded_interpreter(path, delegate=False)
    types = {np.dtype(d["dtype"]).name for d in plain.get_tensor_details()}
    ops = {op["op_name"] for op in plain._get_ops_details()}
    io_int = any(np.dtype(d["dtype"]).kind in "iu" for d in plain.get_input_details())
    if "float16" in types:
        return "fp16"
    if "QUANTIZE" in ops or (io_int and "int8" in types):
        return "int8"
    return "int8-dynamic" if "int8" in types else "fp32"


def tflite_summary(path: Path) -> dict:
    """Ops of the graph, and which of them the default XNNPACK delegate runs (the rest run on the CPU kernels)."""
    names, original, taken, partitions = delegated_ops(loaded_interpreter(path)._interpreter)
    ops = Counter(names[n] for n in original)
    on_cpu = Counter(names[n] for n in original if n not in taken)
    plain = loaded_interpreter(path, delegate=False)  # the same graph with tensor types, before delegation
    details = plain._get_ops_details()
    delegate = {
        "name": "XNNPACK",
        "partitions": partitions,
        "ops_total": len(original),
        "ops_on_delegate": len(taken),
        "ops_on_cpu": dict(on_cpu.most_common()),
        "cpu_ops": _account(plain, [details[n] for n in original if n not in taken], _why_on_cpu),
        "data_movement": _account(plain, details, _why_data_movement),
    }
    return {"ops": dict(ops.most_common()), "delegate": delegate}


# Builtin ops XNNPACK's TFLite delegate has a kernel for (tensorflow/lite/delegates/xnnpack/xnnpack_delegate.cc)
XNNPACK_OPS = frozenset(
    "ABS ADD ASSIGN_VARIABLE AVERAGE_POOL_2D BATCH_MATMUL CEIL CONCATENATION CONV_2D DEPTH_TO_SPACE DEPTHWISE_CONV_2D "
    "DEQUANTIZE DIV ELU EXP FLOOR FULLY_CONNECTED GELU HARD_SWISH LEAKY_RELU LOGISTIC MAX_POOL_2D MAXIMUM MEAN MINIMUM "
    "MUL NEG PAD PRELU QUANTIZE READ_VARIABLE RELU RELU6 RELU_N1_TO_1 RESHAPE RESIZE_BILINEAR ROUND RSQRT SLICE SOFTMAX "
    "SPACE_TO_DEPTH SPLIT SQRT SQUARE SQUARED_DIFFERENCE STRIDED_SLICE SUB SUM TANH TRANSPOSE TRANSPOSE_CONV "
    "VAR_HANDLE".split()
)
XNNPACK_TYPES = ("float32", "float16", "int8", "uint8")
WEIGHTED = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV")


def _account(graph, ops: list[dict], why) -> list[dict]:
    """[{op, count, why}] for the ops `why` says something about, most frequent first."""
    tensors = {d["index"]: d for d in graph.get_tensor_details()}
    produced = {int(t) for op in graph._get_ops_details() for t in op["outputs"]}
    readers = Counter()
    for op in graph._get_ops_details():
        readers.update((int(t), op["op_name"]) for t in op["inputs"])
    rows = Counter()
    for op in ops:
        reason = why(op, tensors, produced, readers)
        if reason:
            rows[(op["op_name"], reason)] += 1
    return [{"op": op, "count": n, "why": reason} for (op, reason), n in rows.most_common()]


def _types(op: dict, tensors: dict, which: str) -> list[str]:
    return [np.dtype(tensors[int(t)]["dtype"]).name for t in op[which] if int(t) in tensors]


def _why_on_cpu(op: dict, tensors: dict, produced: set, _readers) -> str:
    """Why XNNPACK left an op to the CPU kernels, read from XNNPACK's rules (its op list, types, constant operands)."""
    name = op["op_name"]
    if name not in XNNPACK_OPS:
        return f"XNNPACK has no {name} kernel"
    data = [int(t) for t in op["inputs"]][:1] + [int(t) for t in op["outputs"]]
    odd = sorted({np.dtype(tensors[t]["dtype"]).name for t in data if t in tensors} - set(XNNPACK_TYPES))
    if odd:
        return f"{'/'.join(odd)} tensors: XNNPACK computes {', '.join(XNNPACK_TYPES)} only"
    if name == "RESHAPE" and len(op["inputs"]) > 1 and int(op["inputs"][1]) in produced:
        return "its new shape is computed at run time (SHAPE/PACK ops); XNNPACK needs a constant shape"
    if name in WEIGHTED and len(op["inputs"]) > 1 and int(op["inputs"][1]) in produced:
        return "its weights are computed at run time; XNNPACK needs constant weights"
    if any(-1 in tensors[int(t)].get("shape_signature", ()) for t in data if int(t) in tensors):
        return "a dynamic dimension; XNNPACK needs static shapes"
    return "XNNPACK declined its parameters (fused activation, axes or quantization it does not take)"


def _why_data_movement(op: dict, tensors: dict, _produced, readers: Counter) -> str:
    """Ops that move or re-encode data without arithmetic: each a full pass over its tensor, delegated or not."""
    name, ins, outs = op["op_name"], _types(op, tensors, "inputs")[:1], _types(op, tensors, "outputs")
    if name == "TRANSPOSE":
        return "a layout change (NCHW <-> NHWC) the converter left in the graph: a copy, no arithmetic"
    if name == "PAD":
        return "padding not folded into the next convolution: a copy of the tensor"
    if name == "QUANTIZE" and ins and ins[0] in ("int8", "uint8", "int16"):
        return "int8 -> int8 requantization to another scale: a pass over the tensor"
    if name == "DEQUANTIZE" and outs == ["float32"] and ins and ins[0] in ("int8", "uint8"):
        consumers = sorted({reader for (t, reader) in readers if t == int(op["outputs"][0])})
        return f"int8 -> float32: {'/'.join(consumers)} runs in float" if consumers else ""  # none: a model output
    return ""


def delegated_ops(graph) -> tuple[list[str], list[int], set[int], int]:
    """Of a loaded interpreter's graph: every node's name, the model's own ops (node i is operator i), those the
    delegate took, and how many partitions it made."""
    names = [graph.NodeName(n) for n in range(graph.NumNodes())]
    delegates = [n for n, name in enumerate(names) if name == "DELEGATE"]
    original = [n for n, name in enumerate(names) if name != "DELEGATE"]
    taken = set().union(*(_covered(graph, d, original) for d in delegates)) if delegates else set()
    return names, original, taken, len(delegates)


def _covered(graph, delegate: int, original: list[int]) -> set[int]:
    """Original nodes a delegate node replaced: those on paths from its outputs back to its inputs."""
    producer = {t: n for n in original for t in graph.NodeOutputs(n)}
    boundary = set(graph.NodeInputs(delegate))
    covered, stack = set(), [t for t in graph.NodeOutputs(delegate)]
    while stack:
        node = producer.get(stack.pop())
        if node is None or node in covered:
            continue
        covered.add(node)
        stack.extend(t for t in graph.NodeInputs(node) if t not in boundary and t >= 0)
    return covered
