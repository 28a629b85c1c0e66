"""The TFLite interpreter, whichever package has one (ai-edge-litert, else tflite_runtime or tf.lite on older boards):
a model loaded with or without the XNNPACK delegate, its tensors' names and specs, and the (de)quantization of an
integer tensor with its scale and zero-point. What the loader, the runner, int8 coverage and debug read a .tflite with.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import numpy as np

from edgekit.artifact import TensorSpec
from edgekit.errors import ModelLoadError, RuntimeMissingError
from edgekit.native import stderr_silenced

INTERPRETERS = (
    ("ai_edge_litert.interpreter", "ai-edge-litert"),
    ("tflite_runtime.interpreter", "tflite-runtime"),
    ("tensorflow.lite", "tensorflow"),
)


def interpreter_class():
    """The first Interpreter class available, and the package it came from."""
    for module, package in INTERPRETERS:
        if importlib.util.find_spec(module.split(".")[0]) is not None:
            try:
                return importlib.import_module(module).Interpreter, package
            except (ImportError, AttributeError):
                continue
    raise RuntimeMissingError("no TFLite interpreter is installed", hint="pip install ai-edge-litert")


def tensor_name(raw: str) -> str:
    """'serving_default_image:0' -> 'image'."""
    return raw.removeprefix("serving_default_").split(":")[0]


def loaded_interpreter(path: Path, delegate: bool = True, preserve_tensors: bool = False):
    """A loaded interpreter; without the delegate the builtin kernels run every op (and can keep every tensor)."""
    interpreter, _ = interpreter_class()
    try:
        kwargs = {} if delegate else {"experimental_op_resolver_type": _builtin_without_default_delegates()}
        if preserve_tensors:
            kwargs["experimental_preserve_all_tensors"] = True
        with stderr_silenced():
            model = interpreter(model_path=str(path), num_threads=1, **kwargs)
            model.allocate_tensors()
        return model
    except (ValueError, RuntimeError) as exc:
        raise ModelLoadError(
            f"{Path(path).name} is not a valid TFLite model ({str(exc).splitlines()[0][:200]})",
            hint="re-convert it with `edgekit convert --to tflite`",
        ) from None


def _builtin_without_default_delegates():
    module = __import__(interpreter_class()[0].__module__, fromlist=["OpResolverType"])
    return module.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES


def tensor_spec(detail: dict) -> TensorSpec:
    """An input's or output's name, shape (None where the batch resizes) and the dtype validation feeds: float for a
    quantized tensor (the runner quantizes it)."""
    signature = detail.get("shape_signature", detail["shape"])
    dims = tuple(None if d < 0 else int(d) for d in signature)
    dtype = "float32" if _quantized(detail) else np.dtype(detail["dtype"]).name  # validation feeds float; we quantize
    return TensorSpec(tensor_name(detail["name"]), dims, dtype)


def _quantized(detail: dict) -> bool:
    scale, _ = detail["quantization"]
    return np.dtype(detail["dtype"]).kind in "iu" and scale != 0


def quantize(array: np.ndarray, detail: dict) -> np.ndarray:
    """Float -> the tensor's integer type with its scale and zero-point (unchanged if not quantized)."""
    if not _quantized(detail):
        return array
    scale, zero_point = detail["quantization"]
    info = np.iinfo(detail["dtype"])
    return np.clip(np.round(array / scale + zero_point), info.min, info.max).astype(detail["dtype"])


def dequantize(array: np.ndarray, detail: dict) -> np.ndarray:
    if not _quantized(detail):
        return array
    scale, zero_point = detail["quantization"]
    return (array.astype(np.float32) - zero_point) * scale
