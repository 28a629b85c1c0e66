"""tune's timings: successive halving over the candidates (short runs, the faster half again with twice the runs),
then the finalists with the full protocol, again in reverse order where they lie within CLOSE (A B B A, runs pooled);
every timing a fresh process alone on the machine that runs the target, with the CPU share others took meanwhile."""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field, replace

import numpy as np

from edgekit.metrics.latency import LatencyStats, median_interval
from edgekit.recipe.cells import PreparedCell, time_cell
from edgekit.recipe.run import say
from edgekit.report.tables import precision_label
from edgekit.targets import device_name
from edgekit.validation.regression import CpuWindow, Interference

FIRST_RUNS = 10  # timed runs of successive halving's first round
FINALISTS = 2  # timed with the full protocol
CLOSE = 0.10  # finalists whose p50s differ by less than this are timed again in reverse order (A B B A), runs pooled
LM_RUNS_PER_GENERATION = 20  # a language model's generation (prompt + new tokens) counts as this many runs


@dataclass
class Candidate:
    """A cell at a thread count, and what its timings said so far."""

    cell: PreparedCell
    threads: int
    row: dict | None = None  # the latest timing's row
    rounds: list[dict] = field(default_factory=list)  # each timing: runs, p50_ms
    stage: str = "timed"  # timed, halved, finalist, chosen, failed
    why: str | None = None

    def speed(self) -> float:
        return ms_per_item(self.row or {})

    def name(self) -> str:
        base = self.cell.base
        return f"{base['format']} {precision_label(base)} on {base['target']} ({self.threads} thread{'s' if self.threads > 1 else ''})"


def ms_per_item(row: dict) -> float:
    """What tune minimises: p50 ms per batch, or a language model's ms per generated token."""
    if row.get("p50_ms") is not None:
        return row["p50_ms"]
    return 1000.0 / row["tokens_per_s"] if row.get("tokens_per_s") else math.inf


def successive_halving(alive: list[Candidate], latency, deadline: float, progress) -> list[Candidate]:
    """Short timings of every candidate, then of the faster half with twice the runs, ...: the candidates left when
    FINALISTS remain, the runs reach the full protocol's, or the time is up."""
    runs, warmup = min(FIRST_RUNS, latency.runs), latency.warmup  # the full warm-up: OpenVINO's int8 is slow for its first runs
    while len(alive) > FINALISTS and runs < latency.runs and time.monotonic() < deadline:
        _time_round(alive, warmup, runs, progress)
        ranked = sorted((c for c in alive if c.stage != "failed"), key=Candidate.speed)
        keep = max(FINALISTS, math.ceil(len(ranked) / 2))
        for candidate in ranked[keep:]:
            candidate.stage = "halved"
            candidate.why = f"slower than the {keep} kept over {runs} runs (p50 {candidate.speed():.3g} ms; the slowest kept {ranked[keep - 1].speed():.3g} ms)"
        alive, runs = ranked[:keep], runs * 2
    if time.monotonic() >= deadline and any(c.rounds for c in alive):
        alive = sorted(alive, key=Candidate.speed)[:FINALISTS]
    return alive


def _time_round(candidates: list[Candidate], warmup: int, runs: int, progress) -> None:
    """A round of short timings: the candidates of one runtime one after the other in one fresh process; a board's
    and a language model's each in a process of its own, as the full protocol times them."""
    from edgekit.validation.benchmark import bench_each
    from edgekit.validation.validate import ValidationRequest, timing_job

    by_runtime: dict[str, list[Candidate]] = {}
    for candidate in candidates:
        target = candidate.cell.base["target"]
        if isinstance(candidate.cell.request, ValidationRequest) and not device_name(target):
            by_runtime.setdefault(target.partition(":")[0], []).append(candidate)
        else:
            _time(candidate, warmup, runs, progress)
    for runtime, group in by_runtime.items():
        say(progress, f"{len(group)} candidates on {runtime}: {runs} timed runs each")
        cells = [_timed_cell(c, warmup, runs) for c in group]
        with CpuWindow() as window:
            measured = bench_each([timing_job(cell.report, cell.request, cell.feeds) for cell in cells])
        for candidate, cell, result in zip(group, cells, measured, strict=True):
            _record(candidate, time_cell(cell, result), runs, window.shares)


