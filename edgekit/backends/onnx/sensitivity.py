"""Per-layer int8 weight sensitivity of an ONNX model, measured with ONNX Runtime in one session.

The weights of the measured layers are exposed as graph inputs that keep their initializers as
defaults (ONNX allows overriding such initializers), so one session serves every layer: the
reference run feeds only the data, each layer's run feeds its fake-quantized weights too.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgekit.artifact import TensorSpec, fixed_batch
from edgekit.backends.onnx.loader import node_attribute
from edgekit.calibration.samples import Samples, unpadded
from edgekit.quantization.sensitivity import SAMPLES, LayerSensitivity, WeightLayer, fake_quantize, rank

BATCH = 8


def weight_layers(model) -> list[WeightLayer]:
    """Conv, ConvTranspose, Gemm and MatMul nodes whose weight is an initializer, in graph order."""
    inits = {i.name: i for i in model.graph.initializer}
    layers = []
    for node in model.graph.node:
        weight, axis = _weight_of(node, inits)
        if weight is not None:
            name = node.name or node.output[0]
            layers.append(WeightLayer(name, node.op_type, weight, axis, int(np.prod(inits[weight].dims))))
    return layers


def _weight_of(node, inits) -> tuple[str | None, int]:
    """The node's weight initializer and its output-channel axis, or (None, 0)."""
    if node.op_type in ("Conv", "ConvTranspose") and len(node.input) > 1 and node.input[1] in inits:
        return node.input[1], 0 if node.op_type == "Conv" else 1
    if node.op_type == "Gemm" and len(node.input) > 1 and node.input[1] in inits:
        return node.input[1], 0 if node_attribute(node, "transB", 0) else 1
    if node.op_type == "MatMul" and len(node.input) > 1 and node.input[1] in inits and len(inits[node.input[1]].dims) == 2:
        return node.input[1], 1
    return None, 0


def onnx_sensitivity(
    model_path: Path, samples: Samples, count: int = SAMPLES, threads: int | None = None, quantized: dict | None = None
) -> tuple[list[LayerSensitivity], int]:
    """(layers ranked by loss, total weight parameters) on the first `count` samples.

    `quantized` ({layer name: {initializer: value}}, from `dequantized_layers`): each of those layers measured with
    the weights and bias a quantized model really holds, instead of round-to-nearest (sensitivity.fake_quantize)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(model_path))
    layers = [layer for layer in weight_layers(model) if quantized is None or layer.name in quantized]
    overridden = (
        {name for layer in layers for name in quantized[layer.name]} if quantized is not None else {layer.weight for layer in layers}
    )
    values = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer if i.name in overridden}
    session = ort_session(_weights_as_inputs(model, values), threads)
    probe = samples.head(count)
    fixed = session_batch(session, probe)
    feeds = list(probe.counted_batches(BATCH, fixed))

    def evaluate(layer: WeightLayer | None) -> list[np.ndarray]:
        if layer is None:
            extra = {}
        elif quantized is not None:
            extra = quantized[layer.name]
        else:
            extra = {layer.weight: fake_quantize(values[layer.weight], layer.axis)}
        runs = [unpadded(session.run(None, {**batch, **extra}), fixed, real) for batch, real in feeds]
        return [np.concatenate(chunks) for chunks in zip(*runs, strict=True)]

    total = sum(int(np.prod(i.dims)) for i in model.graph.initializer)
    return rank(layers, evaluate), total


def dequantized_layers(int8, pre) -> dict[str, dict[str, np.ndarray]]:
    """{layer name: {the float model's weight (and bias) initializer: the value the QDQ model `int8` gives it}} for
    each weight layer of `pre` (ModelProto) that `int8` (ModelProto) reads through constant DequantizeLinears."""
    from onnx import numpy_helper

    inits = {i.name: i for i in int8.graph.initializer}
    producers = {o: n for n in int8.graph.node for o in n.output}
    floats = {i.name: i for i in pre.graph.initializer}
    nodes = {n.name or n.output[0]: n for n in int8.graph.node}
    float_nodes = {n.name or n.output[0]: n for n in pre.graph.node}
    layers = {}
    for layer in weight_layers(pre):
        node, float_node = nodes.get(layer.name), float_nodes[layer.name]
        values = {}
        for index in (1, 2):
            dq = producers.get(node.input[index]) if node is not None and len(node.input) > index else None
            if dq is None or dq.op_type != "DequantizeLinear" or dq.input[0] not in inits or len(float_node.input) <= index:
                continue
            arrays = [numpy_helper.to_array(inits[name]) for name in dq.input[1:3] if name in inits]
            axis = node_attribute(dq, "axis", 1)
            values[float_node.input[index]] = _dequantize(numpy_helper.to_array(inits[dq.input[0]]), *arrays, axis=axis)
        if layer.weight in values and all(name in floats for name in values):
            layers[layer.name] = {name: value.astype(numpy_helper.to_array(floats[name]).dtype) for name, value in values.items()}
    return layers


def _dequantize(codes: np.ndarray, scale: np.ndarray, zero: np.ndarray | None = None, axis: int = 1) -> np.ndarray:
    """ONNX DequantizeLinear of a constant: per tensor, or per channel along `axis`."""
    shape = [1] * codes.ndim
    if scale.size > 1:
        shape[axis % codes.ndim] = -1

    def along(array: np.ndarray) -> np.ndarray:
        return array.astype(np.float64).reshape(shape if array.size > 1 else ())

    offset = 0.0 if zero is None else along(zero)
    return ((codes.astype(np.float64) - offset) * along(scale)).astype(np.float32)


def _weights_as_inputs(model, weights: dict[str, np.ndarray]) -> bytes:
    from onnx import helper

    for name, array in weights.items():
        dtype = helper.np_dtype_to_tensor_dtype(array.dtype)
        model.graph.input.append(helper.make_tensor_value_info(name, dtype, array.shape))
    model.ir_version = max(model.ir_version, 4)  # overridable initializers need IR >= 4
    return model.SerializeToString()


def tensor_batches(model, names, samples: Samples, batch: int = BATCH, threads: int | None = None):
    """Yield, for each batch of `samples`, {name: value} of the tensors `names` of the ONNX `model` (a ModelProto,
    left as it is): a copy of it with each made a graph output, run once; graph inputs come from the feeds."""
    import onnx
    from onnx import helper

    proto = onnx.ModelProto()
    proto.CopyFrom(model)
    present = {o.name for o in proto.graph.output} | {i.name for i in proto.graph.input}
    for name in dict.fromkeys(names):
        if name not in present:
            proto.graph.output.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    session = ort_session(proto.SerializeToString(), threads)
    fetched = [o.name for o in session.get_outputs()]
    fixed = session_batch(session, samples)
    for feeds, real in samples.counted_batches(batch, fixed):
        values = {**feeds, **dict(zip(fetched, session.run(None, feeds), strict=True))}
        yield dict(zip(values, unpadded(list(values.values()), fixed, real), strict=True))


def outputs(model, samples: Samples, threads: int | None = None) -> list[np.ndarray]:
    """Every output of the ONNX `model` (a path or serialized bytes) over `samples`, run on ONNX Runtime in batches."""
    session = ort_session(model if isinstance(model, bytes) else str(model), threads)
    fixed = session_batch(session, samples)
    runs = [unpadded(session.run(None, feeds), fixed, real) for feeds, real in samples.counted_batches(BATCH, fixed)]
    return [np.concatenate(chunks) for chunks in zip(*runs, strict=True)]


def session_batch(session, samples: Samples) -> int | None:
    """The batch the session's model fixes for the inputs `samples` feed (artifact.fixed_batch), None where it takes any."""
    specs = [TensorSpec(i.name, tuple(i.shape)) for i in session.get_inputs() if i.name in samples.arrays]
    return fixed_batch(specs)


def ort_session(model_bytes: bytes, threads: int | None):
    """A CPU session over `threads` threads (None: the cores this process may use)."""
    import onnxruntime as ort

    from edgekit.targets.base import default_threads

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or default_threads()
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
