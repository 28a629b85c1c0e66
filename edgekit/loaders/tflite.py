"""Read .tflite files: signature, precision, ops and which of them the XNNPACK delegate takes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from edgekit.artifact import Artifact
from edgekit.errors import ModelLoadError
from edgekit.native import stderr_silenced


def _interpreter(path: Path, delegate: bool = True):
    from edgekit.targets.litert import interpreter_class

    interpreter, _ = interpreter_class()
    try:
        kwargs = {} if delegate else {"experimental_op_resolver_type": _builtin_without_default_delegates()}
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
    from edgekit.targets.litert import interpreter_class

    module = __import__(interpreter_class()[0].__module__, fromlist=["OpResolverType"])
    return module.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES


def tflite_artifact(path: Path, precision: str | None = None) -> Artifact:
    from edgekit.targets.litert import _spec, tensor_name

    model = _interpreter(path)
    inputs = [_spec(d) for d in model.get_input_details()]
    outputs = [_spec(d) for d in model.get_output_details()]
    io_types = sorted({np.dtype(d["dtype"]).name for d in model.get_input_details()})
    meta = {"io_dtype": io_types, "input_tensors": [tensor_name(d["name"]) for d in model.get_input_details()]}
    return Artifact(Path(path), "tflite", precision or _precision(path), inputs, outputs, meta)


def _precision(path: Path) -> str:
    """fp16 (float16 tensors), int8 (QUANTIZE ops or integer I/O), int8-dynamic (int8 weights only), fp32."""
    plain = _interpreter(path, delegate=False)
    types = {np.dtype(d["dtype"]).name for d in plain.get_tensor_details()}
    ops = {op["op_name"] for op in plain._get_ops_details()}
    io_int = any(np.dtype(d["dtype"]).kind in "iu" for d in plain.get_input_details())
    if "float16" in types:
        return "fp16"
    if "QUANTIZE" in ops or (io_int and "int8" in types):
        return "int8"
    return "int8-dynamic" if "int8" in types else "fp32"


def tflite_summary(path: Path) -> dict:
    """Ops of the graph, and which of them the default XNNPACK delegate runs (the rest run on the CPU kernels)."""
    graph = _interpreter(path)._interpreter
    names = [graph.NodeName(n) for n in range(graph.NumNodes())]
    delegates = [n for n, name in enumerate(names) if name == "DELEGATE"]
    original = [n for n, name in enumerate(names) if name != "DELEGATE"]
    taken = set().union(*(_covered(graph, d, original) for d in delegates)) if delegates else set()
    ops = Counter(names[n] for n in original)
    on_cpu = Counter(names[n] for n in original if n not in taken)
    delegate = {
        "name": "XNNPACK",
        "partitions": len(delegates),
        "ops_total": len(original),
        "ops_on_delegate": len(taken),
        "ops_on_cpu": dict(on_cpu.most_common()),
    }
    return {"ops": dict(ops.most_common()), "delegate": delegate}


def _covered(graph, delegate: int, original: list[int]) -> set[int]:
    """Original nodes a delegate node replaced: those on paths from its outputs back to its inputs."""
    producer = {t: n for n in original for t in graph.NodeOutputs(n)}
    boundary = set(graph.NodeInputs(delegate))
    covered, stack = set(), [t for t in graph.NodeOutputs(delegate)]
    while stack:
        node = producer.get(stack.pop())
        if node is None or node in covered:
            continue
        covered.add(node)
        stack.extend(t for t in graph.NodeInputs(node) if t not in boundary and t >= 0)
    return covered