def final_timing(candidate: Candidate, latency, progress, pool_with: dict | None = None) -> str | None:
    """A finalist timed with the full protocol, again once if other processes or the hypervisor took the CPU meanwhile;
    a warning when both timings were disturbed. `pool_with`: its earlier final row, whose timed runs join this one's."""
    for _ in range(2):
        _time(candidate, latency.warmup, latency.runs, progress)
        if candidate.stage == "failed":
            return None
        if not disturbed(candidate.rounds[-1]):
            break
    if pool_with:
        candidate.row = pooled(pool_with, candidate.row)
    candidate.stage = "finalist"
    if disturbed(candidate.rounds[-1]):
        return f"{candidate.name()} was timed while {_disturbance(candidate.rounds[-1])}: its p50 may be too slow; tune again on a quiet machine"
    return None


def close(finalists: list[Candidate]) -> bool:
    """Whether two finalists timed per batch (a language model's generations are not pooled) lie within CLOSE."""
    if len(finalists) != 2 or any(c.stage != "finalist" or c.row.get("p50_ms") is None for c in finalists):
        return False
    fast, slow = sorted(c.row["p50_ms"] for c in finalists)
    return slow < fast * (1 + CLOSE)


def pooled(earlier: dict, later: dict) -> dict:
    """`later`'s row with its latency figures (p50, p90, the median's interval) over both timings' runs."""
    times = [*earlier["times_ms"], *later["times_ms"]]
    stats = LatencyStats.from_times(np.asarray(times), 1)
    return {**later, "times_ms": times, "p50_ms": stats.p50, "p90_ms": stats.p90, "p50_ms_ci95": median_interval(times), "processes": 2}


def disturbed(round_: dict) -> bool:
    """Whether a timing shared the CPU: other processes took more than Interference's others_change, or steal its share."""
    limits = Interference()
    return round_.get("others", 0.0) > limits.others_change or round_.get("steal", 0.0) > limits.steal


def _disturbance(round_: dict) -> str:
    return f"other processes took {round_.get('others', 0):.0%} of the CPU and the hypervisor stole {round_.get('steal', 0):.0%}"


def _time(candidate: Candidate, warmup: int, runs: int, progress) -> None:
    """One timing of a candidate in a fresh process of its own, alone on its machine."""
    say(progress, f"{candidate.name()}: {runs} timed runs")
    with CpuWindow() as window:
        row = time_cell(_timed_cell(candidate, warmup, runs))
    on_host = not device_name(candidate.cell.base["target"])  # a board's timing is its own: this machine's load says nothing
    _record(candidate, row, runs, window.shares if on_host else {})


def _timed_cell(candidate: Candidate, warmup: int, runs: int) -> PreparedCell:
    cell = candidate.cell
    return replace(cell, request=_with_timing(cell.request, candidate.threads, warmup, runs), report=copy.deepcopy(cell.report))


def _record(candidate: Candidate, row: dict, runs: int, shares: dict) -> None:
    """A timing's row kept as the candidate's latest, at the candidate's thread count, with the CPU share others took
    meanwhile (`others`, `steal`)."""
    candidate.row = {**row, "threads": candidate.threads}
    if row["status"] != "ok":
        candidate.stage, candidate.why = "failed", row["status"]
        return
    candidate.rounds.append({"runs": runs, "p50_ms": row.get("p50_ms"), "ms_per_item": ms_per_item(row), **shares})


def _with_timing(request, threads: int, warmup: int, runs: int):
    """The request timed at `threads` with `warmup` and `runs` (a language model: generations, fewer)."""
    from edgekit.validation.text_generation import LMValidationRequest

    if isinstance(request, LMValidationRequest):
        settings = replace(request.settings, threads=threads, runs=max(1, runs // LM_RUNS_PER_GENERATION), warmup=min(warmup, 1))
        return replace(request, settings=settings)
    return replace(request, latency=replace(request.latency, threads=threads, warmup=warmup, runs=runs))
