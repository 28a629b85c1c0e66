"""TensorRT target (`tensorrt:cuda`): runs a serialized engine with device memory managed explicitly.

Device buffers for every input and output are allocated once per input shape (torch's CUDA allocator)
and bound with set_tensor_address; `prepare()` copies host inputs into them, so the latency protocol
times execute_async_v3 plus the copy of the outputs back, and the runtime-reported time is the engine
alone, between two CUDA events on the runner's stream.

Not verified on edgekit's machines: TensorRT cannot be installed there (see the README's support table).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import numpy as np

from edgekit.errors import EdgekitError, RuntimeMissingError
from edgekit.targets.base import DeviceInfo, Runner


@dataclass
class Bindings:
    """Device tensors for one set of input shapes."""

    inputs: dict  # name -> torch CUDA tensor
    outputs: dict  # name -> torch CUDA tensor


class TensorRtRunner(Runner):
    runtime = "tensorrt"
    package = "tensorrt"
    import_name = "tensorrt"
    families = ("tensorrt",)

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        try:
            import torch
        except ImportError:
            return [DeviceInfo("tensorrt:cuda", False, "edgekit's TensorRT runner needs torch (CUDA build) for device memory")]
        cuda = torch.cuda.is_available()
        return [DeviceInfo("tensorrt:cuda", cuda, torch.cuda.get_device_name(0) if cuda else "no CUDA device")]

    @classmethod
    def listed_devices(cls) -> list[DeviceInfo]:
        from edgekit.backends.torch.runner import listed_cuda

        if importlib.util.find_spec("torch") is None:
            return cls.devices()
        return [listed_cuda("tensorrt:cuda")]

    def config(self) -> dict:
        return {**self.identity, "timing": "CUDA events", "memory": "device buffers allocated once per input shape"}

    def _load_impl(self) -> None:
        import torch

        from edgekit.backends.tensorrt.loader import engine_identity, engine_specs, load_engine

        if self.device != "cuda":
            raise EdgekitError(f"TensorRT runs on CUDA GPUs, not '{self.device}'", hint="use --target tensorrt:cuda")
        if not torch.cuda.is_available():
            raise RuntimeMissingError("tensorrt:cuda needs a CUDA GPU and none is visible", hint="run on a machine with an NVIDIA GPU")
        self.identity = engine_identity()
        self._trt_runtime, self.engine = load_engine(self.source.path, self.identity)
        self.context = self.engine.create_execution_context()
        self.inputs, self._outputs = engine_specs(self.engine)
        self.output_names = [s.name for s in self._outputs]
        self.stream = torch.cuda.Stream()
        self._events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        self._buffers: dict[tuple, Bindings] = {}
        self._bound: Bindings | None = None

    def _prepare_impl(self, feeds: dict[str, np.ndarray]) -> Bindings:
        """Copy the inputs into this shape's device buffers (allocated on first use)."""
        import torch

        key = tuple((name, feeds[name].shape) for name in sorted(feeds))
        if key not in self._buffers:
            self._buffers[key] = self._allocate(feeds)
            self._bound = None  # allocating set the context's input shapes: bind again before the next run
        bindings = self._buffers[key]
        with torch.cuda.stream(self.stream):
            for name, array in feeds.items():
                bindings.inputs[name].copy_(torch.from_numpy(np.ascontiguousarray(array)), non_blocking=False)
        return bindings

    def _allocate(self, feeds: dict[str, np.ndarray]) -> Bindings:
        import torch

        inputs = {}
        for name, array in feeds.items():
            if not self.context.set_input_shape(name, tuple(array.shape)):
                raise EdgekitError(
                    f"the engine does not take input '{name}' of shape {'x'.join(map(str, array.shape))}",
                    hint="rebuild with a larger --max-batch, or feed a batch inside the engine's optimisation profile",
                )
            inputs[name] = torch.empty(array.shape, dtype=_torch_dtype(array.dtype), device="cuda")
        outputs = {
            s.name: torch.empty(tuple(self.context.get_tensor_shape(s.name)), dtype=_torch_dtype(np.dtype(s.dtype)), device="cuda")
            for s in self._outputs
        }
        return Bindings(inputs, outputs)

    def _bind(self, bindings: Bindings) -> None:
        for name, tensor in bindings.inputs.items():
            self.context.set_input_shape(name, tuple(tensor.shape))
            self.context.set_tensor_address(name, tensor.data_ptr())
        for name, tensor in bindings.outputs.items():
            self.context.set_tensor_address(name, tensor.data_ptr())
        self._bound = bindings

    def _infer_impl(self, bindings: Bindings) -> list[np.ndarray]:
        if self._bound is not bindings:
            self._bind(bindings)
        start, end = self._events
        start.record(self.stream)
        if not self.context.execute_async_v3(self.stream.cuda_stream):
            raise EdgekitError("TensorRT failed to run the engine", hint="check the TensorRT log above; rebuild the engine on this machine")
        end.record(self.stream)
        end.synchronize()
        return [bindings.outputs[name].cpu().numpy() for name in self.output_names]

    def runtime_ms(self) -> float | None:
        """The engine's time between two CUDA events on its stream."""
        start, end = self._events
        end.synchronize()
        return start.elapsed_time(end)

    def synchronize(self) -> None:
        self.stream.synchronize()


def _torch_dtype(dtype: np.dtype):
    import torch

    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype
