"""PyTorch target: the reference model itself, eager, on the CPU (or CUDA where present)."""

from __future__ import annotations

import numpy as np

from edgekit.errors import RuntimeMissingError
from edgekit.targets.base import DeviceInfo, Runner


class TorchRunner(Runner):
    """Runs a torch.nn.Module (any torch source edgekit loads) under inference_mode."""

    runtime = "torch"
    package = "torch"
    import_name = "torch"
    families = ("torch",)

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        import torch

        cuda = torch.cuda.is_available()
        return [DeviceInfo("torch:cpu", True), DeviceInfo("torch:cuda", cuda, torch.cuda.get_device_name(0) if cuda else "no CUDA device")]

    def _load_impl(self) -> None:
        import torch

        from edgekit.loaders.torch import load_torch, resolve_input_specs

        if self.device == "cuda" and not torch.cuda.is_available():
            raise RuntimeMissingError(
                "torch:cuda needs a CUDA GPU and a CUDA build of torch", hint="use --target torch:cpu on this machine"
            )
        torch.set_num_threads(self.threads)
        module, declared = load_torch(self.source)
        self.inputs = resolve_input_specs(module, declared, self.inputs)
        self.module = module.to(self.device)
        self.output_names = []

    def _infer_impl(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        import torch

        args = [torch.from_numpy(np.ascontiguousarray(feeds[s.name])).to(self.device) for s in self.inputs]
        with torch.inference_mode():
            out = self.module(*args)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        if not self.output_names:
            self.output_names = [f"output_{i}" for i in range(len(outs))] if len(outs) > 1 else ["output"]
        return [o.detach().float().cpu().numpy() if o.dtype.is_floating_point else o.cpu().numpy() for o in outs]

    def synchronize(self) -> None:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()
