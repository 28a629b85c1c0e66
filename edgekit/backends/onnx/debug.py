"""ONNX intermediate tensors through ONNX Runtime's QDQ debugging tools.

`qdq_loss_debug.modify_model_output_intermediate_tensors` makes every float tensor a graph output; a QDQ int8
model's tensors are put back under their float model's names by `create_activation_matching` (the value after
QuantizeLinear -> DequantizeLinear: what the int8 model passes on). Graph optimizations are off, so every
tensor exists as written.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

from edgekit.errors import ModelLoadError
from edgekit.fileio import work_folder
from edgekit.metrics.tensors import TensorRef

SAVED = "_ReshapedSavedOutput"  # the suffix qdq_loss_debug gives each saved tensor's output


class OnnxCapture:
    """Every float activation of an ONNX model, by its float name, in graph order."""

    def __init__(self, path: Path) -> None:
        import onnxruntime as ort

        from edgekit.backends.onnx.loader import read_onnx, value_specs

        model = read_onnx(path)
        self.model = model
        self.inputs = [s for s in value_specs(model.graph.input) if s.name not in {i.name for i in model.graph.initializer}]
        self.quantized = any(n.op_type == "QuantizeLinear" for n in model.graph.node)
        self.tensors = _activations(model)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.log_severity_level = 3
        with work_folder(Path(path)) as work:
            augmented = work / "augmented.onnx"
            try:
                from onnxruntime.quantization.qdq_loss_debug import modify_model_output_intermediate_tensors

                modify_model_output_intermediate_tensors(str(path), str(augmented))
                self.session = ort.InferenceSession(str(augmented), options, providers=["CPUExecutionProvider"])
            except Exception as exc:  # ORT raises its own exception types for a graph it cannot run
                raise ModelLoadError(
                    f"ONNX Runtime cannot run {Path(path).name} with its intermediate tensors as outputs: {str(exc).splitlines()[0][:200]}",
                    hint="check the model with `edgekit validate` first",
                ) from None
        self.saved = [o.name for o in self.session.get_outputs()]
        self._shapes: dict[tuple, dict[str, tuple[int, ...]]] = {}  # by the fed shapes: dynamic H, W differ per input

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from onnxruntime.quantization.qdq_loss_debug import create_activation_matching

        values = dict(zip(self.saved, self.session.run(None, feeds), strict=True))
        fed = tuple((name, value.shape) for name, value in feeds.items())
        if fed not in self._shapes:
            self._shapes[fed] = _static_shapes(self.model, dict(fed))
        shapes = self._shapes[fed]
        raw = {
            name.removesuffix(SAVED): [_shaped(v, shapes.get(name.removesuffix(SAVED)))]
            for name, v in values.items()
            if name.endswith(SAVED)
        }
        if not self.quantized:
            return {name: value[0] for name, value in raw.items()}
        matched = create_activation_matching(raw)
        plain = {name: value[0] for name, value in raw.items()}
        return {t.key: matched[t.key]["post_qdq"][0] if t.key in matched else plain.get(t.key) for t in self.tensors}


def _shaped(flat: np.ndarray, shape: tuple[int, ...] | None) -> np.ndarray:
    """A saved tensor (flattened by the saver) in its own shape, where shape inference gave it."""
    return flat.reshape(shape) if shape is not None and int(np.prod(shape)) == flat.size else flat


def _static_shapes(model, fed: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape at the batch fed (1, or the batch a model fixes), for the tensors whose other dims shape
    inference finds with the inputs at the shapes fed (a detector's dynamic height and width included)."""
    import onnx

    model = onnx.ModelProto.FromString(model.SerializeToString())
    for value in model.graph.input:
        for dim, size in zip(value.type.tensor_type.shape.dim, fed.get(value.name, ()), strict=False):
            dim.dim_value = int(size)
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {}
    for value in (*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input):
        dims = [d.dim_value if d.HasField("dim_value") else None for d in value.type.tensor_type.shape.dim]
        if dims and all(d is not None for d in dims[1:]):
            shapes[value.name] = (dims[0] or 1, *dims[1:])
    return shapes


def _activations(model) -> list[TensorRef]:
    """Float tensors computed from the graph inputs, in node order, under their float model's names (QDQ suffixes off)."""
    quantized = {_float_name(n.input[0]) for n in model.graph.node if n.op_type == "QuantizeLinear"}
    return [
        TensorRef(key, node.op_type, _layer(node), inputs=tuple(map(_float_name, node.input)), quantized=key in quantized)
        for node, key in node_outputs(model)
    ]


def _float_name(name: str) -> str:
    """A tensor's name in the float model (a QDQ model's Q/DQ suffixes off)."""
    from onnxruntime.quantization.quant_utils import DEQUANT_OUTPUT_SUFFIX, QUANT_INPUT_SUFFIX

    return name.removesuffix(QUANT_INPUT_SUFFIX).removesuffix(DEQUANT_OUTPUT_SUFFIX)


def node_outputs(model):
    """(node, the name of one of its outputs as the float model calls it) for each node computing from the inputs, in order."""
    live, seen = {i.name for i in model.graph.input}, set()
    for node in model.graph.node:
        if not any(name in live for name in node.input):
            continue
        live.update(node.output)
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        for output in node.output:
            key = _float_name(output)
            if key and key not in seen:
                seen.add(key)
                yield node, key


def _layer(node) -> str:
    """The node's module path where the exporter recorded it (torch.onnx's name scopes), else its node name."""
    scopes = module_scopes(node)
    return f"{node.name} ({scopes[-1]})" if scopes else node.name


def module_scopes(node) -> list[str]:
    """The PyTorch module paths a torch.onnx (dynamo) node came from, outermost first, the op's own name dropped."""

    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.name_scopes":
            try:
                scopes = ast.literal_eval(prop.value)
            except (ValueError, SyntaxError):
                return []
            return [s for s in scopes[:-1] if s]
    return []


def capture(source, partner=None) -> OnnxCapture:
    """`edgekit debug`'s capture of this format (the registry names it): the file's tensors, whatever the partner."""
    return OnnxCapture(source.path)
