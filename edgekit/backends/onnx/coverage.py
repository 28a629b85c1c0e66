"""int8 coverage as ONNX Runtime runs the model: its optimized graph (the session's own transformations, saved with
`optimized_model_filepath`), where Q/DQ pairs it fused became int8 kernels (QLinearConv, QGemm, MatMulInteger, ...)
and what it could not fuse stayed DequantizeLinear -> float op -> QuantizeLinear."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

from edgekit.metrics.coverage import FLOAT, INT8, Island, Layer, summarize

INT8_LAYERS = {
    "QLinearConv", "QLinearMatMul", "QGemm", "MatMulInteger", "ConvInteger", "MatMulIntegerToFloat",
    "DynamicQuantizeMatMul", "QAttention", "QLinearConvTranspose", "DynamicQuantizeLSTM",
}  # fmt: skip
FLOAT_LAYERS = {
    "Conv", "FusedConv", "ConvTranspose", "Gemm", "FusedGemm", "MatMul", "FusedMatMul", "Attention",
    "MultiHeadAttention", "MatMulNBits", "LSTM", "GRU",
}  # fmt: skip
PLUMBING = {"QuantizeLinear", "DequantizeLinear", "Shape", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}


def ort_coverage(path: Path, options, providers: list[str]) -> dict:
    """Coverage of the .onnx at `path` under a session made with `options` (the runner's) on `providers`."""
    import onnx
    import onnxruntime as ort

    from edgekit.backends.onnx.loader import read_onnx
    from edgekit.backends.onnx.macs import layer_macs

    if options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL:
        # the int8 fusions are made by the extended level; ALL adds the NCHWc layout pass, which renames float
        # convolutions and their weights (relu_nchwc, reorder) and changes no precision
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    with tempfile.TemporaryDirectory() as tmp:
        options.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        ort.InferenceSession(str(path), options, providers=providers)
        optimized = onnx.load(options.optimized_model_filepath)
    source = layer_macs(read_onnx(Path(path)))
    layers, islands = executed(optimized, source)
    return summarize(layers, islands, f"ONNX Runtime's optimized graph ({providers[0]}, its int8 fusions)")


def executed(optimized, source: list[dict]) -> tuple[list[Layer], list[Island]]:
    """The multiplying layers of the optimized graph with their precision and MACs (matched to the source graph's
    layers by weight, else by node name), and the float ops fed by a DequantizeLinear."""
    by_weight = {x["weight"]: x["macs"] for x in source if x["weight"]}
    by_node = {x["node"]: x["macs"] for x in source}
    sizes = {i.name: math.prod(i.dims) for i in optimized.graph.initializer if len(i.dims) >= 2}
    dequantized = {n.output[0] for n in optimized.graph.node if n.op_type == "DequantizeLinear"}
    layers, islands = [], []
    for node in optimized.graph.node:
        name = node.name or node.output[0]
        if node.op_type in INT8_LAYERS or node.op_type in FLOAT_LAYERS:
            precision = INT8 if node.op_type in INT8_LAYERS else FLOAT
            weights = sorted((i for i in node.input if i in sizes), key=lambda i: -sizes[i])
            macs = by_weight.get(weights[0]) if weights and weights[0] in by_weight else _by_name(name, by_node)
            layers.append(Layer(name, node.op_type, precision, macs))
            if precision == FLOAT and any(i in dequantized for i in node.input):
                islands.append(Island(name, node.op_type, macs))
        elif node.op_type not in PLUMBING and any(i in dequantized for i in node.input):
            islands.append(Island(name, node.op_type))
    return layers, islands


def _by_name(name: str, by_node: dict) -> int | None:
    """The MACs of the source node whose name the optimized node's begins with (ORT appends `_token_N` and the like)."""
    matches = [n for n in by_node if n and name.startswith(n) and (len(name) == len(n) or not name[len(n)].isdigit())]
    return by_node[max(matches, key=len)] if matches else None
