"""PyTorch module outputs (forward hooks), named after the ONNX tensors the exporter made of them: `edgekit debug`'s
capture of a PyTorch reference (the registry names it for the torch format), which only an ONNX artifact exported from
it can be matched to; so it lives with the ONNX backend, above the torch one.

torch.onnx's dynamo exporter records on each node the module path it came from (`pkg.torch.onnx.name_scopes`).
A module's output is the output of the last node inside its scope; a module whose computation the exporter
folded away (a Conv into a following BatchNorm's node) has no tensor of its own and is not compared. A module
called more than once per forward has no single output and is skipped too.
"""

from __future__ import annotations

import numpy as np

from edgekit.backends.onnx.debug import OnnxCapture, module_scopes, node_outputs
from edgekit.errors import EdgekitError
from edgekit.metrics.tensors import TensorRef


class TorchCapture:
    """Outputs of the modules of a PyTorch model that an ONNX export of it names."""

    def __init__(self, source, onnx_model, inputs) -> None:
        import torch

        from edgekit.backends.torch.loader import load_torch

        module, _ = load_torch(source)
        if not isinstance(module, torch.nn.Module) or isinstance(module, torch.jit.ScriptModule):
            raise EdgekitError(
                f"{source.spec}: forward hooks need a PyTorch nn.Module (a factory or a .pt2 program)",
                hint="name the model as module:factory",
            )
        self.module, self.inputs = module, list(inputs)
        order = scope_outputs(onnx_model)
        names = {path: key for path, _ in module.named_modules() if path and (key := order.get(path, (None,))[0])}
        if not names:
            raise EdgekitError(
                "the ONNX artifact records no PyTorch module scopes (pkg.torch.onnx.name_scopes)",
                hint="export it with `edgekit convert --to onnx` (torch.onnx dynamo exporter) from this same model",
            )
        modules = dict(module.named_modules())
        by_key: dict[str, str] = {}
        for path in sorted(names, key=lambda p: (order[p][1], -p.count("."))):
            by_key.setdefault(names[path], path)  # the innermost module whose output it is
        self.tensors = [TensorRef(key, type(modules[path]).__name__, path) for key, path in by_key.items()]
        self._paths = {path: key for key, path in by_key.items()}
        self._hooks = [modules[path].register_forward_hook(self._hook(path)) for path in self._paths]
        self._values: dict[str, list] = {}

    def _hook(self, path: str):
        def record(_module, _args, output):
            if hasattr(output, "detach"):
                self._values.setdefault(self._paths[path], []).append(
                    output.detach().float().numpy().copy()
                )  # before an in-place op changes it

        return record

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        self._values = {}
        with torch.no_grad():
            self.module(*(torch.from_numpy(np.ascontiguousarray(feeds[s.name])) for s in self.inputs))
        return {key: values[0] for key, values in self._values.items() if len(values) == 1}


def scope_outputs(onnx_model) -> dict[str, tuple[str, int]]:
    """Module path -> (the ONNX tensor its last node writes, that node's position), from the exporter's name scopes."""
    found: dict[str, tuple[str, int]] = {}
    for position, (node, key) in enumerate(node_outputs(onnx_model)):
        for scope in module_scopes(node):
            found[scope] = (key, position)
    return found


def capture(source, partner=None) -> TorchCapture:
    """`edgekit debug`'s capture of a PyTorch reference (the registry names it): matched to an ONNX artifact's module scopes."""
    if not isinstance(partner, OnnxCapture):
        raise EdgekitError(
            f"a PyTorch reference ({source.spec}) can be matched to an ONNX artifact only: ONNX records the module each node came from",
            hint="export it with `edgekit convert MODEL --to onnx` and debug that ONNX against the PyTorch model",
        )
    return TorchCapture(source, partner.model, partner.inputs)
