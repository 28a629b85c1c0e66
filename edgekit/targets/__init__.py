"""Targets: a runtime on a device, written `runtime:device`. Backends are imported only when used."""

from __future__ import annotations

import importlib

from edgekit.artifact import TensorSpec
from edgekit.errors import EdgekitError
from edgekit.loaders import ModelSource

# Built-in runners as "module:Class": importing one imports no framework.
RUNNERS = {
    "onnxruntime": "edgekit.targets.onnxruntime:OnnxRuntimeRunner",
    "torch": "edgekit.targets.torch:TorchRunner",
    "openvino": "edgekit.targets.openvino:OpenVinoRunner",
    "tensorflow": "edgekit.targets.tensorflow:TensorFlowRunner",
    "litert": "edgekit.targets.litert:LiteRtRunner",
}
DEFAULT_TARGET = {
    "onnx": "onnxruntime:cpu",
    "torch": "torch:cpu",
    "openvino": "openvino:cpu",
    "keras": "tensorflow:cpu",
    "tflite": "litert:cpu",
}


def runner_class(runtime: str):
    """The Runner class registered for `runtime`."""
    if runtime not in RUNNERS:
        raise EdgekitError(f"unknown runtime '{runtime}'", hint=f"known: {', '.join(RUNNERS)} (see `edgekit targets`)")
    module_name, _, cls = RUNNERS[runtime].partition(":")
    return getattr(importlib.import_module(module_name), cls)


def parse_target(target: str) -> tuple[str, str]:
    """'onnxruntime:cpu' -> ('onnxruntime', 'cpu'); a bare runtime means its CPU."""
    runtime, _, device = target.partition(":")
    return runtime, device or "cpu"


def make_runner(source: ModelSource, target: str | None = None, threads: int | None = None, inputs: list[TensorSpec] | None = None):
    """A Runner for `source` on `target` (default: the source's own runtime on the CPU)."""
    target = target or DEFAULT_TARGET.get(source.family)
    if target is None:
        raise EdgekitError(f"no default target for {source.format} models", hint="pass --target (see `edgekit targets`)")
    runtime, device = parse_target(target)
    cls = runner_class(runtime)
    if source.family not in cls.families:
        raise EdgekitError(
            f"{runtime} cannot run a {source.format} model",
            hint=f"{runtime} runs {', '.join(cls.families)} models; convert first with `edgekit convert`",
        )
    return cls(source, device, threads, inputs)
