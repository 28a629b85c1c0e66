"""7. The latency gate's error rates on this machine: SAME for an artifact against itself, detection of a 25%-slower
artifact built for the purpose (and of fp32 against an int8 baseline), each over repeated trials of
`edgekit gate --baseline` re-timing (A B B A rounds in fresh processes, adaptive up to a cap), for the small
FashionCNN and a ResNet-18-sized CNN at 1 and 2 threads.

`python -m bench gate` runs 20 trials per case; EDGEKIT_GATE_TRIALS=N, EDGEKIT_GATE_TOLERANCE, EDGEKIT_GATE_THREADS=1,2,
EDGEKIT_GATE_MODELS and EDGEKIT_GATE_STATISTIC=min|p50 (the protocol before issue 48) narrow it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench.common import CACHE, publish
from edgekit.errors import EdgekitError
from edgekit.source import open_source
from edgekit.validation.benchmark import BenchSettings
from edgekit.validation.regression import RetimeSettings, retime

TRIALS = int(os.environ.get("EDGEKIT_GATE_TRIALS", "20"))
TOLERANCE = float(os.environ.get("EDGEKIT_GATE_TOLERANCE", "0.10"))
SLOWER = 1.25


def fashion(precision: str) -> Path:
    """The trained FashionCNN as ONNX (int8 calibrated on 300 training images), cached."""
    from edgekit.conversion import CalibrationOptions, ConvertOptions
    from edgekit.converters.pipeline import convert
    from edgekit.demo import demo_source
    from edgekit.zoo.fashion_mnist import write_demo_data
    from tests.conftest import INPUTS

    path = CACHE / "gate" / f"fashion.{precision}.onnx"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        calib = write_demo_data(CACHE / "gate")[1]
        options = ConvertOptions(precision, INPUTS, CalibrationOptions(str(calib), 300) if precision == "int8" else CalibrationOptions())
        convert(demo_source(), "onnx", path, options)
    return path


WIDTH = 256  # the extra work's MatMul width


def with_extra_work(fp32: Path, matmuls: int, out: Path) -> Path:
    """`fp32` plus a chain of `matmuls` [rows x 256] x [256 x 256] MatMuls fed by the input (reshaped to rows of 256
    where it divides, else through one [size x 256] MatMul) and added x0 to the logits: same outputs, slower."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(fp32))
    graph, logits = model.graph, model.graph.output[0].name
    size = int(np.prod([d.dim_value for d in graph.input[0].type.tensor_type.shape.dim[1:]]))
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.normal(size=(WIDTH, WIDTH)))  # orthogonal: values neither grow nor vanish
    inits = [
        numpy_helper.from_array(q.astype(np.float32), "xw_q"),
        numpy_helper.from_array(np.zeros((1,), np.float32), "xw_zero"),
    ]
    if size % WIDTH == 0:  # rows of the input itself: the work grows with the input, as the model's does
        inits.append(numpy_helper.from_array(np.array([-1, WIDTH], np.int64), "xw_shape"))
        nodes = [helper.make_node("Reshape", [graph.input[0].name, "xw_shape"], ["xw_0"])]
    else:
        inits += [
            numpy_helper.from_array(np.array([-1, size], np.int64), "xw_shape"),
            numpy_helper.from_array((rng.normal(size=(size, WIDTH)) / np.sqrt(size)).astype(np.float32), "xw_in"),
        ]
        nodes = [
            helper.make_node("Reshape", [graph.input[0].name, "xw_shape"], ["xw_flat"]),
            helper.make_node("MatMul", ["xw_flat", "xw_in"], ["xw_0"]),
        ]
    nodes += [helper.make_node("MatMul", [f"xw_{i}", "xw_q"], [f"xw_{i + 1}"]) for i in range(matmuls)]
    nodes += [
        helper.make_node("ReduceSum", [f"xw_{matmuls}"], ["xw_sum"], keepdims=1),
        helper.make_node("Mul", ["xw_sum", "xw_zero"], ["xw_nil"]),
        helper.make_node("Add", ["xw_logits", "xw_nil"], [logits]),
    ]
    for node in graph.node:  # the old logits now feed the Add
        node.output[:] = ["xw_logits" if o == logits else o for o in node.output]
    graph.node.extend(nodes)
    graph.initializer.extend(inits)
    onnx.save(model, str(out))
    return out


def _fastest(path: Path, threads: int, processes: int = 3) -> float:
    """The gate's own measure: the fastest run of the fastest of a few fresh processes (ms)."""
    from edgekit.validation.benchmark import bench

    return min(min(bench(open_source(str(path)), BenchSettings(threads=threads, warmup=10, runs=50)).times_ms) for _ in range(processes))


def slower_artifact(fp32: Path, name: str, threads: int) -> tuple[Path, float]:
    """An artifact about 25% slower than `fp32` at `threads` by the gate's own measure (extra work sized by
    measurement, the closest of up to 6 sizes), and its measured slow-down."""
    base, matmuls, best = _fastest(fp32, threads), 8, None
    out = CACHE / "gate" / f"{name}.slower.t{threads}.onnx"
    for _ in range(6):  # the cost per MatMul is not quite linear: size the chain, measure, resize
        slow_down = _fastest(with_extra_work(fp32, matmuls, out), threads) / base
        if best is None or abs(slow_down - SLOWER) < abs(best[1] - SLOWER):
            best = (matmuls, slow_down)
        if abs(slow_down - SLOWER) < 0.04:
            break
        matmuls = max(1, round(matmuls * (SLOWER - 1) / max(slow_down - 1, 0.01)))
    return with_extra_work(fp32, best[0], out), best[1]


