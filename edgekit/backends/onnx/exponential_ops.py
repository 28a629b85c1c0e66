"""The ops around an exponential, which static int8 keeps in float.

exp(x) spans orders of magnitude: no one int8 scale holds e^-40 .. e^40, and an amplified input (DBNet's
binarization 1 / (1 + exp(-k (P - T))), k = 50) turns one int8 step of its input into a factor of e^(k step).
Quantized as every other activation, the tensor after Exp rounds 1 + exp(...) to 0 and the reciprocal of it is
infinite (the DBNet-style zoo:text-db gives non-finite maps). ONNX Runtime has no int8 kernel for Exp or
Reciprocal, so keeping the chain in float costs no int8 arithmetic:
- the elementwise ops that compute an Exp's input (the amplifier: Mul / Div / Sub / Neg / Add, back to the first
  other op), and
- the elementwise ops that read its output (Add, Reciprocal, Div, ..., up to the first other op).
Softmax, Sigmoid and the like are single ops with bounded outputs: they are not in the chain.
"""

from __future__ import annotations

from pathlib import Path

ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Neg", "Reciprocal"})


def exponential_chains(model) -> list[str]:
    """Names of the nodes of `model` (an onnx ModelProto or path) to keep in float: each Exp and the elementwise
    ops on either side of it, in graph order."""
    import onnx

    if isinstance(model, (str, Path)):
        model = onnx.load(str(model), load_external_data=False)
    producer = {out: node for node in model.graph.node for out in node.output}
    readers = readers_of(model)
    chain: set[int] = set()
    for exp in (n for n in model.graph.node if n.op_type == "Exp"):
        chain.add(id(exp))
        _walk(exp, lambda node: [producer[i] for i in node.input if i in producer], chain)
        _walk(exp, lambda node: [r for out in node.output for r in readers.get(out, [])], chain)
    return [node.name for node in model.graph.node if id(node) in chain and node.name]


def readers_of(model) -> dict[str, list]:
    """Each tensor's name -> the nodes that read it, in graph order."""
    readers: dict[str, list] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    return readers


def _walk(start, neighbours, chain: set[int]) -> None:
    """Add to `chain` the elementwise nodes reached from `start` through elementwise nodes only."""
    todo = list(neighbours(start))
    while todo:
        node = todo.pop()
        if node.op_type in ELEMENTWISE and id(node) not in chain:
            chain.add(id(node))
            todo.extend(neighbours(node))
