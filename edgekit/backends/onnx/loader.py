"""Read ONNX files: signature, parameter count, op histogram."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

from edgekit.artifact import Artifact, TensorSpec
from edgekit.errors import ModelLoadError, first_line


def read_onnx(path: Path, load_weights: bool = True):
    """Load an ONNX model, turning every kind of bad file into one clear error."""
    import onnx
    from google.protobuf.message import DecodeError

    if load_weights:
        check_external_data(read_onnx(path, load_weights=False), path)
    try:
        model = onnx.load(str(path), load_external_data=load_weights)
    except (DecodeError, RuntimeWarning, ValueError, UnicodeDecodeError) as exc:
        raise ModelLoadError(
            f"{Path(path).name} is not a valid ONNX file ({first_line(exc)})", hint="re-export it; a truncated or text file cannot be read"
        ) from None
    except FileNotFoundError as exc:
        raise ModelLoadError(
            f"{Path(path).name}: external data file missing ({first_line(exc)})", hint="keep the .onnx.data file next to the .onnx file"
        ) from None
    if not model.graph.node:
        raise ModelLoadError(
            f"{Path(path).name} is not a valid ONNX file (no graph)", hint="re-export it; the file may be truncated or not ONNX at all"
        )
    return model


def node_attribute(node, name: str, default):
    """An ONNX node's attribute value by name, or `default` where the node does not set it."""
    from onnx import helper

    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def check_external_data(model, path: Path) -> None:
    """Every external data file the ONNX names exists next to it."""
    missing = sorted(loc for loc in _external_locations(model) if not (Path(path).parent / loc).is_file())
    if missing:
        raise ModelLoadError(
            f"{Path(path).name}: its external data file {missing[0]} is missing (looked in {Path(path).parent})",
            hint=f"keep {missing[0]} next to {Path(path).name} (copy or move them together)",
        )


def value_specs(values) -> list[TensorSpec]:
    """TensorSpecs of ONNX graph inputs/outputs."""
    import onnx

    specs = []
    for v in values:
        t = v.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name if t.elem_type else "float32"
        specs.append(TensorSpec(v.name, dims, dtype))
    return specs


def onnx_artifact(path: Path, precision: str | None = None) -> Artifact:
    """An Artifact describing an ONNX file on disk."""
    model = read_onnx(path, load_weights=False)
    check_external_data(model, path)
    inits = {i.name for i in model.graph.initializer}
    inputs = [s for s in value_specs(model.graph.input) if s.name not in inits]
    side = [str(Path(path).parent / loc) for loc in _external_locations(model)]
    meta = {"opset": _opset(model), "producer": f"{model.producer_name} {model.producer_version}".strip(), "side_files": side}
    return Artifact(Path(path), "onnx", precision or guess_precision(model), inputs, value_specs(model.graph.output), meta)


def _opset(model) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _external_locations(model) -> set[str]:
    locations = set()
    for init in model.graph.initializer:
        for entry in init.external_data:
            if entry.key == "location":
                locations.add(entry.value)
    return locations


def guess_precision(model) -> str:
    """fp32, fp16 or int8, from the ops and initializer types."""
    ops = {n.op_type for n in model.graph.node}
    if ops & {"QuantizeLinear", "QLinearConv", "MatMulInteger", "ConvInteger", "DynamicQuantizeLinear"}:
        return "int8-dynamic" if "DynamicQuantizeLinear" in ops else "int8"
    if any(i.data_type == 10 for i in model.graph.initializer):  # TensorProto.FLOAT16
        return "fp16"
    return "fp32"


def has_qdq(path: Path) -> bool:
    """Already statically quantized (Q/DQ or QOperator nodes)."""
    return guess_precision(read_onnx(path, load_weights=False)) == "int8"


def _parameters(graph) -> int:
    """Weights in initializers, Constant nodes and subgraphs (If/Loop/Scan bodies), not only top-level initializers."""
    total = sum(math.prod(i.dims) for i in graph.initializer)
    for node in graph.node:
        for attr in node.attribute:
            if node.op_type == "Constant" and attr.HasField("t"):
                total += math.prod(attr.t.dims)
            if attr.HasField("g"):
                total += _parameters(attr.g)
            total += sum(_parameters(g) for g in attr.graphs)
    return total


def onnx_summary(path: Path) -> dict:
    """What `edgekit info` shows for an ONNX file."""
    model = read_onnx(path)
    params = _parameters(model.graph)
    histogram = Counter(n.op_type for n in model.graph.node)
    return {"parameters": params, "opset": _opset(model), "ops": dict(histogram.most_common())}


def for_conversion(source, given: list[TensorSpec]):
    """Converters take an ONNX file as its path; --input sizes its dynamic dims (a detector's height and width)."""
    from edgekit.targets.base import apply_given_inputs

    return source.path, apply_given_inputs(onnx_artifact(source.path).inputs, given)
