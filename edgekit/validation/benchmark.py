"""The latency protocol: load, first inference, warm-up, then timed runs reported as percentiles.

Each artifact is measured in a fresh process (spawned, not forked), so its load time is cold, its
peak RSS is its own, and one runtime's thread pools cannot slow the next one down.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass

import numpy as np

from edgekit import progress
from edgekit.artifact import TensorSpec
from edgekit.errors import EdgekitError
from edgekit.machine import in_fresh_process, peak_rss_mb
from edgekit.metrics.latency import BenchResult, LatencyStats
from edgekit.provenance import model_size, report_entry
from edgekit.source import ModelSource

log = logging.getLogger("edgekit")


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
    fixed = runner.fixed_batch()
    if fixed and fixed != settings.batch:
        log.warning("%s takes batches of %d only: timed at batch %d, not %d", source.name, fixed, fixed, settings.batch)
        settings = dataclasses.replace(settings, batch=fixed)
    if feeds is None:
        feeds = next(random_samples(runner.inputs, settings.batch).batches(settings.batch, fixed))
    elif fixed:
        feeds = _sized(feeds, runner.inputs, fixed)
    first, times, reported = measure(runner, feeds, settings.warmup, settings.runs)
    coverage = int8_coverage(runner, report_entry(source, runner.target).get("precision"))  # after the timed runs
    return BenchResult(
        source.spec,
        runner.target,
        runner.version(),
        runner.threads,
        runner.load_seconds * 1000,
        first,
        LatencyStats.from_times(times, settings.batch),
        peak_rss_mb(),
        model_size(source),
        [round(t, 4) for t in times],
        None if reported is None else LatencyStats.from_times(reported, settings.batch),
        runner.config(),
        None if runner.compile_seconds is None else runner.compile_seconds * 1000,
        peak_gpu_memory_mb=runner.peak_gpu_memory_mb(),
        int8_coverage=coverage,
    )


def int8_coverage(runner, precision: str | None) -> dict | None:
    """What the runtime executes in int8 of an int8 model (`precision` as report_entry describes it: the provenance's,
    else read from the graph); None for a float model or where the runtime cannot say."""
    if not (precision or "").startswith("int8"):
        return None
    try:
        return runner.int8_coverage()
    except Exception as exc:  # noqa: BLE001 - the runtime's own error types; coverage is a finding, never a failure
        log.warning("int8 coverage not read from %s: %s", runner.target, str(exc).splitlines()[0][:200])
        return None


def _sized(feeds: dict[str, np.ndarray], specs: list[TensorSpec], batch: int) -> dict[str, np.ndarray]:
    """Feeds (a validation's first samples) cut or filled up, by repeating them, to the `batch` a model takes only."""
    from edgekit.targets.base import feed_batch

    have = feed_batch(specs, feeds)
    if have == batch:
        return feeds
    rows = np.resize(np.arange(have), batch)
    axes = {s.name: s.batch_axis() for s in specs if s.batch_axis() is not None}
    return {name: np.take(value, rows, axis=axes[name]) if name in axes else value for name, value in feeds.items()}


def bench(
    source: ModelSource, settings: BenchSettings, inputs: list[TensorSpec] | None = None, feeds: dict[str, np.ndarray] | None = None
) -> BenchResult:
    """Measure one artifact in a fresh spawned process (on a board: a fresh process there); errors come back as they were raised."""
    from edgekit.targets import device_name

    if device_name(settings.target):
        from edgekit.devices.remote import bench_on_device

        return bench_on_device(source, settings, inputs, feeds)
    with progress.step(f"{source.name}: timing on {settings.target or 'its runtime'}"):
        return in_fresh_process(bench_in_process, source, settings, inputs, feeds)


def bench_each(jobs: list[tuple]) -> list[BenchResult | EdgekitError]:
    """Several artifacts measured one after the other in one fresh spawned process: each job is bench()'s (source,
    settings, inputs, feeds); a job's EdgekitError comes back in its place. For screening many short timings (tune's
    rounds, a process per runtime): the loads are no longer cold, and the peak RSS is the process's, not each one's."""
    with progress.step(f"timing {len(jobs)} artifacts in one process"):
        return in_fresh_process(_bench_each_in_process, jobs)


def _bench_each_in_process(jobs: list[tuple]) -> list[BenchResult | EdgekitError]:
    results: list[BenchResult | EdgekitError] = []
    for job in jobs:
        try:
            results.append(bench_in_process(*job))
        except EdgekitError as exc:
            results.append(exc)
    return results
