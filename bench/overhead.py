"""4. Overhead: `edgekit --help` vs bare Python; `edgekit convert --precision int8` vs a bare script; peak memory."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from bench.common import CACHE, publish
from edgekit.zoo.fashion_mnist import write_demo_data

BARE_CONVERT = """
import sys, numpy as np, torch, onnxruntime.quantization as q
from onnxruntime.quantization.shape_inference import quant_pre_process
from edgekit.zoo.models import fashion_cnn
m = fashion_cnn(); m.load_state_dict(torch.load(sys.argv[1], weights_only=True))
x = torch.rand(2, 1, 28, 28)
torch.onnx.export(m, (x,), sys.argv[2] + ".fp32.onnx", dynamo=True, external_data=False, input_names=["image"], output_names=["output"],
                  dynamic_shapes={"image": {0: torch.export.Dim("batch", min=1)}})
quant_pre_process(sys.argv[2] + ".fp32.onnx", sys.argv[2] + ".pre.onnx")
data = np.load(sys.argv[3])["image"][:300]
class R(q.CalibrationDataReader):
    def __init__(self): self.it = iter([{"image": data[i:i + 16]} for i in range(0, 300, 16)])
    def get_next(self): return next(self.it, None)
q.quantize_static(sys.argv[2] + ".pre.onnx", sys.argv[2], R(), quant_format=q.QuantFormat.QDQ, per_channel=True,
                  activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QInt8)
"""
PEAK = "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, capture_output=True); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"


def timed(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of a command."""
    start = time.perf_counter()
    peak_kb = int(subprocess.run([sys.executable, "-c", PEAK, *cmd], capture_output=True, text=True, check=True).stdout)
    return time.perf_counter() - start, peak_kb / 1024


def run(rounds: int = 5) -> None:
    from edgekit.zoo.fashion_mnist import WEIGHTS

    _, calib = write_demo_data(CACHE)
    edgekit = [sys.executable, "-m", "edgekit"]
    help_times = [timed([*edgekit, "--help"])[0] for _ in range(rounds)]
    bare_times = [timed([sys.executable, "-c", "pass"])[0] for _ in range(rounds)]
    ours = [
        timed(
            [
                *edgekit,
                "-q",
                "convert",
                "edgekit.zoo.models:fashion_cnn",
                "--weights",
                str(WEIGHTS),
                "--to",
                "onnx",
                "-i",
                "image:1x1x28x28",
                "-p",
                "int8",
                "--calib",
                str(calib),
                "-o",
                str(CACHE / "ovh.int8.onnx"),
            ]
        )
        for _ in range(3)
    ]
    bare = [timed([sys.executable, "-c", BARE_CONVERT, str(WEIGHTS), str(CACHE / "bare.int8.onnx"), str(calib)]) for _ in range(3)]
    help_extra = statistics.median(help_times) - statistics.median(bare_times)
    convert_ratio = statistics.median(t for t, _ in ours) / statistics.median(t for t, _ in bare)
    rows = [
        ["`edgekit --help` minus `python -c pass`", f"{help_extra:.3f} s", "< 0.5 s"],
        [
            "`edgekit convert -p int8` / bare script (FashionCNN, 300 calibration samples)",
            f"{convert_ratio:.2f}x ({statistics.median(t for t, _ in ours):.1f} s vs {statistics.median(t for t, _ in bare):.1f} s)",
            "< 1.2x",
        ],
        ["peak RSS of `edgekit convert -p int8`", f"{max(m for _, m in ours):.0f} MB (bare script {max(m for _, m in bare):.0f} MB)", "-"],
    ]
    publish(
        "overhead",
        "Overhead of edgekit itself",
        ["measure", "value", "target"],
        rows,
        [f"Medians of {rounds} runs (--help) and 3 runs (convert); wall time includes interpreter start-up."],
    )
