"""TFLite intermediate tensors: the LiteRT interpreter with every tensor preserved and no delegate.

XNNPACK would run most of the graph as one opaque node, so the builtin kernels run it instead
(`experimental_preserve_all_tensors=True` keeps every tensor readable after invoke). Integer tensors are
dequantized with their scale and zero-point; a QUANTIZE/DEQUANTIZE op's output is matched by its input's name.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from edgekit.metrics.tensors import TensorRef

CONVERSION_OPS = ("QUANTIZE", "DEQUANTIZE")
SCOPE = re.compile(r"^(?:[\w]+\.)+_*[A-Za-z0-9]+_(\w+)$")  # litert-torch's scope: module.path.Class_attribute


def module_layer(name: str) -> str | None:
    """The PyTorch modules a litert-torch tensor name records, as `features.0.{0,1,2}` (a conv fused with its batch norm
    and ReLU); None for other converters' names, or a name of the root module only.

    litert-torch names a tensor by the scopes of the modules that made it, `Root/pkg.Class_attr/...`, fused ops joined
    by ';;', an output index after ';'. A ModuleList that is not called (EfficientNet's `_blocks`) leaves no scope."""
    paths = set()
    for part in name.split(";;"):
        scopes = re.sub(r";\d*$", "", part).split("/")[1:]
        attributes = [SCOPE.match(scope) for scope in scopes]
        if not all(attributes):
            return None
        if attributes:
            paths.add(".".join(a.group(1) for a in attributes))
    if not paths:
        return None
    if len(paths) == 1:
        return paths.pop()
    prefix = ".".join(os.path.commonprefix([p.split(".")[:-1] for p in paths]))  # each path keeps a name of its own
    leaves = sorted(p[len(prefix) + 1 :] if prefix else p for p in paths)
    return f"{prefix}.{{{','.join(leaves)}}}" if prefix else " + ".join(leaves)


class TfliteCapture:
    """Every op output of a .tflite model, dequantized, keyed by tensor name, in execution order."""

    ops_kept = True  # int8 and fp32 graphs of one converter keep the op types: pairs may be made by type and order

    def __init__(self, path: Path) -> None:
        from edgekit.backends.tflite.interpreter import loaded_interpreter, tensor_spec

        self.interpreter = loaded_interpreter(path, delegate=False, preserve_tensors=True)
        self._in = self.interpreter.get_input_details()
        self.inputs = [tensor_spec(d) for d in self._in]
        self._details = {d["index"]: d for d in self.interpreter.get_tensor_details()}
        self.tensors, self._index = self._op_outputs()

    def _op_outputs(self) -> tuple[list[TensorRef], dict[str, int]]:
        """Activations in op order; a QUANTIZE/DEQUANTIZE output is the same activation as its input (an alias)."""
        rows: dict[str, list] = {}  # name -> [op, layer, aliases]
        index: dict[str, int] = {}
        for op in self.interpreter._get_ops_details():
            for tensor in map(int, op["outputs"]):
                if not self._activation(tensor):
                    continue
                name = self._details[tensor]["name"]
                source = self._details.get(int(op["inputs"][0])) if len(op["inputs"]) else None
                if op["op_name"] in CONVERSION_OPS:
                    if source is not None and source["name"] in rows:
                        rows[source["name"]][2].append(name)
                        index[source["name"]] = tensor  # the value the next op reads
                    continue
                if name not in rows:
                    index[name] = tensor
                    rows[name] = [op["op_name"], module_layer(name) or f"#{op['index']} {op['op_name']}", []]
        return [TensorRef(name, op, layer, tuple(aliases)) for name, (op, layer, aliases) in rows.items()], index

    def _activation(self, tensor: int) -> bool:
        """A float tensor, or an integer one with a scale (quantized): not shapes and indices."""
        detail = self._details.get(tensor)
        if detail is None:
            return False
        kind = np.dtype(detail["dtype"]).kind
        return kind == "f" or (kind in "iu" and detail["quantization"][0] != 0)

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from edgekit.backends.tflite.interpreter import dequantize, quantize

        for detail, spec in zip(self._in, self.inputs, strict=True):
            self.interpreter.set_tensor(detail["index"], quantize(feeds[spec.name], detail))
        self.interpreter.invoke()
        return {name: dequantize(self.interpreter.get_tensor(i), self._details[i]) for name, i in self._index.items()}


def capture(source, partner=None) -> TfliteCapture:
    """`edgekit debug`'s capture of this format (the registry names it): the file's tensors, whatever the partner."""
    return TfliteCapture(source.path)
