"""PyTorch target: the reference model itself on the CPU or a CUDA GPU, eager or torch.compile'd, fp32/fp16/bf16.

Options (`torch:cuda[compile=reduce-overhead,dtype=fp16,channels_last=1]`):
- compile: eager (default), default, reduce-overhead (CUDA graphs on a GPU), max-autotune.
- dtype: fp32 (default), fp16, bf16: the weights and float inputs are cast; outputs come back as float32.
- channels_last: 0 (default) or 1: the module's 4-D weights and the 4-D inputs in channels-last (NHWC)
  memory order; same shapes, same results, faster convolutions on tensor cores (and some CPUs).

Inputs are moved to the device and cast once in `prepare()`, so the latency protocol times the model
call (on CUDA the runtime-reported time comes from CUDA events around it). Compilation happens on the
first calls and is timed apart (`compile_seconds`), never mixed into run time.
"""

from __future__ import annotations

import re
import time

import numpy as np

from edgekit.errors import ConversionError, RuntimeMissingError
from edgekit.machine import nvidia_gpus
from edgekit.targets.base import DeviceInfo, Runner, package_files

COMPILE_MODES = ("eager", "default", "reduce-overhead", "max-autotune")
DTYPES = ("fp32", "fp16", "bf16")
COMPILE_CALLS = 3  # reduce-overhead records its CUDA graph on the calls after the first


def listed_cuda(target: str) -> DeviceInfo:
    """`target` (torch:cuda, tensorrt:cuda) as told without importing torch: a CUDA (or ROCm) build of torch and a GPU the driver lists."""

    build = next((f.read_text() for f in package_files("torch", "version.py")), "")
    gpu_build = re.search(r"^(cuda|hip)\b.*=\s*'[^']+'", build, re.MULTILINE)
    gpus = nvidia_gpus()
    if not gpu_build:
        return DeviceInfo(target, False, "torch is a CPU-only build")
    return DeviceInfo(target, bool(gpus), gpus[0] if gpus else "no CUDA device")


class TorchRunner(Runner):
    """Runs a torch.nn.Module (any torch source edgekit loads) under inference_mode."""

    runtime = "torch"
    package = "torch"
    import_name = "torch"
    families = ("torch",)
    options = {"compile": COMPILE_MODES, "dtype": DTYPES, "channels_last": ("0", "1")}

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        import torch

        cuda = torch.cuda.is_available()
        return [DeviceInfo("torch:cpu", True), DeviceInfo("torch:cuda", cuda, torch.cuda.get_device_name(0) if cuda else "no CUDA device")]

    @classmethod
    def listed_devices(cls) -> list[DeviceInfo]:
        return [DeviceInfo("torch:cpu", True), listed_cuda("torch:cuda")]

    def config(self) -> dict:
        import torch

        config = dict(self.settings)
        if self.device == "cuda":
            config |= {"gpu": torch.cuda.get_device_name(0), "cuda": torch.version.cuda, "timing": "CUDA events"}
        return config

    def _load_impl(self) -> None:
        import torch

        from edgekit.backends.torch.loader import load_torch, resolve_input_specs

        if self.device == "cuda" and not torch.cuda.is_available():
            raise RuntimeMissingError(
                "torch:cuda needs a CUDA GPU and a CUDA build of torch", hint="use --target torch:cpu on this machine"
            )
        torch.set_num_threads(self.threads)
        module, declared = load_torch(self.source)
        self.inputs = resolve_input_specs(module, declared, self.inputs)
        self.dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[self.settings["dtype"]]
        self.module = module.to(self.device, self.dtype)  # load_torch returns it in eval mode where it has one
        self.memory_format = torch.channels_last if self.settings["channels_last"] == "1" else torch.contiguous_format
        self.module = self.module.to(memory_format=self.memory_format)
        self.forward = self.module
        self.output_names = []
        self._events = None
        if self.device == "cuda":
            self._events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))

    def fixed_batch(self) -> int | None:
        """A module takes any batch, whatever --input's shape says, unless it is a .pt2 exported at a fixed batch."""
        from edgekit.backends.torch.loader import exported_batch

        if self.load_seconds is None:
            self.load()
        return exported_batch(self.module)

    def _prepare_impl(self, feeds: dict[str, np.ndarray]) -> list:
        """Device tensors in the run dtype; the first preparation also compiles (timed apart)."""
        import torch

        args = [self._tensor(torch, feeds[s.name]) for s in self.inputs]
        if self.settings["compile"] != "eager" and self.forward is self.module:
            self._compile(torch, args)
        return args

    def _tensor(self, torch, array: np.ndarray):
        tensor = torch.from_numpy(np.ascontiguousarray(array)).to(self.device)
        if not tensor.is_floating_point():
            return tensor
        tensor = tensor.to(self.dtype)
        return tensor.contiguous(memory_format=self.memory_format) if tensor.dim() == 4 else tensor

    def _compile(self, torch, args: list) -> None:
        """torch.compile, then enough calls to finish compiling (and record CUDA graphs); their time is compile time."""
        start = time.perf_counter()
        mode = self.settings["compile"]
        compiled = torch.compile(self.module, mode=None if mode == "default" else mode)
        try:
            for _ in range(COMPILE_CALLS):
                self._call(torch, compiled, args)
            self.synchronize()
        except Exception as exc:  # inductor raises many types; the first line says what failed
            raise ConversionError(
                f"torch.compile(mode={mode}) failed: {str(exc).strip().splitlines()[0][:200]}",
                hint="run eager (drop compile=...), or check that a C++ compiler is installed for the CPU backend",
            ) from None
        self.forward = compiled
        self.compile_seconds = time.perf_counter() - start

    def _call(self, torch, forward, args: list):
        if self.settings["compile"] == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()
        with torch.inference_mode():
            return forward(*args)

    def _infer_impl(self, args: list) -> list[np.ndarray]:
        import torch

        if self._events:
            self._events[0].record()
        out = self._call(torch, self.forward, args)
        if self._events:
            self._events[1].record()
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        if not self.output_names:
            self.output_names = [f"output_{i}" for i in range(len(outs))] if len(outs) > 1 else ["output"]
        return [o.detach().float().cpu().numpy() if o.is_floating_point() else o.cpu().numpy() for o in outs]

    def runtime_ms(self) -> float | None:
        """On CUDA: the model call's time between two CUDA events (GPU time, no host transfer)."""
        if not self._events:
            return None
        self._events[1].synchronize()
        return self._events[0].elapsed_time(self._events[1])

    def peak_gpu_memory_mb(self) -> float | None:
        """torch.cuda.max_memory_allocated: the process's peak through torch's allocator (it runs alone: one process per bench)."""
        if self.device != "cuda":
            return None
        import torch

        return torch.cuda.max_memory_allocated() / 2**20

    def synchronize(self) -> None:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()
