"""1. Speed-up: fp16 and int8 vs fp32 p50 per runtime, batch 1, 1 and 2 threads, repeated side by side."""

from __future__ import annotations

from bench.common import MODELS, TARGETS, artifact, p50, publish, ratio_text, spread

PRECISIONS = ("fp32", "fp16", "int8")


def run(rounds: int = 3, threads_list: tuple[int, ...] = (1, 2)) -> None:
    rows = [row for model in MODELS for fmt in TARGETS for row in _rows(model, fmt, rounds, threads_list)]
    publish(
        "speedup",
        "Speed-up vs fp32 (p50 ratio, batch 1; lower is faster)",
        ["model", "target", "threads", "precision", "fp32 p50 ms", "p50 ms", "p50 ratio median (min-max)"],
        rows,
        [
            f"{rounds} interleaved rounds, each a fresh process per artifact: 10 warm-up + 60 timed runs, wall clock.",
            "int8 calibrated on 300 crops of real photos: ONNX static QDQ (u8 activations x s8 per-channel weights), "
            "OpenVINO NNCF, LiteRT PT2E (litert-torch).",
            "OpenVINO runs with INFERENCE_PRECISION_HINT=f32: fp32 and fp16 IRs both compute in f32; its int8 kernels use AMX/VNNI.",
            "Target: int8/fp32 <= 0.4 for the ResNet-18 shape (VNNI compute ceiling ~0.25; AMX goes lower).",
            "Pruned models: `python -m bench prune` (MAC ratio beside p50 ratio, per kept-channel multiple).",
        ],
    )


def _rows(model: str, fmt: str, rounds: int, threads_list) -> list[list]:
    paths = {p: artifact(model, p, fmt) for p in PRECISIONS}
    rows = []
    for threads in threads_list:
        times = {p: [] for p in PRECISIONS}
        for _ in range(rounds):  # interleaved, so drift on a noisy VM hits every precision alike
            for precision in PRECISIONS:
                times[precision].append(p50(paths[precision], threads))
        for precision in PRECISIONS[1:]:
            ratios = [t / f for t, f in zip(times[precision], times["fp32"], strict=True)]
            rows.append(
                [
                    model,
                    TARGETS[fmt],
                    threads,
                    precision,
                    f"{spread(times['fp32'])['median']:.2f}",
                    f"{spread(times[precision])['median']:.2f}",
                    ratio_text(spread(ratios)),
                ]
            )
    return rows
