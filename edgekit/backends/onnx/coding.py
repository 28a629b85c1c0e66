"""The coded size of an ONNX model as Deep Compression stores it (the registry's `coded_size` for ONNX)."""

from __future__ import annotations

import gzip

import onnx
from onnx import numpy_helper

from edgekit.metrics.coding import storage_table


def coded_bytes(path) -> int:
    """Coded size of an ONNX model: weight initializers (>= 64 elements) as Deep Compression codes them, the rest gzip-compressed."""
    model = onnx.load(str(path), load_external_data=True)
    large = {}
    for tensor in model.graph.initializer:
        array = numpy_helper.to_array(tensor)
        if array.size >= 64:
            large[tensor.name] = array
            tensor.CopyFrom(onnx.TensorProto(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims))  # keep only the header
    rest = len(gzip.compress(model.SerializeToString(), compresslevel=9))
    return storage_table(large)["total"]["coded_bytes"] + rest
