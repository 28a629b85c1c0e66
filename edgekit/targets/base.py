"""Runner: one model loaded in one runtime on one device. Backends fill in the `_impl` methods."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from edgekit.artifact import TensorSpec, check_array, fixed_batch, is_generated_name
from edgekit.errors import EdgekitError, InputMismatchError, RuntimeMissingError
from edgekit.source import ModelSource


def package_files(import_name: str, pattern: str) -> list[Path]:
    """Files matching `pattern` inside an installed package's folder, found without importing it."""
    spec = importlib.util.find_spec(import_name)
    folders = list(spec.submodule_search_locations or []) if spec else []
    return [path for folder in folders for path in Path(folder).glob(pattern)]


@dataclass(frozen=True)
class DeviceInfo:
    """A device a runtime can use, as `edgekit targets` shows it."""

    target: str
    available: bool
    detail: str = ""


def default_threads() -> int:
    """The cores this process may run on: the default thread count, always recorded."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


DEVICE_HINTS = {  # what to install for a device edgekit's runner for that runtime does not drive here
    "npu": "an NPU needs its vendor's runtime: OpenVINO with the Intel NPU driver (openvino:npu), or the vendor's LiteRT "
    "delegate (Qualcomm QNN, MediaTek NeuroPilot) on the board; the numerics can be checked here on litert:cpu",
    "gpu": "a GPU target needs a GPU and its runtime: onnxruntime-gpu (onnxruntime:cuda), torch with CUDA (torch:cuda), "
    "tensorflow[and-cuda] (tensorflow:gpu) or the Intel GPU driver (openvino:gpu)",
    "cuda": "needs an NVIDIA GPU with its driver, and onnxruntime-gpu / torch with CUDA / tensorrt",
}


class Runner:
    """Template: `load()` and `infer()` check and time; subclasses implement `_load_impl`/`_infer_impl`."""

    runtime: ClassVar[str]
    package: ClassVar[str]  # what to pip install
    import_name: ClassVar[str]
    families: ClassVar[tuple[str, ...]]  # model families it runs
    options: ClassVar[dict[str, tuple[str, ...]]] = {}  # target options it takes -> allowed values (first = default)

    def __init__(
        self,
        source: ModelSource,
        device: str = "cpu",
        threads: int | None = None,
        inputs: list[TensorSpec] | None = None,
        options: dict[str, str] | None = None,
    ) -> None:
        self.source = source
        self.device = device
        self.threads = threads or default_threads()
        self.inputs: list[TensorSpec] = list(inputs or [])
        self.given_inputs: list[TensorSpec] = list(inputs or [])  # --input, applied to the loaded model's specs
        self.output_names: list[str] = []
        self.load_seconds: float | None = None
        self.compile_seconds: float | None = None  # set by runners that compile on first use (torch.compile)
        self.settings = self._check_options(options or {})

    @property
    def target(self) -> str:
        """runtime:device, with the options given (so a report's target reproduces the run)."""
        given = {k: v for k, v in self.settings.items() if v != self.options[k][0]}
        return f"{self.runtime}:{self.device}" + (f"[{','.join(f'{k}={v}' for k, v in given.items())}]" if given else "")

    def _check_options(self, given: dict[str, str]) -> dict[str, str]:
        """Every option this runner takes, set to the given or default value; unknown keys or values are errors."""
        for key, value in given.items():
            if key not in self.options:
                takes = ", ".join(self.options) or "no options"
                raise EdgekitError(f"{self.runtime} targets take no option '{key}'", hint=f"{self.runtime} takes: {takes}")
            if value not in self.options[key]:
                raise EdgekitError(
                    f"{self.runtime} option {key}={value} is not one of {', '.join(self.options[key])}", hint="see `edgekit targets`"
                )
        return {key: given.get(key, values[0]) for key, values in self.options.items()}

    @classmethod
    def installed(cls) -> bool:
        return importlib.util.find_spec(cls.import_name) is not None

    @classmethod
    def require(cls) -> None:
        if not cls.installed():
            raise RuntimeMissingError(f"{cls.runtime} is not installed", hint=f"pip install {cls.package}")

    @classmethod
    def version(cls) -> str:
        try:
            return importlib.metadata.version(cls.package)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        """Devices this runtime offers here, as the runtime itself says (imports it): what `load()` checks."""
        raise NotImplementedError

    @classmethod
    def listed_devices(cls) -> list[DeviceInfo]:
        """The same devices told from the package's files and the system, importing no framework (`edgekit targets`)."""
        raise NotImplementedError

    def load(self) -> float:
        """Load the model; returns and records the load time in seconds."""
        self.require()
        self._check_device()
        start = time.perf_counter()
        self._load_impl()
        self.inputs = apply_given_inputs(self.inputs, self.given_inputs)
        self.load_seconds = time.perf_counter() - start
        return self.load_seconds

    def _check_device(self) -> None:
        """The device asked for is one this runtime offers and has here: a report never names a device that did not run."""
        offered = {d.target.split(":", 1)[1].lower(): d for d in self.devices()}
        info = offered.get(self.device.lower().split(".")[0])
        if info is None:
            raise RuntimeMissingError(
                f"{self.runtime} has no device '{self.device}' here (it offers {', '.join(offered)})",
                hint=DEVICE_HINTS.get(self.device.lower(), f"run on {self.runtime}:cpu, or see `edgekit targets`"),
            )
        if not info.available:
            installable = "install" in info.detail
            raise RuntimeMissingError(
                f"{self.runtime}:{self.device} is not available here" + ("" if installable else f": {info.detail or 'not present'}"),
                hint=info.detail if installable else DEVICE_HINTS.get(self.device.lower(), "see `edgekit targets`"),
            )

    def fixed_batch(self) -> int | None:
        """The batch the loaded model takes only (artifact.fixed_batch of its inputs): every batch fed to it must be
        exactly this size (Samples.batches fills the last one up). None: any batch."""
        if self.load_seconds is None:
            self.load()
        return fixed_batch(self.inputs)

    def infer(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Run one batch; `feeds` maps input names to arrays. Returns outputs in model order."""
        return self.run(self.prepare(feeds))

    def prepare(self, feeds: dict[str, np.ndarray]):
        """Check float/numpy feeds and turn them into the runtime's own input form (quantized, device tensors).

        The latency protocol prepares once and times `run()`, as an application feeding the runtime
        its native inputs would see it, and as the runtimes' own benchmark tools measure.
        """
        if self.load_seconds is None:
            self.load()
        batch = feed_batch(self.inputs, feeds)
        feeds = {**{s.name: s.constant(batch) for s in self.inputs if s.value is not None}, **feeds}
        self._check_feeds(feeds)
        return self._prepare_impl(feeds)

    def run(self, prepared) -> list[np.ndarray]:
        """Run one batch of prepared inputs."""
        return self._infer_impl(prepared)

    def _prepare_impl(self, feeds: dict[str, np.ndarray]):
        return feeds

    def _check_feeds(self, feeds: dict[str, np.ndarray]) -> None:
        expected = {s.name: s for s in self.inputs}
        if set(feeds) != set(expected):
            raise InputMismatchError(
                f"inputs {sorted(feeds)} do not match the model's inputs {sorted(expected)}",
                hint="name arrays in DATA after the model's inputs (see `edgekit info`)",
            )
        for name, array in feeds.items():
            check_array(expected[name], array)

    def _load_impl(self) -> None:
        raise NotImplementedError

    def _infer_impl(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        raise NotImplementedError

    def synchronize(self) -> None:
        """Wait for queued device work (GPU runners); a no-op on the CPU."""

    def runtime_ms(self) -> float | None:
        """The last inference's time as the runtime itself measured it (no Python overhead), where it reports one."""
        return None

    def peak_gpu_memory_mb(self) -> float | None:
        """The most GPU memory this process allocated through the runtime (weights, activations, buffers); None off a GPU."""
        return None

    def config(self) -> dict:
        """Runtime settings that change speed, recorded in reports (threads are recorded separately)."""
        return {}

    def int8_coverage(self) -> dict | None:
        """How much of the loaded model this runtime executes in int8 (metrics.coverage.summarize's dict), read from the
        runtime itself; None where it cannot say."""
        return None


def apply_given_inputs(model: list[TensorSpec], given: list[TensorSpec]) -> list[TensorSpec]:
    """The model's input specs with --input's sizes for its dynamic dims (the batch axis stays the batch).

    An --input naming no model input, or contradicting a fixed dim, is an error, never ignored."""
    if not given or not model:
        return model
    names = [s.name for s in model]
    unknown = [g.name for g in given if g.name not in names]
    if len(unknown) == len(given) == len(model) and all(is_generated_name(n) for n in names):
        given = [TensorSpec(spec.name, g.shape, g.dtype, g.value) for spec, g in zip(model, given, strict=True)]  # a converter renamed them
        unknown = []
    if unknown:
        raise InputMismatchError(
            f"--input names {unknown}, but the model's inputs are {names}", hint="name the model's inputs (see `edgekit info`)"
        )
    by_name = {g.name: g for g in given}
    return [_apply_one(s, by_name[s.name]) if s.name in by_name else s for s in model]


def _apply_one(spec: TensorSpec, given: TensorSpec) -> TensorSpec:
    if given.value is not None:  # a constant: the model's shape (a scalar, or [1]), the given value
        return TensorSpec(spec.name, spec.shape, spec.dtype, given.value)
    if len(given.shape) != len(spec.shape):
        raise InputMismatchError(
            f"--input {given.name}:{given.shape_text()} has {len(given.shape)} dims; the model's input is {spec.shape_text()}",
            hint=f"give all {len(spec.shape)} dims",
        )
    axis = given.batch_axis() if given.batch_axis() != 0 else spec.batch_axis()  # --input may name the batch axis
    dims = []
    for i, (have, want) in enumerate(zip(spec.shape, given.shape, strict=True)):
        if isinstance(have, int) and isinstance(want, int) and have != want and i != axis:
            raise InputMismatchError(
                f"--input {given.name}:{given.shape_text()} contradicts the model's fixed shape {spec.shape_text()}",
                hint=f"drop --input {given.name}, or give {spec.shape_text()}",
            )
        if i == axis:
            dims.append(want if isinstance(want, str) else have)  # the batch stays the batch; a name marks where it is
        else:
            dims.append(want if not isinstance(have, int) and isinstance(want, int) else have)
    return TensorSpec(spec.name, tuple(dims), spec.dtype)


def feed_batch(specs: list[TensorSpec], feeds: dict[str, np.ndarray]) -> int:
    """The batch size of a set of feeds: the size of the first fed input's batch axis (1 with none)."""
    for spec in specs:
        axis = spec.batch_axis()
        if spec.name in feeds and axis is not None and np.ndim(feeds[spec.name]) > axis:
            return int(np.shape(feeds[spec.name])[axis])
    return 1
