"""7. The latency gate's error rates on this machine: false alarms (an artifact against itself) and detections
(a 25%-slower artifact built for the purpose, and fp32 against an int8 baseline), each over repeated trials of
`edgekit gate --baseline` re-timing (A B B A rounds in fresh processes, adaptive up to a cap).

`python -m bench gate` runs 20 trials per case; EDGEKIT_GATE_TRIALS=N (and EDGEKIT_GATE_TOLERANCE) run it shorter.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from bench.common import CACHE, publish
from edgekit.errors import EdgekitError
from edgekit.source import open_source
from edgekit.validate.benchmark import BenchSettings, bench_in_process
from edgekit.validate.regression import RetimeSettings, retime

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


def with_extra_work(fp32: Path, matmuls: int, out: Path) -> Path:
    """`fp32` plus a chain of `matmuls` 256x256 MatMuls fed by the input and added x0 to the logits: same outputs, slower."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(fp32))
    graph, logits = model.graph, model.graph.output[0].name
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.normal(size=(256, 256)))  # orthogonal: values neither grow nor vanish
    inits = [
        numpy_helper.from_array(np.array([-1, 784], np.int64), "xw_shape"),
        numpy_helper.from_array((rng.normal(size=(784, 256)) / 28).astype(np.float32), "xw_in"),
        numpy_helper.from_array(q.astype(np.float32), "xw_q"),
        numpy_helper.from_array(np.zeros((1,), np.float32), "xw_zero"),
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


def _p50(path: Path) -> float:
    return bench_in_process(open_source(str(path)), BenchSettings(threads=1, warmup=20, runs=300)).latency.p50


def slower_artifact(fp32: Path) -> tuple[Path, float]:
    """An artifact about 25% slower than `fp32` (extra work sized by measurement), and its measured slow-down."""
    base, matmuls = _p50(fp32), 40
    out = CACHE / "gate" / "fashion.slower.onnx"
    for _ in range(6):  # the cost per MatMul is not quite linear: size the chain, measure, resize
        slow_down = _p50(with_extra_work(fp32, matmuls, out)) / base
        if abs(slow_down - SLOWER) < 0.05:
            break
        matmuls = max(1, round(matmuls * (SLOWER - 1) / max(slow_down - 1, 0.01)))
    return out, slow_down


def trials(old: Path, new: Path, settings: RetimeSettings) -> dict:
    verdicts, ratios, rounds, busy = [], [], [], 0
    for _ in range(TRIALS):
        try:
            result = retime(open_source(str(old)), open_source(str(new)), settings)
        except EdgekitError:  # the A/A spread was too wide for the tolerance: refused, not a verdict
            verdicts.append("REFUSED")
            continue
        verdicts.append(result["verdict"])
        print(f"  {new.name} vs {old.name}: {result['reason']}", flush=True)
        ratios.append(result["ratio"])
        rounds.append(result["rounds"])
        busy += result["busy_rounds"]
    return {"verdicts": verdicts, "ratios": ratios, "rounds": rounds, "busy": busy}


def run() -> None:
    fp32, int8 = fashion("fp32"), fashion("int8")
    slower, slow_down = slower_artifact(fp32)
    settings = RetimeSettings(tolerance=TOLERANCE, latency=BenchSettings(threads=1, warmup=10, runs=50))
    cases = [
        ("same artifact (fp32 vs itself)", fp32, fp32, "SAME"),
        (f"25%-slower artifact (measured x{slow_down:.2f})", fp32, slower, "REGRESSION"),
        ("fp32 against an int8 baseline", int8, fp32, "REGRESSION"),
    ]
    rows, start = [], time.time()
    for name, old, new, expected in cases:
        r = trials(old, new, settings)
        regressions = r["verdicts"].count("REGRESSION")
        rate = regressions / len(r["verdicts"])
        rows.append(
            [
                name,
                len(r["verdicts"]),
                "/".join(str(r["verdicts"].count(v)) for v in ("SAME", "REGRESSION", "INCONCLUSIVE", "REFUSED")),
                f"{'false alarms' if expected == 'SAME' else 'detected'} {rate:.0%}",
                f"{np.median(r['ratios']):.3f} ({min(r['ratios']):.3f}-{max(r['ratios']):.3f})" if r["ratios"] else "-",
                f"{np.mean(r['rounds']):.1f} (max {max(r['rounds'])})" if r["rounds"] else "-",
                r["busy"],
            ]
        )
    publish(
        "gate",
        f"Latency gate error rates: tolerance {TOLERANCE:.0%}, {TRIALS} trials per case, FashionCNN ONNX, 1 thread",
        ["case", "trials", "SAME/REGRESSION/INCONCLUSIVE/REFUSED", "rate", "new/old median (range)", "rounds per trial", "busy rounds"],
        rows,
        [
            f"Each trial is one `gate --baseline` decision: A B B A rounds in fresh processes, {settings.min_rounds} to {settings.max_rounds} rounds.",
            f"Took {time.time() - start:.0f} s. A busy round had a load average above 0.75 x the usable cores when a run started.",
        ],
    )
