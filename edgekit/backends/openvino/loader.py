"""Read OpenVINO IR (.xml + .bin): signature, precision, op histogram."""

from __future__ import annotations

import contextlib
import logging
import math
from collections import Counter
from pathlib import Path

from edgekit.artifact import Artifact, TensorSpec
from edgekit.errors import ModelLoadError


def read_ir(path: Path):
    """Read an IR with one clear error for a missing .bin or a corrupt file."""
    import openvino as ov

    _check_ir_header(Path(path))
    if not Path(path).with_suffix(".bin").exists():
        raise ModelLoadError(
            f"{Path(path).name}: weights file {Path(path).with_suffix('.bin').name} is missing", hint="keep the .bin next to the .xml"
        )
    try:
        return ov.Core().read_model(str(path))
    except RuntimeError as exc:
        raise ModelLoadError(
            f"{Path(path).name} is not a valid OpenVINO IR ({str(exc).splitlines()[0][:200]})",
            hint="re-convert it with `edgekit convert --to openvino`",
            cause=str(exc),
        ) from None


def read_model(path: Path):
    """An IR, or another file OpenVINO reads (ONNX, TFLite), as `edgekit convert --to openvino` converts it:
    ov.convert_model, not Core.read_model, whose graph of the same QDQ ONNX runs different int8 kernels (outputs
    0.27 apart on EfficientNet-Lite0, 8 of 300 top-1 answers flipped), so running a file here predicts the IR."""
    import openvino as ov

    if Path(path).suffix == ".xml":
        return read_ir(path)
    try:
        with root_logger_kept():
            return ov.convert_model(str(path))
    except Exception as exc:  # the frontends raise OpConversionFailure, GeneralFailure and RuntimeError
        raise ModelLoadError(
            f"OpenVINO cannot read {Path(path).name}: {str(exc).strip().splitlines()[0][:200]}",
            hint="check it with `edgekit info`",
            cause=str(exc),
        ) from None


def _check_ir_header(path: Path) -> None:
    """An IR .xml is XML whose root is <net ... version=...>: say so before OpenVINO gives a vaguer message."""
    import xml.etree.ElementTree as ET

    try:
        root = next(ET.iterparse(path, events=("start",)))[1]
    except (ET.ParseError, StopIteration, UnicodeDecodeError) as exc:
        raise ModelLoadError(
            f"{path.name} is not an OpenVINO IR: not XML ({exc})", hint="give the .xml written by OpenVINO (with its .bin beside it)"
        ) from None
    if root.tag != "net" or "version" not in root.attrib or int(root.attrib.get("version", "0") or 0) < 10:
        raise ModelLoadError(
            f"{path.name} is XML but not an OpenVINO IR v10+ (root <{root.tag}>)",
            hint="give the .xml written by OpenVINO (ov.save_model or `edgekit convert --to openvino`)",
        )


def port_specs(ports) -> list[TensorSpec]:
    """TensorSpecs of OpenVINO model inputs/outputs (dynamic dims as None)."""
    specs = []
    for i, port in enumerate(ports):
        shape = port.get_partial_shape()
        dims = tuple(d.get_length() if d.is_static else None for d in shape) if shape.rank.is_static else ()
        name = port.get_any_name() if port.get_names() else f"output_{i}"
        specs.append(TensorSpec(name, dims, port.get_element_type().to_dtype().name))
    return specs


def ir_precision(model) -> str:
    """int8 (FakeQuantize or int8 weights), fp16 (f16 constants) or fp32."""
    ops = Counter(op.get_type_name() for op in model.get_ops())
    const_types = {op.get_output_element_type(0).get_type_name() for op in model.get_ops() if op.get_type_name() == "Constant"}
    if ops["FakeQuantize"]:
        return "int8"
    if {"i8", "u8"} & const_types:
        return "int8-weights"
    return "fp16" if "f16" in const_types else "fp32"


def openvino_artifact(path: Path, precision: str | None = None) -> Artifact:
    model = read_ir(path)
    meta = {"side_files": [str(Path(path).with_suffix(".bin"))]}
    return Artifact(Path(path), "openvino", precision or ir_precision(model), port_specs(model.inputs), port_specs(model.outputs), meta)


def openvino_summary(path: Path) -> dict:
    model = read_ir(path)
    params = sum(math.prod(op.get_output_shape(0)) for op in model.get_ops() if op.get_type_name() == "Constant")
    ops = Counter(op.get_type_name() for op in model.get_ops() if op.get_type_name() not in ("Constant", "Parameter", "Result"))
    return {"parameters": params, "ops": dict(ops.most_common())}


@contextlib.contextmanager
def root_logger_kept():
    """ov.convert_model sets the root logger to ERROR, adds its filter and, where the root has none, its handler, and
    leaves them (openvino.tools.ovc's init_logger): edgekit's warnings after it would vanish, or print in OpenVINO's
    format. The root logger is put back after the block."""
    root = logging.getLogger()
    level, filters, handlers = root.level, list(root.filters), list(root.handlers)
    try:
        yield
    finally:
        root.setLevel(level)
        root.filters, root.handlers = filters, handlers
