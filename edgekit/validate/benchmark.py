"""The latency protocol: load, first inference, warm-up, then timed runs reported as percentiles.

Each artifact is measured in a fresh process (spawned, not forked), so its load time is cold, its
peak RSS is its own, and one runtime's thread pools cannot slow the next one down.
"""

from __future__ import annotations

import multiprocessing
import resource
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np

from edgekit import progress
from edgekit.artifact import TensorSpec, file_size
from edgekit.errors import EdgekitError
from edgekit.loaders import ModelSource


@dataclass(frozen=True)
class BenchSettings:
    """How to measure: target, threads, batch, warm-up and timed runs."""

    target: str | None = None
    threads: int | None = None
    batch: int = 1
    warmup: int = 10
    runs: int = 100

    def __post_init__(self) -> None:
        for option, value, least in (
            ("--runs", self.runs, 1),
            ("--batch", self.batch, 1),
            ("--warmup", self.warmup, 0),
            ("--threads", self.threads, 1),
        ):
            if value is not None and value < least:
                raise EdgekitError(f"{option} {value} is out of range: it must be at least {least}", hint=f"pass {option} {least} or more")


@dataclass(frozen=True)
class LatencyStats:
    """Per-batch latency in milliseconds over the timed runs."""

    p50: float
    p90: float
    p99: float
    mean: float
    std: float
    min: float
    max: float
    runs: int
    batch: int
    throughput: float  # samples per second, from the mean
    tail_note: str | None = None  # set when there are too few runs for p99 to be more than the slowest few

    @classmethod
    def from_times(cls, times_ms: np.ndarray, batch: int) -> LatencyStats:
        p50, p90, p99 = np.percentile(times_ms, [50, 90, 99])
        mean = float(times_ms.mean())
        return cls(
            float(p50),
            float(p90),
            float(p99),
            mean,
            float(times_ms.std()),
            float(times_ms.min()),
            float(times_ms.max()),
            len(times_ms),
            batch,
            batch * 1000.0 / mean if mean > 0 else 0.0,
            tail_note(len(times_ms)),
        )


P99_RUNS = 1000  # at least 10 runs beyond the 99th percentile


def tail_note(runs: int) -> str | None:
    """What p99 is worth with this many runs, when it is not worth a percentile."""
    if runs >= P99_RUNS:
        return None
    beyond = runs - int(0.99 * runs)
    return f"p99 from {runs} runs is {'the maximum' if beyond <= 1 else f'among the {beyond} slowest runs'}; {P99_RUNS}+ runs for a p99"


@dataclass(frozen=True)
class BenchResult:
    """Everything `edgekit bench` reports for one artifact on one target."""

    artifact: str
    target: str
    runtime_version: str
    threads: int
    load_ms: float
    first_inference_ms: float  # input preparation + the first run, compile time excluded
    latency: LatencyStats  # wall clock around each call: what the calling application sees
    peak_rss_mb: float
    size_bytes: int
    times_ms: list[float]
    runtime_latency: LatencyStats | None = None  # as the runtime itself measured it, where it reports one
    runtime_config: dict | None = None
    compile_ms: float | None = None  # torch.compile and CUDA-graph capture on the first calls, apart from run time
    device: dict | None = None  # on a board (target RUNTIME:DEVICE@NAME): its name, probed facts, thermal state
    peak_gpu_memory_mb: float | None = None  # torch.cuda.max_memory_allocated over load and runs on a CUDA target; else None

    def to_dict(self) -> dict:
        return asdict(self)


def measure(runner, feeds: dict[str, np.ndarray], warmup: int, runs: int) -> tuple[float, np.ndarray, np.ndarray | None]:
    """First-inference ms (input preparation included, compilation not), then per-run ms of prepared inputs
    after `warmup` untimed runs (wall, and runtime-reported or None)."""
    start = time.perf_counter_ns()
    prepared = runner.prepare(feeds)
    runner.run(prepared)
    runner.synchronize()
    first = (time.perf_counter_ns() - start) / 1e6 - (runner.compile_seconds or 0.0) * 1000
    for _ in range(warmup):
        runner.run(prepared)
    runner.synchronize()
    times, reported = np.empty(runs), np.empty(runs)
    for i in range(runs):
        start = time.perf_counter_ns()
        runner.run(prepared)
        runner.synchronize()
        times[i] = (time.perf_counter_ns() - start) / 1e6
        reported[i] = runner.runtime_ms() or np.nan
    return first, times, None if np.isnan(reported).any() else reported


def bench_in_process(
    source: ModelSource, settings: BenchSettings, inputs: list[TensorSpec] | None = None, feeds: dict[str, np.ndarray] | None = None
) -> BenchResult:
    """Measure one artifact in this process (the worker behind `bench`)."""
    from edgekit.calibration import random_samples
    from edgekit.targets import make_runner

    runner = make_runner(source, settings.target, settings.threads, inputs)
    runner.load()
    if feeds is None:
        feeds = next(random_samples(runner.inputs, settings.batch).batches(settings.batch))
    first, times, reported = measure(runner, feeds, settings.warmup, settings.runs)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return BenchResult(
        source.spec,
        runner.target,
        runner.version(),
        runner.threads,
        runner.load_seconds * 1000,
        first,
        LatencyStats.from_times(times, settings.batch),
        peak_kb / 1024,
        _size(source),
        [round(t, 4) for t in times],
        None if reported is None else LatencyStats.from_times(reported, settings.batch),
        runner.config(),
        None if runner.compile_seconds is None else runner.compile_seconds * 1000,
        peak_gpu_memory_mb=runner.peak_gpu_memory_mb(),
    )


def _size(source: ModelSource) -> int:
    if source.path is None:
        return 0
    from edgekit.converters.pipeline import DESCRIBERS, describe

    if source.format in DESCRIBERS:
        return describe(source.path, source.format, None).size_bytes()
    return file_size(source.path)


def bench(
    source: ModelSource, settings: BenchSettings, inputs: list[TensorSpec] | None = None, feeds: dict[str, np.ndarray] | None = None
) -> BenchResult:
    """Measure one artifact in a fresh spawned process (on a board: a fresh process there); errors come back as they were raised."""
    from edgekit.devices import device_name

    if device_name(settings.target):
        from edgekit.devices.remote import bench_on_device

        return bench_on_device(source, settings, inputs, feeds)
    with progress.step(f"{source.name}: timing on {settings.target or 'its runtime'}"):
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            return pool.submit(bench_in_process, source, settings, inputs, feeds).result()
