"""A detector's box decoding inside its graph, which static int8 keeps in float on every runtime.

A YOLOv8-style head decodes its boxes in the graph: a softmax over each side's distance bins, their expectation (a
1x1 Conv of one output channel: Ultralytics' DFL), the distances turned into corners around the anchors and scaled by
the strides, then concatenated with the class probabilities. In int8, the softmax's 1/255 steps, the expectation's
rounded weights (0..15 on an int8 grid) and the pixel coordinates rounded to 1/255 of the image's span move each box by
about a pixel: mAP@0.5 holds, mAP@0.5:0.95 does not. On the zoo detector (zoo:fashion-det, 200 labelled canvases) fp32
scores mAP@0.5:0.95 0.835; all-int8 0.752 on ONNX Runtime, 0.785 OpenVINO, 0.788 LiteRT, 0.781 ExecuTorch (2-core AMD
EPYC, x86-vnni). These ops hold a few thousand values and no weights worth int8 arithmetic; their cost is a fixed
few dozen microseconds (ONNX Runtime: 0.22 -> 0.27-0.35 ms on that 0.29 ms fp32 model; YOLOv8n at 1024x1024 keeps 0.59
of fp32's p50). Ultralytics' own OpenVINO int8 export ignores the same ops (the head's Add/Sub/Mul/Div and its DFL).

Found by its shape: a Softmax read by a Conv with a [1, K, 1, 1] kernel (directly, or through transposes and reshapes
as Ultralytics' exports have it), then the weightless ops from that Conv to the outputs. The other backends find the same shape in their own graphs (backends.openvino.nncf_int8,
backends.torch.pt2e_patterns).
"""

from __future__ import annotations

from pathlib import Path

from edgekit.backends.onnx.exponential_ops import readers_of

WEIGHTED = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm"})  # a walk downstream stops at a layer with weights
LAYOUT = frozenset({"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Flatten"})  # moves values, computes none


def box_decoding(model) -> list[str]:
    """Names of the nodes of `model` (an onnx ModelProto or path) that decode boxes: each bins' Softmax, its
    expectation Conv and the weightless nodes downstream of it, in graph order; [] for a model without one."""
    import onnx

    if isinstance(model, (str, Path)):
        model = onnx.load(str(model), load_external_data=False)
    shapes = {i.name: tuple(i.dims) for i in model.graph.initializer}
    readers = readers_of(model)
    decoding: set[int] = set()
    for softmax in (n for n in model.graph.node if n.op_type == "Softmax"):
        path = [softmax]
        while len(following := readers.get(path[-1].output[0], [])) == 1 and following[0].op_type in LAYOUT:
            path.append(following[0])
        for conv in following:
            if conv.op_type == "Conv" and _expectation(shapes.get(conv.input[1])):
                decoding |= {id(node) for node in (*path, conv)}
                _downstream(conv, readers, decoding)
    return [node.name for node in model.graph.node if id(node) in decoding and node.name]


def _expectation(weight: tuple | None) -> bool:
    """A [1, K, 1, 1] kernel: one output channel summing K bins (K >= 2)."""
    return weight is not None and len(weight) == 4 and weight[0] == 1 and weight[1] >= 2 and weight[2:] == (1, 1)


def _downstream(start, readers: dict, found: set[int]) -> None:
    """Add to `found` the nodes reached from `start`'s outputs through weightless nodes (a weighted one stops the walk)."""
    todo = [r for out in start.output for r in readers.get(out, [])]
    while todo:
        node = todo.pop()
        if node.op_type in WEIGHTED or id(node) in found:
            continue
        found.add(id(node))
        todo.extend(r for out in node.output for r in readers.get(out, []))
