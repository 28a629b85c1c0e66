"""int8 coverage as ExecuTorch runs the program: its instructions, in order. A delegate call runs the XNNPACK graph
in its payload (read with ExecuTorch's own flatc and schema: each node's type and the datatypes of its values, qint8
x qcint8 -> qint8 for an int8 convolution); a kernel call runs one operator on ExecuTorch's own CPU kernels, its
tensors' dtypes in the program."""

from __future__ import annotations

import json
import math
import re
import subprocess
import tempfile
from pathlib import Path

from edgekit.metrics.coverage import FLOAT, INT8, Island, Layer, summarize

XNN_INT8 = {"xnn_datatype_qint8", "xnn_datatype_quint8", "xnn_datatype_qcint8", "xnn_datatype_qdint8", "xnn_datatype_qpint8"}
XNN_MULTIPLY = {"XNNConv2d", "XNNDepthwiseConv2d", "XNNConvTranspose2d", "XNNFullyConnected", "XNNBatchMatrixMultiply"}
XNN_PLUMBING = {"XNNConvert", "XNNStaticTranspose", "XNNStaticReshape", "XNNStaticConstantPad", "XNNStaticSlice", "XNNCopy"}
KERNEL_MULTIPLY = {"aten::convolution", "aten::linear", "aten::mm", "aten::addmm", "aten::bmm"}
KERNEL_PLUMBING = ("quantized_decomposed::", "aten::view_copy", "aten::permute_copy", "aten::clone", "aten::_to_copy", "dim_order_ops::")
SCALAR_TYPES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32", 7: "float64", 15: "bfloat16"}


def pte_coverage(path: Path) -> dict:
    """Coverage of the .pte at `path`: every delegate call's XNNPACK nodes and every kernel call, in program order."""
    from edgekit.backends.executorch.describe import read_program

    program = read_program(path)
    plan = program.execution_plan[0]
    layers, islands = [], []
    for chain in plan.chains:
        for instruction in chain.instructions:
            call = instruction.instr_args
            if type(call).__name__ == "DelegateCall":
                delegate = plan.delegates[call.delegate_index]
                if delegate.id == "XnnpackBackend":
                    payload = bytes(program.backend_delegate_data[delegate.processed.index].data)
                    _xnnpack_nodes(xnnpack_graph(payload), call.delegate_index, layers, islands)
            elif type(call).__name__ == "KernelCall":
                _kernel(plan, call, layers, islands)
    return summarize(layers, islands, "the ExecuTorch program: XNNPACK delegate payloads (node datatypes) and kernel calls")


def xnnpack_graph(payload: bytes) -> dict:
    """The XNNGraph flatbuffer of an XNNPACK payload as a dict, decoded by ExecuTorch's flatc with its schema."""
    import executorch.backends.xnnpack.serialization.xnnpack_graph_serialize as serialize
    from executorch.exir._serialize._flatbuffer import _get_flatc_path

    header = serialize.XNNHeader.from_bytes(payload[: serialize.XNNHeader.EXPECTED_LENGTH])
    buffer = payload[header.flatbuffer_offset : header.flatbuffer_offset + header.flatbuffer_size]
    schema = Path(serialize.__file__).with_name("schema.fbs")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "graph.bin").write_bytes(buffer)
        command = [_get_flatc_path(), "--json", "--strict-json", "--raw-binary", "--defaults-json", "-o", tmp, str(schema)]
        subprocess.run([*command, "--", str(Path(tmp) / "graph.bin")], check=True, capture_output=True)
        text = (Path(tmp) / "graph.json").read_text()
    return json.loads(re.sub(r":\s*(-?)(inf|nan)\b", lambda m: f': "{m.group(1)}{m.group(2)}"', text))  # flatc writes bare inf


def _xnnpack_nodes(graph: dict, call: int, layers: list, islands: list) -> None:
    """An XNNPACK graph's nodes: int8 when their input and output are quantized; float ones fed by a Convert from int8
    (or by another such node) are islands."""
    values = {}
    for value in graph["xvalues"]:
        tensor = value["xvalue_union"].get("tensor_value", value["xvalue_union"])
        values[tensor["id_out"]] = (tensor["datatype"], tensor.get("dims") or [])
    from_int8: set[int] = set()  # float values computed from int8 activations
    for index, node in enumerate(graph["xnodes"]):
        kind, body = node["xnode_union_type"], node["xnode_union"]
        data, out = body.get("input1_id", body.get("input_id")), body["output_id"]
        inputs = [body[k] for k in ("input1_id", "input2_id", "input_id") if k in body]
        dtype, out_dtype = values.get(data, (None, []))[0], values.get(out, (None, []))[0]
        name = f"delegate {call} node {index}"
        macs = _xnn_macs(kind, body, values) if kind in XNN_MULTIPLY else None
        precision = INT8 if dtype in XNN_INT8 and out_dtype in XNN_INT8 else FLOAT
        if kind in XNN_MULTIPLY:
            layers.append(Layer(name, kind, precision, macs))
        floating_from_int8 = (kind == "XNNConvert" and dtype in XNN_INT8) or any(i in from_int8 for i in inputs)
        if out_dtype not in XNN_INT8 and floating_from_int8:
            from_int8.add(out)
            if kind not in XNN_PLUMBING:
                islands.append(Island(name, kind, macs))


def _xnn_macs(kind: str, body: dict, values: dict) -> int | None:
    out = values.get(body["output_id"], (None, []))[1]
    data = values.get(body.get("input1_id", body.get("input_id")), (None, []))[1]
    if not out:
        return None
    if kind in ("XNNConv2d", "XNNDepthwiseConv2d"):
        return math.prod(out) * body["kernel_height"] * body["kernel_width"] * body["group_input_channels"]
    if kind == "XNNConvTranspose2d":
        return math.prod(data) * body["kernel_height"] * body["kernel_width"] * body["group_output_channels"] if data else None
    return math.prod(out) * data[-1] if data else None


def _kernel(plan, call, layers: list, islands: list) -> None:
    """An operator on ExecuTorch's own kernels: a layer when it multiplies, an island when it computes in float
    in an int8 program (the delegate did not take it)."""
    op = plan.operators[call.op_index]
    tensors = [plan.values[i].val for i in call.args if type(plan.values[i].val).__name__ == "Tensor"]
    dtypes = [SCALAR_TYPES.get(int(t.scalar_type), str(t.scalar_type)) for t in tensors]
    name = f"{op.name}.{op.overload}" if op.overload else op.name
    precision = INT8 if dtypes and dtypes[0] in ("int8", "uint8") else FLOAT
    macs = _kernel_macs(op.name, [list(t.sizes) for t in tensors]) if op.name in KERNEL_MULTIPLY else None
    if op.name in KERNEL_MULTIPLY:
        layers.append(Layer(name, "portable kernel", precision, macs))
    if precision == FLOAT and not op.name.startswith(KERNEL_PLUMBING):
        islands.append(Island(name, "portable kernel", macs))


def _kernel_macs(op: str, sizes: list[list[int]]) -> int | None:
    """convolution(input, weight, ..., out): out x weight / out-channels; linear/mm/bmm: out x the inner dimension."""
    if len(sizes) < 3:
        return None
    out = sizes[-1]
    if op == "aten::convolution":
        return math.prod(out) * math.prod(sizes[1]) // sizes[1][0]
    first = sizes[1] if op == "aten::addmm" else sizes[0]
    return math.prod(out) * first[-1]
