"""3. Trust: edgekit's p50 vs each runtime's own tool or a bare loop, on the same artifact, threads and batch.

ONNX Runtime and LiteRT: a bare timing loop around the session/interpreter. OpenVINO: `benchmark_app`,
whose latency is the runtime's own measure; edgekit records that too (runtime-reported p50) beside its
wall-clock p50, and compares like with like.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from bench.common import artifact, measure, publish, ratio_text, spread

BARE_ORT = """
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
BARE_LITERT = """
import sys, time, numpy as np
from ai_edge_litert.interpreter import Interpreter
m = Interpreter(model_path=sys.argv[1], num_threads=int(sys.argv[2])); m.allocate_tensors()
d = m.get_input_details()[0]; x = np.random.default_rng(0).random(d["shape"], dtype=np.float32)
if np.dtype(d["dtype"]).kind in "iu":  # integer input: quantize once, outside the timed loop
    s, z = d["quantization"]; i = np.iinfo(d["dtype"]); x = np.clip(np.round(x / s + z), i.min, i.max).astype(d["dtype"])
for _ in range(10): m.set_tensor(d["index"], x); m.invoke()
t = []
for _ in range(60):
    a = time.perf_counter_ns(); m.set_tensor(d["index"], x); m.invoke(); t.append((time.perf_counter_ns() - a) / 1e6)
print(np.median(t))
"""
BARE = {"onnx": BARE_ORT, "tflite": BARE_LITERT}


def native_p50(path: Path, fmt: str, threads: int) -> float:
    if fmt == "openvino":
        return benchmark_app_p50(path, threads)
    return float(
        subprocess.run([sys.executable, "-c", BARE[fmt], str(path), str(threads)], capture_output=True, text=True, check=True).stdout
    )


def benchmark_app_p50(path: Path, threads: int) -> float:
    """OpenVINO's benchmark_app median latency, same device, threads, streams, batch and precision as edgekit."""
    tool = Path(sys.executable).parent / "benchmark_app"
    cmd = [
        str(tool),
        "-m",
        str(path),
        "-d",
        "CPU",
        "-nthreads",
        str(threads),
        "-hint",
        "none",
        "-nstreams",
        "1",
        "-api",
        "sync",
        "-niter",
        "70",
        "-shape",
        "[1,3,224,224]",
        "-infer_precision",
        "f32",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    value, unit = re.search(r"Median:\s+([\d.]+) (ms|us)", out).groups()
    return float(value) / (1000 if unit == "us" else 1)


def run(rounds: int = 5) -> None:
    rows = []
    cells = (
        ("resnet18_shape", "fp32", "onnx"),
        ("resnet18_shape", "int8", "onnx"),
        ("efficientnet_lite0", "fp32", "onnx"),
        ("resnet18_shape", "fp32", "openvino"),
        ("resnet18_shape", "int8", "openvino"),
        ("resnet18_shape", "fp32", "tflite"),
        ("resnet18_shape", "int8", "tflite"),
    )
    for model, precision, fmt in cells:
        path = artifact(model, precision, fmt)
        for threads in (1, 2):
            rows.append(_row(model, precision, fmt, path, threads, rounds))
    publish(
        "trust",
        "edgekit p50 vs the runtime's own tool or a bare loop (ratio; 1.0 = identical)",
        ["model", "precision", "format", "threads", "edgekit p50 ms", "native p50 ms", "ratio median (min-max)", "compared"],
        rows,
        [
            f"{rounds} alternating rounds, each side a fresh process: 10 warm-up + 60-70 timed runs.",
            "OpenVINO: benchmark_app (-hint none -nstreams 1 -api sync -infer_precision f32) reports the runtime's own latency; "
            "edgekit's runtime-reported p50 is compared with it (its wall-clock p50 adds the Python call, ~0.05-0.1 ms).",
            "Target: within 5% (0.95-1.05).",
        ],
    )


def _row(model, precision, fmt, path, threads, rounds) -> list:
    ours, native = [], []
    for _ in range(rounds):
        result = measure(path, threads, 70)
        ours.append(result.runtime_latency.p50 if fmt == "openvino" else result.latency.p50)
        native.append(native_p50(path, fmt, threads))
    ratios = [a / b for a, b in zip(ours, native, strict=True)]
    compared = "runtime-reported vs benchmark_app" if fmt == "openvino" else "wall clock vs bare loop"
    return [
        model,
        precision,
        fmt,
        threads,
        f"{spread(ours)['median']:.3f}",
        f"{spread(native)['median']:.3f}",
        ratio_text(spread(ratios)),
        compared,
    ]
