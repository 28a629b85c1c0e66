"""A detector's box decoding inside its graph, which static int8 keeps in float on every runtime: one rule, each
backend giving its graph as a `Graph` (backends.onnx.box_decoding, backends.openvino.nncf_int8,
backends.torch.pt2e_patterns).

A YOLOv8-style head decodes its boxes in the graph: a softmax over each side's distance bins, their expectation (a
1x1 conv of one output channel: Ultralytics' DFL), the distances turned into corners around the anchors and scaled by
the strides, then concatenated with the class probabilities. In int8, the softmax's 1/255 steps, the expectation's
rounded weights (0..15 on an int8 grid) and the pixel coordinates rounded to 1/255 of the image's span move each box by
about a pixel: mAP@0.5 holds, mAP@0.5:0.95 does not. On the zoo detector (zoo:fashion-det, 200 labelled canvases) fp32
scores mAP@0.5:0.95 0.835; all-int8 0.752 on ONNX Runtime, 0.785 OpenVINO, 0.788 LiteRT, 0.781 ExecuTorch (2-core AMD
EPYC, x86-vnni). These ops hold a few thousand values and no weights worth int8 arithmetic; their cost is a fixed
few dozen microseconds (ONNX Runtime: 0.22 -> 0.27-0.35 ms on that 0.29 ms fp32 model; YOLOv8n at 1024x1024 keeps 0.59
of fp32's p50). Ultralytics' own OpenVINO int8 export ignores the same ops (the head's Add/Sub/Mul/Div and its DFL).

Found by its shape: a softmax read by a conv with a [1, K, 1, 1] kernel (directly, or through transposes and reshapes
as Ultralytics' exports have it), then the weightless ops from that conv to the outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

# What a backend's node is, for this walk: anything else is an op without weights, which the walk goes through.
SOFTMAX, LAYOUT, CONV, WEIGHTED, END = "softmax", "layout", "conv", "weighted", "end"  # END: an output, not an op


@dataclass(frozen=True)
class Graph:
    """A backend's graph as this walk reads it. `kind(node)`: SOFTMAX, LAYOUT (moves values, computes none), CONV (its
    `kernel(node)` is its weight's shape), WEIGHTED (another layer with weights), END, or anything else; `key(node)`:
    the same value for the same node however the backend hands it out."""

    nodes: Sequence  # in graph order
    readers: Callable[[object], list]
    kind: Callable[[object], str]
    kernel: Callable[[object], tuple | None]
    key: Callable[[object], Hashable]


def box_decoding(graph: Graph) -> list:
    """The nodes that decode boxes, in graph order: each bins' softmax, the layout ops after it, the conv taking their
    expectation and the weightless nodes downstream of it; [] for a graph without one."""
    found: set = set()
    for softmax in (n for n in graph.nodes if graph.kind(n) == SOFTMAX):
        path = [softmax]
        while len(following := graph.readers(path[-1])) == 1 and graph.kind(following[0]) == LAYOUT:
            path.append(following[0])
        for conv in following:
            if graph.kind(conv) == CONV and _expectation(graph.kernel(conv)):
                found |= {graph.key(node) for node in (*path, conv)}
                _downstream(graph, conv, found)
    return [node for node in graph.nodes if graph.key(node) in found]


def _expectation(kernel: tuple | None) -> bool:
    """A [1, K, 1, 1] kernel: one output channel summing K bins (K >= 2)."""
    return kernel is not None and len(kernel) == 4 and kernel[0] == 1 and kernel[1] >= 2 and tuple(kernel[2:]) == (1, 1)


def _downstream(graph: Graph, start, found: set) -> None:
    """Add to `found` the nodes reached from `start` through nodes without weights, to the outputs."""
    todo = list(graph.readers(start))
    while todo:
        node = todo.pop()
        if graph.kind(node) in (CONV, WEIGHTED, END) or graph.key(node) in found:
            continue
        found.add(graph.key(node))
        todo.extend(graph.readers(node))
