"""Per-layer int8 sensitivity of a PyTorch module (edgekit.quantization.sensitivity's ranking): each Conv and Linear
weight fake-quantized in turn, the module's first output compared with its float output.

A layer's weight changes only the ops it reaches, so the ranking runs torch.export's graph of the module and, for each
layer, only those ops, from the values the reference pass kept where they read the rest (`_SuffixRuns`): on
EfficientNet-Lite0 each layer reruns on average about half the network. Where the module does not export, the kept
values would pass KEPT_BYTES or the graph's outputs are not the module's to the last bit, every layer reruns the whole
module, as it does for a model so small that the reruns would take less than the export (SUFFIX_FROM_SECONDS, from the
timed reference run). Both ways give the same losses (EfficientNet-Lite0, 16 crops: equal to the last bit, 28 -> 15
CPU-seconds with the export)."""

from __future__ import annotations

import copy
import time

import numpy as np
import torch

from edgekit.calibration.samples import unpadded
from edgekit.quantization.sensitivity import SAMPLES, LayerSensitivity, WeightLayer, fake_quantize, rank

KEPT_BYTES = 1 << 30  # the reference pass's values kept for the layers' reruns, at most
SUFFIX_FROM_SECONDS = 4.0  # whole reruns estimated to take less (a small model): torch.export would cost more than it saves


def first_output(out) -> np.ndarray:
    """A torch model's first output (of a tuple or list, or the tensor itself) as an array."""
    first = out[0] if isinstance(out, (tuple, list)) else out
    return np.asarray(first.detach() if hasattr(first, "detach") else first)


def torch_sensitivity(module, samples, specs, count: int = SAMPLES, fixed: int | None = None) -> tuple[list[LayerSensitivity], int]:
    """(layers ranked by loss, total parameters) of a torch module: Conv and Linear weights fake-quantized one
    module at a time, on the first `count` samples; `fixed`: the batch a module exported at a fixed batch takes
    (backends.torch.loader.exported_batch), None for any."""
    layers = [(name, m) for name, m in module.named_modules() if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Linear))]
    feeds = [
        ([torch.from_numpy(np.ascontiguousarray(batch[s.name])) for s in specs], real)
        for batch, real in samples.head(count).counted_batches(count, fixed)
    ]
    started = time.perf_counter()
    with torch.no_grad():
        reference = [module(*args) for args, _ in feeds]
    worth = (time.perf_counter() - started) * len(layers) > SUFFIX_FROM_SECONDS
    runs = _SuffixRuns.of(module, [name for name, _ in layers], [args for args, _ in feeds], reference) if worth else None

    def evaluate(layer: WeightLayer | None) -> list[np.ndarray]:
        outs = reference if layer is None else replaced(layer.name)
        return [unpadded([first_output(o)], fixed, real)[0] for o, (_, real) in zip(outs, feeds, strict=True)]

    def replaced(name: str) -> list:
        target = dict(layers)[name]
        quantized = torch.from_numpy(fake_quantize(target.weight.detach().numpy(), 0))
        with torch.no_grad():
            return runs.outputs(name, quantized) if runs is not None else _whole_runs(module, target, quantized, feeds)

    weights = [WeightLayer(name, type(m).__name__, "weight", 0, m.weight.numel()) for name, m in layers]
    return rank(weights, evaluate), sum(p.numel() for p in module.parameters())


def _whole_runs(module, target, quantized, feeds) -> list:
    """The module's outputs on each batch with `target`'s weight replaced by `quantized` (restored after)."""
    saved, target.weight.data = target.weight.data, quantized
    try:
        return [module(*args) for args, _ in feeds]
    finally:
        target.weight.data = saved


class _SuffixRuns:
    """The module's outputs with one layer's weight replaced, computing only the ops that weight reaches: torch.export's
    graph of the module, run by torch.fx's Interpreter from the values the reference pass kept."""

    def __init__(self, graph, batches: list, weights: dict, reached: dict, kept: list[dict], reference: list) -> None:
        self.graph, self.batches, self.weights, self.reached = graph, batches, weights, reached
        self.kept, self.reference = kept, reference

    @classmethod
    def of(cls, module, layers: list[str], batches: list, eager: list) -> _SuffixRuns | None:
        """None where the module does not export on the first batch, a layer's weight is not a graph attribute, the
        values to keep pass KEPT_BYTES, or the graph's outputs are not the module's `eager` ones to the last bit."""
        try:
            graph = torch.export.export(copy.deepcopy(module), tuple(batches[0])).module()
        except Exception:  # noqa: BLE001 - whatever stops the export, the whole module reruns instead
            return None
        attributes = {n.target: n for n in graph.graph.nodes if n.op == "get_attr"}
        if any(f"{name}.weight" not in attributes for name in layers):
            return None
        weights = {name: attributes[f"{name}.weight"] for name in layers}
        reached = {name: _reached(node) for name, node in weights.items()}
        frontier = {n for nodes in reached.values() for n in _read_by(nodes)}
        kept, reference, budget = [], [], KEPT_BYTES
        for args in batches:
            keeper = _Keeper(graph, frontier, budget)
            with torch.no_grad():
                reference.append(keeper.run(*args))
            if keeper.over:
                return None
            kept.append(keeper.kept)
            budget = keeper.budget  # what the batches kept so far leave
        if not all(np.array_equal(first_output(a), first_output(b)) for a, b in zip(reference, eager, strict=True)):
            return None
        return cls(graph, batches, weights, reached, kept, reference)

    def outputs(self, layer: str, weight: torch.Tensor) -> list:
        """The outputs on each batch with `layer`'s weight `weight`."""
        reached = self.reached[layer]
        if not any(n.op == "output" for n in reached):  # the layer does not reach the outputs
            return self.reference
        unread = {n: None for n in self.graph.graph.nodes if n not in reached and n.op not in ("get_attr", "output")}
        return [
            torch.fx.Interpreter(self.graph).run(*args, initial_env={**unread, **self._read(kept, reached), self.weights[layer]: weight})
            for args, kept in zip(self.batches, self.kept, strict=True)
        ]

    @staticmethod
    def _read(kept: dict, reached: set) -> dict:
        """The kept values a layer's rerun reads: those outside what its weight reaches (the rest it computes anew)."""
        return {n: value for n, value in kept.items() if n not in reached}


class _Keeper(torch.fx.Interpreter):
    """A run of the graph that keeps the values of the nodes `keep`, up to `budget` bytes (`over` past it)."""

    def __init__(self, graph, keep: set, budget: int) -> None:
        super().__init__(graph)
        self.keep, self.kept, self.budget, self.over = keep, {}, budget, False

    def run_node(self, n):
        value = super().run_node(n)
        if n in self.keep and not self.over:
            self.kept[n] = value
            self.budget -= _bytes(value)
            self.over = self.budget < 0
        return value


def _bytes(value) -> int:
    """The bytes of a tensor, or of the tensors in a tuple or list."""
    if isinstance(value, (tuple, list)):
        return sum(_bytes(v) for v in value)
    return value.numel() * value.element_size() if torch.is_tensor(value) else 0


def _reached(weight) -> set:
    """The weight's get_attr node and every node whose value depends on it."""
    reached, stack = {weight}, [weight]
    while stack:
        for user in stack.pop().users:
            if user not in reached:
                reached.add(user)
                stack.append(user)
    return reached


def _read_by(nodes: set) -> set:
    """The values computed outside `nodes` that `nodes` read (attributes are fetched again, not kept)."""
    return {source for n in nodes for source in n.all_input_nodes if source not in nodes and source.op != "get_attr"}
