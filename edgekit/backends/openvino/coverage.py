"""int8 coverage as the OpenVINO plugin runs the model: the compiled model's runtime graph, where each executed layer
carries the precision it ran in (rt_info `runtimePrecision`) after the plugin's fusions."""

from __future__ import annotations

import numpy as np

from edgekit.metrics.coverage import FLOAT, INT8, Island, Layer, summarize

MULTIPLY = {"Convolution", "GroupConvolution", "Deconvolution", "FullyConnected", "MatMul", "Gemm", "ScaledDotProductAttention"}
CONVOLUTIONS = {"Convolution", "GroupConvolution", "Deconvolution"}
PLUMBING = {"Input", "Parameter", "Output", "Result", "Const", "Constant", "Reorder", "Reshape", "FakeQuantize", "Convert"}
INT8_TYPES = {"u8", "i8"}


def ov_coverage(compiled, device: str) -> dict:
    """Coverage of an ov.CompiledModel (compiled for a static shape, so each layer's MACs are known)."""
    layers, islands = executed(compiled.get_runtime_model())
    return summarize(layers, islands, f"OpenVINO {device.upper()} plugin's runtime model (runtimePrecision per executed layer)")


def executed(runtime_model) -> tuple[list[Layer], list[Island]]:
    """The multiplying layers with the precision they ran in, and the float ops next to int8 ones."""
    ops = [(op, _info(op)) for op in runtime_model.get_ordered_ops()]
    int8_out = {op.get_friendly_name() for op, info in ops if set(info.get("outputPrecisions", "").split(",")) & INT8_TYPES}
    layers, islands = [], []
    for op, info in ops:
        kind, precision = info.get("layerType", ""), INT8 if info.get("runtimePrecision") in INT8_TYPES else FLOAT
        name, macs = _original_name(op, info), _macs(op, kind) if kind in MULTIPLY else None
        if kind in MULTIPLY:
            layers.append(Layer(name, kind, precision, macs))
        if precision == FLOAT and kind not in PLUMBING and _producers(op) & int8_out:
            islands.append(Island(name, kind, macs))
    return layers, islands


def _original_name(op, info: dict) -> str:
    """The layer as the model named it: of the ops the plugin fused into this one, the convolution or matrix product
    (`node_linear/WithoutBiases`, not `output`, the Add it ends with), without the suffix its ONNX frontend added."""
    names = [n for n in info.get("originalLayersNames", "").split(",") if n] or [op.get_friendly_name()]
    layer = next((n for n in names if "/WithoutBiases" in n), names[0])  # a float FC lists its Add (`output`) first
    return layer.split("/WithoutBiases")[0]


def _info(op) -> dict:
    info = op.get_rt_info()
    return {key: info[key].astype(str) for key in info}


def _producers(op) -> set[str]:
    return {op.input(i).get_source_output().get_node().get_friendly_name() for i in range(op.get_input_size())}


def _macs(op, kind: str) -> int | None:
    """Output elements x the multiplies behind each (a convolution's weight size over its output channels,
    a matrix product's inner dimension); None for a dynamic shape."""
    out = op.output(0).get_partial_shape()
    if out.is_dynamic or op.get_input_size() < 2:
        return None
    dims = [d.get_length() for d in out]
    elements = int(np.prod(dims))  # compiled for one sample
    if kind in CONVOLUTIONS:
        weight = op.input(1).get_partial_shape()
        return None if weight.is_dynamic else elements * int(np.prod([d.get_length() for d in weight])) // dims[1]
    data = op.input(0).get_partial_shape()
    return None if data.is_dynamic else elements * data[len(data) - 1].get_length()
