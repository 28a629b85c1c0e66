"""3. Trust: edgekit's p50 vs a bare timing loop around the same ONNX Runtime session, same threads."""

from __future__ import annotations

import subprocess
import sys

from bench.common import artifact, p50, publish, ratio_text, spread

BARE_LOOP = """
import sys, time, numpy as np, onnxruntime as ort
o = ort.SessionOptions(); o.intra_op_num_threads = int(sys.argv[2]); o.inter_op_num_threads = 1
s = ort.InferenceSession(sys.argv[1], o, providers=["CPUExecutionProvider"])
i = s.get_inputs()[0]; x = {i.name: np.random.default_rng(0).random((1, *i.shape[1:]), dtype=np.float32)}
for _ in range(10): s.run(None, x)
t = []
for _ in range(60):
    a = time.perf_counter_ns(); s.run(None, x); t.append((time.perf_counter_ns() - a) / 1e6)
print(np.median(t))
"""


def bare_p50(path, threads: int) -> float:
    return float(
        subprocess.run([sys.executable, "-c", BARE_LOOP, str(path), str(threads)], capture_output=True, text=True, check=True).stdout
    )


def run(rounds: int = 5) -> None:
    rows = []
    for model, precision in (("resnet18_shape", "fp32"), ("resnet18_shape", "int8"), ("efficientnet_lite0", "fp32")):
        path = artifact(model, precision)
        for threads in (1, 2):
            ours, bare = [], []
            for _ in range(rounds):
                ours.append(p50(path, threads))
                bare.append(bare_p50(path, threads))
            ratios = [a / b for a, b in zip(ours, bare, strict=True)]
            rows.append(
                [
                    model,
                    precision,
                    "onnxruntime:cpu",
                    threads,
                    f"{spread(ours)['median']:.2f}",
                    f"{spread(bare)['median']:.2f}",
                    ratio_text(spread(ratios)),
                ]
            )
    publish(
        "trust",
        "edgekit p50 vs a bare ONNX Runtime loop (ratio; 1.0 = identical)",
        ["model", "precision", "target", "threads", "edgekit p50 ms", "bare p50 ms", "ratio median (min-max)"],
        rows,
        [f"{rounds} alternating rounds, each side a fresh process: 10 warm-up + 60 timed runs.", "Target: within 5% (0.95-1.05)."],
    )
