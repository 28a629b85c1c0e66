"""A detector's box decoding in an ONNX graph, which static int8 keeps in float (quantization.box_decoding: the rule,
and why)."""

from __future__ import annotations

from pathlib import Path

from edgekit.backends.onnx.exponential_ops import readers_of
from edgekit.quantization.box_decoding import CONV, LAYOUT, SOFTMAX, WEIGHTED, Graph
from edgekit.quantization.box_decoding import box_decoding as decoding_nodes

KINDS = {
    "Softmax": SOFTMAX,
    "Conv": CONV,
    **dict.fromkeys(("ConvTranspose", "MatMul", "Gemm"), WEIGHTED),
    **dict.fromkeys(("Transpose", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Flatten"), LAYOUT),
}


def box_decoding(model) -> list[str]:
    """Names of the nodes of `model` (an onnx ModelProto or path) that decode boxes, in graph order; [] for a model
    without a box decoding."""
    import onnx

    if isinstance(model, (str, Path)):
        model = onnx.load(str(model), load_external_data=False)
    shapes = {i.name: tuple(i.dims) for i in model.graph.initializer}
    readers = readers_of(model)
    graph = Graph(
        nodes=list(model.graph.node),
        readers=lambda node: [r for out in node.output for r in readers.get(out, [])],
        kind=lambda node: KINDS.get(node.op_type, ""),
        kernel=lambda node: shapes.get(node.input[1]) if len(node.input) > 1 else None,
        key=id,
    )
    return [node.name for node in decoding_nodes(graph) if node.name]
