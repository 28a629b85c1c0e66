"""7b. The latency gate beside a bursty, memory-heavy neighbour: the same artifact gated against itself while another
process starts and stops streaming hundreds of MB through memory on the same cores (as language-model conversions and
validations beside a CI gate do), with interference detection (rounds set aside and timed again, or a refusal) and
without it (every round counted, the gate before issue 60), trials alternating between the two.

A REGRESSION here is a false alarm: A and B are one file. `python -m bench gate_interference`; EDGEKIT_GATE_TRIALS
(default 6 per mode), EDGEKIT_GATE_THREADS (2), EDGEKIT_GATE_MODELS ("ResNet-18 shape").
"""

from __future__ import annotations

import multiprocessing
import os
import time
from dataclasses import replace

import numpy as np

from bench.common import publish
from bench.gate import models
from edgekit.errors import EdgekitError
from edgekit.source import open_source
from edgekit.validation.benchmark import BenchSettings
from edgekit.validation.regression import Interference, RetimeSettings, retime

TRIALS = int(os.environ.get("EDGEKIT_GATE_TRIALS", "6"))
THREADS = int(os.environ.get("EDGEKIT_GATE_THREADS", "2"))
MODEL = os.environ.get("EDGEKIT_GATE_MODELS", "ResNet-18 shape")
BURST_MB = 256
DETECTION = Interference()
OFF = Interference(others_change=float("inf"), steal=float("inf"), spread_factor=float("inf"))


def neighbour(stop, seed: int) -> None:
    """Bursts of 0.3-3 s copying a BURST_MB array back and forth, pauses of 0.3-3 s between them, until `stop`."""
    rng = np.random.default_rng(seed)
    a = np.ones(BURST_MB * 2**20 // 8)
    b = np.empty_like(a)
    while not stop.is_set():
        end = time.time() + rng.uniform(0.3, 3.0)
        while time.time() < end:
            np.copyto(b, a)
            np.copyto(a, b)
        stop.wait(rng.uniform(0.3, 3.0))


def trial(path, settings: RetimeSettings, detect: bool) -> tuple[str, int]:
    """One gate of `path` against itself: its verdict (REFUSED when it declined) and the rounds it set aside."""
    source = open_source(str(path))
    try:
        result = retime(source, source, replace(settings, interference=DETECTION if detect else OFF))
    except EdgekitError as exc:
        print(f"  detection {'on' if detect else 'off'}: REFUSED: {exc.one_line()}", flush=True)
        return "REFUSED", 0
    print(f"  detection {'on' if detect else 'off'}: {result['reason']}", flush=True)
    return result["verdict"], len(result["interfered_rounds"])


def run() -> None:
    path = models()[MODEL]()
    settings = RetimeSettings(tolerance=0.10, latency=BenchSettings(threads=THREADS, warmup=10, runs=50))
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    worker = context.Process(target=neighbour, args=(stop, 0), daemon=True)
    start = time.time()
    worker.start()
    outcomes = {True: [], False: []}
    try:
        for i in range(2 * TRIALS):
            detect = i % 2 == 0
            outcomes[detect].append(trial(path, settings, detect))
    finally:
        stop.set()
        worker.join(10)
    rows = []
    for detect in (True, False):
        verdicts = [v for v, _ in outcomes[detect]]
        counts = "/".join(str(verdicts.count(v)) for v in ("SAME", "REGRESSION", "INCONCLUSIVE", "REFUSED"))
        false_alarms = verdicts.count("REGRESSION") / len(verdicts)
        set_aside = sum(n for _, n in outcomes[detect])
        rows.append([MODEL, THREADS, "on" if detect else "off", len(verdicts), counts, f"{false_alarms:.0%}", set_aside])
    publish(
        "gate_interference",
        f"Latency gate of an artifact against itself beside a bursty {BURST_MB} MB memory-copying neighbour",
        [
            "model",
            "threads",
            "interference detection",
            "trials",
            "SAME/REGRESSION/INCONCLUSIVE/REFUSED",
            "false alarms",
            "rounds set aside",
        ],
        rows,
        [
            "The neighbour copies a 256 MB array back and forth in bursts of 0.3-3 s with pauses of 0.3-3 s (one process, "
            "seeded), through every trial; trials alternate detection on / off.",
            f"Detection sets a round aside when other processes' CPU share moves by more than {DETECTION.others_change:.0%} "
            f"inside it, steal exceeds {DETECTION.steal:.0%}, or its A/A spread is beyond half the tolerance and "
            f"{DETECTION.spread_factor:.0f}x the counted rounds' typical spread; after as many set aside as the round cap it refuses.",
            f"Tolerance 10%, 3-12 A-B-B-A rounds, 10 warm-up + 50 timed runs per process. Took {time.time() - start:.0f} s.",
        ],
    )
