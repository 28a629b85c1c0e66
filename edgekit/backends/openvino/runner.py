"""OpenVINO target: CPU, GPU, NPU, AUTO. Runs IR (and ONNX) compiled for one static shape at a time.

Static shapes, because the NPU rejects dynamic ones, and because OpenVINO 2026.4.1 returned wrong
logits on a dynamic-batch model after a large batch: each batch size gets its own compiled model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgekit.machine import cpu_model
from edgekit.targets.base import DeviceInfo, Runner

KNOWN_DEVICES = ("CPU", "GPU", "NPU", "AUTO")
INTEL = "0x8086"  # PCI vendor id: OpenVINO's GPU plugin drives Intel GPUs


class OpenVinoRunner(Runner):
    """Threads (INFERENCE_NUM_THREADS), the latency hint and f32 execution are set and recorded."""

    runtime = "openvino"
    package = "openvino"
    import_name = "openvino"
    families = ("openvino", "onnx")

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        import openvino as ov

        core = ov.Core()
        found = set(core.available_devices)
        rows = []
        for device in KNOWN_DEVICES:
            if device == "AUTO" or device in found or any(f.startswith(device + ".") for f in found):
                rows.append(DeviceInfo(f"openvino:{device.lower()}", True, _describe_device(core, device)))
            else:
                rows.append(DeviceInfo(f"openvino:{device.lower()}", False, "not present on this machine"))
        return rows

    @classmethod
    def listed_devices(cls) -> list[DeviceInfo]:
        """CPU and AUTO always; an Intel GPU from its DRM render node, an NPU from the accel driver (Linux)."""

        gpu = any(_read(vendor) == INTEL for vendor in Path("/sys/class/drm").glob("renderD*/device/vendor"))
        npu = any(Path("/dev/accel").glob("accel*"))
        absent = "not present on this machine"
        return [
            DeviceInfo("openvino:cpu", True, cpu_model()),
            DeviceInfo("openvino:gpu", gpu, "Intel GPU" if gpu else absent),
            DeviceInfo("openvino:npu", npu, "NPU (/dev/accel)" if npu else absent),
            DeviceInfo("openvino:auto", True, "picks the best available device"),
        ]

    def config(self) -> dict:
        """The compile settings, recorded in reports."""
        config = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1"}
        if self.device.upper() == "CPU":
            # f32 runs the IR as stored: on AMX/AVX512-BF16 CPUs OpenVINO would otherwise compute in bf16.
            config |= {"INFERENCE_NUM_THREADS": str(self.threads), "INFERENCE_PRECISION_HINT": "f32"}
        return config

    def int8_coverage(self) -> dict:
        """What the plugin runs in int8: the runtime model compiled for one sample (the shapes timing uses at batch 1)."""
        from edgekit.backends.openvino.coverage import ov_coverage
        from edgekit.calibration import random_samples

        compiled, _ = self._request(next(random_samples(self.inputs, 1).batches(1)))
        return ov_coverage(compiled, self.device)

    def runtime_ms(self) -> float | None:
        """OpenVINO's own measure of the last request, as benchmark_app reports it."""
        return self._last_request.latency

    def _load_impl(self) -> None:
        import openvino as ov

        from edgekit.backends.openvino.loader import port_specs, read_model

        self.core = ov.Core()  # the device was checked by Runner.load (_check_device)
        self.model = read_model(self.source.path)
        self.inputs = port_specs(self.model.inputs)
        self.output_names = [s.name for s in port_specs(self.model.outputs)]
        self._compiled: dict[tuple, object] = {}

    def _request(self, feeds: dict[str, np.ndarray]):
        key = tuple((name, tuple(feeds[name].shape)) for name in sorted(feeds))
        if key not in self._compiled:
            model = self.model.clone()
            model.reshape({name: list(shape) for name, shape in key})
            compiled = self.core.compile_model(model, self.device.upper(), self.config())
            self._compiled[key] = (compiled, compiled.create_infer_request())
        return self._compiled[key]

    def _prepare_impl(self, feeds: dict[str, np.ndarray]) -> dict:
        """OpenVINO tensors in memory it allocated (aligned), so a request never copies its inputs."""
        import openvino as ov

        return {name: ov.Tensor(np.ascontiguousarray(array)) for name, array in feeds.items()}

    def _infer_impl(self, feeds: dict) -> list[np.ndarray]:
        compiled, request = self._request(feeds)
        # Prepared tensors set in place, then a synchronous infer() as benchmark_app's sync mode does: the
        # CPU plugin runs it on the calling thread. start_async()/wait() hands the request to a worker
        # thread and measured 4-8% slower on a 1.2 ms int8 model.
        for port in compiled.inputs:
            request.set_tensor(port, feeds[port.get_any_name()])
        request.infer(share_outputs=True)
        self._last_request = request
        return [request.get_output_tensor(i).data.copy() for i in range(len(compiled.outputs))]


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _describe_device(core, device: str) -> str:
    if device == "AUTO":
        return "picks the best available device"
    try:
        name = core.get_property(device, "FULL_DEVICE_NAME")
        caps = core.get_property(device, "OPTIMIZATION_CAPABILITIES")
        return f"{name}; precisions: {', '.join(caps)}"
    except RuntimeError:
        return device
