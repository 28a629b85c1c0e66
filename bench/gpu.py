"""6. GPU: EfficientNet-Lite0 on torch:cuda (eager / torch.compile, fp32 / fp16 / bf16, channels_last) and TensorRT where installed.

The issue's bar, measured on the lent H100 with CUDA events (median of 200): eager fp32 3.12 ms at batch 1,
8.07 ms at batch 64; torch.compile(mode="reduce-overhead") fp16 0.40 / 3.58 ms. Each cell runs in a fresh
process through edgekit's own latency protocol; compile time is reported apart. Without a CUDA device
this prints that it was skipped and writes nothing.
"""

from __future__ import annotations

from bench.common import CACHE, IMAGE, MODELS, photo_calibration, publish
from edgekit.conversion import CalibrationOptions, ConvertOptions
from edgekit.source import ModelSource, open_source
from edgekit.validation.benchmark import BenchSettings, bench

TORCH_SETTINGS = (  # compile, dtype, channels_last
    ("eager", "fp32", "0"),
    ("eager", "fp16", "0"),
    ("eager", "bf16", "0"),
    ("reduce-overhead", "fp32", "0"),
    ("reduce-overhead", "fp16", "0"),
    ("reduce-overhead", "bf16", "0"),
    ("reduce-overhead", "fp16", "1"),  # measured elsewhere on an H100: 2.27 -> ~2.0 ms at batch 64
)
BAR = {("eager", "fp32"): (3.12, 8.07), ("reduce-overhead", "fp16"): (0.40, 3.58)}
BATCHES = (1, 64)


def run() -> None:
    import importlib.util

    import torch

    if not torch.cuda.is_available():
        print("gpu: skipped (no CUDA device on this machine); run `python -m bench gpu` where one is", flush=True)
        return
    source = ModelSource(MODELS["efficientnet_lite0"][0], "torch-factory")
    rows = [_torch_row(source, settings, batch) for settings in TORCH_SETTINGS for batch in BATCHES]
    if importlib.util.find_spec("tensorrt") is not None:
        rows += [_tensorrt_row(precision, batch) for precision in ("fp16", "int8") for batch in BATCHES]
    publish(
        "gpu",
        f"EfficientNet-Lite0 224x224 on {torch.cuda.get_device_name(0)}: p50 by CUDA events (ms)",
        ["target", "batch", "p50 (CUDA events)", "p90", "wall p50", "compile s", "peak GPU MB", "issue's bar"],
        rows,
        [
            "200 timed runs after 20 warm-up, a fresh process per cell; compile time (torch.compile, CUDA-graph capture) is not in any latency."
        ],
    )


def _torch_row(source, settings: tuple[str, str, str], batch: int) -> list:
    mode, dtype, channels_last = settings
    target = f"torch:cuda[compile={mode},dtype={dtype},channels_last={channels_last}]"
    result = bench(source, BenchSettings(target, None, batch, 20, 200), list(IMAGE))
    bar = BAR.get((mode, dtype)) if channels_last == "0" else None
    return _row(result, batch, f"{bar[BATCHES.index(batch)]:.2f}" if bar else "-")


def _tensorrt_row(precision: str, batch: int) -> list:
    from edgekit.converters.pipeline import convert

    engine = CACHE / f"efficientnet_lite0.{precision}.engine"
    if not engine.exists():
        calibration = (
            CalibrationOptions(str(photo_calibration(model="efficientnet_lite0")), 300) if precision == "int8" else CalibrationOptions()
        )
        source = ModelSource(MODELS["efficientnet_lite0"][0], "torch-factory")
        convert(source, "tensorrt", engine, ConvertOptions(precision, IMAGE, calibration))
    return _row(bench(open_source(str(engine)), BenchSettings("tensorrt:cuda", None, batch, 20, 200)), batch, "-")


def _row(result, batch: int, bar: str) -> list:
    own = result.runtime_latency
    compile_s = "-" if result.compile_ms is None else f"{result.compile_ms / 1000:.1f}"
    peak = "-" if result.peak_gpu_memory_mb is None else f"{result.peak_gpu_memory_mb:.0f}"
    return [result.target, batch, f"{own.p50:.3f}", f"{own.p90:.3f}", f"{result.latency.p50:.3f}", compile_s, peak, bar]
