"""OpenVINO intermediate tensors: every op output computed from the inputs made a model output (`add_outputs`).

An op's output is keyed by the op's friendly name and port, with its tensor names as aliases: an IR read from
ONNX keeps the ONNX tensor names, so it matches an ONNX model; an NNCF int8 IR keeps the float IR's op names.
Where NNCF put a FakeQuantize after an output, the FakeQuantize's value is taken (what the int8 model passes on).
The model runs on the CPU in f32 (no bf16), one sample at a time, or in the batch a model with a fixed batch takes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgekit.metrics.tensors import TensorRef

DEBUG_NAME = "edgekit_debug_"
SKIPPED = ("Parameter", "Constant", "Result", "FakeQuantize", "Convert", "ShapeOf")


class OpenVinoCapture:
    """Every float op output of an IR (or an ONNX file read by OpenVINO), in topological order."""

    def __init__(self, path: Path) -> None:
        import openvino as ov

        from edgekit.backends.openvino.loader import port_specs, read_model

        self.core = ov.Core()
        model = read_model(path)
        self.inputs = port_specs(model.inputs)
        self.tensors, ports = _op_outputs(model)
        for i, port in enumerate(ports):  # a name of our own to read each value back by
            port.get_tensor().add_names({f"{DEBUG_NAME}{i}"})
        model.add_outputs(ports)
        self.model, self.batch = model, None

    def _compile(self, batch: int) -> None:
        """Compile for batches of `batch`: a dynamic batch dim set to it (other dynamic dims stay so: a page's H, W)."""
        if any(p.get_partial_shape().is_dynamic for p in self.model.inputs):
            self.model.reshape(
                {
                    p.get_any_name(): [batch, *[d.get_length() if d.is_static else -1 for d in list(p.get_partial_shape())[1:]]]
                    for p in self.model.inputs
                }
            )
        config = {"INFERENCE_NUM_THREADS": "1", "INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}
        self.compiled = self.core.compile_model(self.model, "CPU", config)
        self.request = self.compiled.create_infer_request()
        by_name = {name: i for i, port in enumerate(self.compiled.outputs) for name in port.get_names()}
        # a port that already was a model output keeps only its own names
        self._outputs = [
            by_name.get(f"{DEBUG_NAME}{i}", next((by_name[n] for n in t.aliases if n in by_name), None)) for i, t in enumerate(self.tensors)
        ]
        self.batch = batch

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        batch = len(next(iter(feeds.values())))
        if batch != self.batch:
            self._compile(batch)
        self.request.infer({port: feeds[port.get_any_name()] for port in self.compiled.inputs})
        return {
            t.key: self.request.get_output_tensor(i).data.copy() for t, i in zip(self.tensors, self._outputs, strict=True) if i is not None
        }


def _op_outputs(model) -> tuple[list[TensorRef], list]:
    """Float outputs of ops that depend on a Parameter, each as (ref, the port whose value to read)."""
    live, refs, ports = set(), [], []
    for op in model.get_ordered_ops():
        kind = op.get_type_name()
        if kind == "Parameter" or any(_source(i).get_name() in live for i in op.inputs()):
            live.add(op.get_name())
        if op.get_name() not in live or kind in SKIPPED:
            continue
        for output in op.outputs():
            if output.get_element_type().get_type_name() not in ("f32", "f16", "bf16"):
                continue
            name = f"{op.get_friendly_name()}:{output.get_index()}"
            reads = tuple(
                f"{i.get_source_output().get_node().get_friendly_name()}:{i.get_source_output().get_index()}" for i in op.inputs()
            )
            port = _after_fake_quantize(output)
            refs.append(TensorRef(name, kind, op.get_friendly_name(), tuple(sorted(output.get_names())), reads, port != output))
            ports.append(port)
    return refs, ports


def _source(port):
    return port.get_source_output().get_node()


def _after_fake_quantize(output):
    """The FakeQuantize output that follows `output` where every reader goes through one, else `output`."""
    readers = [t.get_node() for t in output.get_target_inputs()]
    if len(readers) == 1 and readers[0].get_type_name() == "FakeQuantize":
        return readers[0].output(0)
    return output


def capture(source, partner=None) -> OpenVinoCapture:
    """`edgekit debug`'s capture of this format (the registry names it): the file's tensors, whatever the partner."""
    return OpenVinoCapture(source.path)