def trials(old: Path, new: Path, settings: RetimeSettings) -> dict:
    verdicts, ratios, rounds, busy = [], [], [], 0
    for _ in range(TRIALS):
        try:
            result = retime(open_source(str(old)), open_source(str(new)), settings)
        except EdgekitError as exc:  # the A/A spread was too wide for the tolerance: refused, not a verdict
            verdicts.append("REFUSED")
            print(f"  {new.name} vs {old.name}: REFUSED: {exc.one_line()}", flush=True)
            continue
        verdicts.append(result["verdict"])
        _log_rounds(old, new, settings, result["round_details"])
        print(f"  {new.name} vs {old.name}: {result['reason']}", flush=True)
        ratios.append(result["ratio"])
        rounds.append(result["rounds"])
        busy += result["busy_rounds"]
    return {"verdicts": verdicts, "ratios": ratios, "rounds": rounds, "busy": busy}


def _log_rounds(old: Path, new: Path, settings: RetimeSettings, rounds: list[dict]) -> None:
    """Every process's timings of a trial, one JSON line (bench/.cache/gate/rounds.jsonl): other decision rules can be
    replayed on the same measurements."""
    import json

    entry = {"old": old.name, "new": new.name, "threads": settings.latency.threads, "statistic": settings.statistic}
    with open(CACHE / "gate" / "rounds.jsonl", "a") as f:
        f.write(json.dumps({**entry, "rounds": [{k: r["runs"][k] for k in ("A1", "B1", "B2", "A2")} for r in rounds]}) + "\n")


def models() -> dict[str, Callable[[], Path]]:
    """The gate's two models, each built (fp32 ONNX) only when asked for: the small trained FashionCNN (0.1 ms) and a
    ResNet-18-sized CNN (15-35 ms)."""
    from bench.common import artifact

    return {"FashionCNN": lambda: fashion("fp32"), "ResNet-18 shape": lambda: artifact("resnet18_shape", "fp32")}


THREADS = tuple(int(t) for t in os.environ.get("EDGEKIT_GATE_THREADS", "1,2").split(","))
MODELS = tuple(os.environ.get("EDGEKIT_GATE_MODELS", "FashionCNN,ResNet-18 shape").split(","))


def run() -> None:
    rows, start, statistic = [], time.time(), os.environ.get("EDGEKIT_GATE_STATISTIC", "min")
    for model, build in models().items():
        if model not in MODELS:
            continue
        fp32 = build()
        for threads in THREADS:
            slower, slow_down = slower_artifact(fp32, model.split()[0].replace("-", ""), threads)
            settings = RetimeSettings(tolerance=TOLERANCE, latency=BenchSettings(threads=threads, warmup=10, runs=50), statistic=statistic)
            cases = [("same artifact", fp32, fp32, "SAME"), (f"{slow_down:.2f}x slower artifact", fp32, slower, "REGRESSION")]
            if model == "FashionCNN" and threads == 1:
                cases.append(("fp32 against an int8 baseline", fashion("int8"), fp32, "REGRESSION"))
            rows += [_row(model, threads, name, trials(old, new, settings), expected) for name, old, new, expected in cases]
    publish(
        "gate" if statistic == "min" else f"gate-{statistic}",
        f"Latency gate error rates: tolerance {TOLERANCE:.0%}, {TRIALS} trials per case, ONNX Runtime, statistic {statistic}",
        [
            "model",
            "threads",
            "case",
            "trials",
            "SAME/REGRESSION/INCONCLUSIVE/REFUSED",
            "rate",
            "new/old median (range)",
            "rounds per trial",
            "busy rounds",
        ],
        rows,
        [
            f"Each trial is one `gate --baseline` decision: A B B A rounds in fresh processes, {settings.min_rounds} to "
            f"{settings.max_rounds} rounds, {settings.latency.warmup} warm-up + {settings.latency.runs} timed runs per process; "
            + (
                "each process counts by its fastest run, each side of a round by its faster process."
                if statistic == "min"
                else "each process counts by its median, each side of a round by the mean of its two."
            ),
            "The slower artifact is the model plus a chain of 256x256 MatMuls on its input, sized by measurement to about 1.25x.",
            f"Took {time.time() - start:.0f} s. A busy round had a load average above 0.75 x the usable cores when a run started.",
        ],
    )


def _row(model: str, threads: int, name: str, r: dict, expected: str) -> list:
    rate = r["verdicts"].count(expected) / len(r["verdicts"])
    return [
        model,
        threads,
        name,
        len(r["verdicts"]),
        "/".join(str(r["verdicts"].count(v)) for v in ("SAME", "REGRESSION", "INCONCLUSIVE", "REFUSED")),
        f"{'SAME' if expected == 'SAME' else 'detected'} {rate:.0%}",
        f"{np.median(r['ratios']):.3f} ({min(r['ratios']):.3f}-{max(r['ratios']):.3f})" if r["ratios"] else "-",
        f"{np.mean(r['rounds']):.1f} (max {max(r['rounds'])})" if r["rounds"] else "-",
        r["busy"],
    ]
