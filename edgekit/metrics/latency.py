"""Latency statistics and the result of a latency run (edgekit bench, and every report's `latency`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from edgekit.record import Record


@dataclass
class LatencyStats(Record):
    """Per-batch latency in milliseconds over the timed runs (a report's `latency` section, read back by the API too)."""

    p50: float = 0.0
    p90: float = 0.0
    p99: float = 0.0
    mean: float = 0.0
    std: float = 0.0
    min: float = 0.0
    max: float = 0.0
    runs: int = 0
    batch: int = 1
    throughput: float = 0.0  # samples per second, from the mean
    tail_note: str | None = None  # set when there are too few runs for p99 to be more than the slowest few

    @classmethod
    def from_times(cls, times_ms, batch: int) -> LatencyStats:
        """The statistics of `times_ms` (a numpy array: numpy is imported here, so the API's results load without it)."""
        import numpy as np

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


def median_interval(times_ms) -> list[float] | None:
    """The distribution-free 95% interval of the median of `times_ms`: the order statistics n/2 -+ 0.98 sqrt(n) (the
    binomial's normal approximation); None under 6 runs, where it would span them all."""
    times = sorted(float(t) for t in times_ms)
    n = len(times)
    if n < 6:
        return None
    half = 0.98 * n**0.5
    return [times[max(0, int(n / 2 - half))], times[min(n - 1, int(math.ceil(n / 2 + half)))]]


@dataclass
class BenchResult(Record):
    """Everything `edgekit bench` reports for one artifact on one target (a report's bench result, read back by the
    API too)."""

    artifact: str = ""
    target: str = ""
    runtime_version: str = ""
    threads: int = 0
    load_ms: float = 0.0
    first_inference_ms: float = 0.0  # input preparation + the first run, compile time excluded
    latency: LatencyStats = field(default_factory=LatencyStats)  # wall clock around each call: what the application sees
    peak_rss_mb: float = 0.0
    size_bytes: int = 0
    times_ms: list[float] = field(default_factory=list)
    runtime_latency: LatencyStats | None = None  # as the runtime itself measured it, where it reports one
    runtime_config: dict | None = None
    compile_ms: float | None = None  # torch.compile and CUDA-graph capture on the first calls, apart from run time
    device: dict | None = None  # on a board (target RUNTIME:DEVICE@NAME): its name, probed facts, thermal state
    peak_gpu_memory_mb: float | None = None  # torch.cuda.max_memory_allocated over load and runs on a CUDA target; else None
    generation: dict | None = None  # a language model: time to first token, decode tokens/s (validate.text_generation)
    int8_coverage: dict | None = None  # an int8 model's share run in int8, read from its runtime (metrics.coverage)


def tail_note(runs: int) -> str | None:
    """What p99 is worth with this many runs, when it is not worth a percentile."""
    if runs >= P99_RUNS:
        return None
    beyond = runs - int(0.99 * runs)
    return f"p99 from {runs} runs is {'the maximum' if beyond <= 1 else f'among the {beyond} slowest runs'}; {P99_RUNS}+ runs for a p99"


P99_RUNS = 1000  # at least 10 runs beyond the 99th percentile
