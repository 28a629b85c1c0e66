"""ExecuTorch beside ONNX Runtime, OpenVINO and LiteRT: fp32 and int8 p50 of the same models side by side in
one run (interleaved rounds, a fresh process per artifact), and each runtime's int8 top-1 agreement with its fp32."""

from __future__ import annotations

from bench.common import MODELS, artifact, p50, photo_calibration, publish, ratio_text, spread
from edgekit.calibration import load_samples
from edgekit.metrics.compare import compare_output, run_batches
from edgekit.source import open_source
from edgekit.targets import DEFAULT_TARGET, make_runner

FORMATS = ("onnx", "openvino", "tflite", "executorch")
PRECISIONS = ("fp32", "int8")
CROPS = 240  # real-photo crops for agreement, apart from the 300 calibration crops (another seed)


def run(rounds: int = 3, threads: int = 1, models: tuple[str, ...] = tuple(MODELS)) -> None:
    rows = [row for model in models for row in _rows(model, rounds, threads)]
    publish(
        "runtimes" if set(models) == set(MODELS) else f"runtimes-{'-'.join(models)}",
        "ExecuTorch (XNNPACK) beside ONNX Runtime, OpenVINO and LiteRT: p50 ms, batch 1",
        ["model", "target", "threads", "fp32 p50 ms", "int8 p50 ms", "int8/fp32 median (min-max)", "int8 top-1 agreement with fp32"],
        rows,
        [
            f"{rounds} interleaved rounds over all {len(FORMATS) * len(PRECISIONS)} artifacts of a model, each a fresh process: "
            "10 warm-up + 60 timed runs, wall clock; medians of the rounds.",
            "int8 calibrated on 300 crops of real photos, each backend's default: ONNX Runtime static QDQ (the ISA class's "
            "scheme, per-channel weights), OpenVINO (ONNX Runtime's QDQ on x86-amx/vnni/avx2, NNCF elsewhere), LiteRT PT2E "
            "(litert-torch's quantizer) and ExecuTorch PT2E (XNNPACKQuantizer, lowered to XNNPACK), both with backends.torch.pt2e's "
            "steps and the sensitivity outliers kept in float where that brings the outputs closer to fp32.",
            f"Agreement: top-1 of int8 vs the same runtime's fp32 on {CROPS} other crops of real photos. "
            "The ResNet-18 shape has untrained weights (near-ties flip easily); EfficientNet-Lite0 is ImageNet-trained.",
        ],
    )


def _rows(model: str, rounds: int, threads: int) -> list[list]:
    paths = {(fmt, p): artifact(model, p, fmt) for fmt in FORMATS for p in PRECISIONS}
    times = {key: [] for key in paths}
    for _ in range(rounds):  # interleaved, so drift on a noisy VM hits every runtime alike
        for key, path in paths.items():
            times[key].append(p50(path, threads))
    samples = load_samples(str(photo_calibration(CROPS, seed=1, model=model)))
    rows = []
    for fmt in FORMATS:
        fp32, int8 = (times[fmt, p] for p in PRECISIONS)
        ratios = [i / f for i, f in zip(int8, fp32, strict=True)]
        rows.append(
            [
                model,
                DEFAULT_TARGET[fmt],
                threads,
                f"{spread(fp32)['median']:.2f}",
                f"{spread(int8)['median']:.2f}",
                ratio_text(spread(ratios)),
                _agreement(paths[fmt, "fp32"], paths[fmt, "int8"], samples),
            ]
        )
    return rows


def _agreement(fp32_path, int8_path, samples) -> str:
    outputs = []
    for path in (fp32_path, int8_path):
        runner = make_runner(open_source(str(path)))
        runner.load()
        outputs.append(run_batches(runner, samples.bind(runner.inputs), 1)[0])  # batch 1: .pte and .tflite are planned for it
    fidelity = compare_output("logits", *outputs)
    return f"{fidelity.top1_agreement:.2f}% (cosine {fidelity.cosine_mean:.4f})"
