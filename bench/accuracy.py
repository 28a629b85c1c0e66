"""2. Accuracy: drop per precision on the Fashion-MNIST 10k test set; int8 top-1 agreement on real photos."""

from __future__ import annotations

from bench.common import CACHE, TARGETS, artifact, p50, photo_calibration, publish
from edgekit.calibration import load_samples
from edgekit.demo import run_demo
from edgekit.loaders import open_source
from edgekit.targets import make_runner
from edgekit.validate.compare import compare_output, run_batches

PRECISIONS = ("fp32", "fp16", "int8", "int8-dynamic", "int8-weights")
_PHOTO_NOTES = (
    "EfficientNet-Lite0 takes RGB in [0, 1] and normalises inside ((x*255-127)/128, as its TF weights were trained); ONNX Runtime "
    "int8 fits its weight codes to the calibration inputs and corrects biases (converters.int8_rounding, provenance "
    "`quantization.weight_rounding`), then keeps sensitivity outliers in float where that helps (`quantization.sensitivity`); "
    "OpenVINO int8 is NNCF's (fast bias correction); LiteRT int8 is PT2E's. p50 ratio = int8 / fp32 of the same runtime, "
    "2 threads, one noisy shared 2-core VM.",
    "Targets (issue 17): agreement >= 97% on all crops, >= 99% on the confident ones, mean cosine >= 0.995.",
)


def run() -> None:
    rows = _fashion_rows(keras=False) + _fashion_rows(keras=True) + _photo_rows()
    publish(
        "accuracy",
        "Accuracy vs the fp32 original",
        ["model", "data", "runtime", "precision", "accuracy", "drop (pts)", "top-1 agreement", "p50 vs fp32 (2 threads)"],
        rows,
        [
            "Fashion-MNIST: the repo's trained FashionCNN (PyTorch and Keras), all 10,000 test images; int8 calibrated on 500 training images.",
            "Photos: 600 crops/flips of 14 scikit-image photos (seed 1), disjoint from the 300 calibration crops (seed 0).",
            "Target: int8 drop <= 0.5 points.",
            *_PHOTO_NOTES,
        ],
    )


def run_photos() -> None:
    """The EfficientNet-Lite0 rows alone (`python -c "from bench.accuracy import run_photos; run_photos()"`): minutes, not the
    Fashion-MNIST demo matrix's."""
    publish(
        "accuracy-lite0",
        "EfficientNet-Lite0 int8 vs fp32 on real-photo crops",
        ["model", "data", "runtime", "precision", "accuracy", "p50 vs fp32 (2 threads)", "top-1 agreement"],
        _photo_rows(),
        [
            "600 crops/flips of 14 scikit-image photos (seed 1), other crops than the 300 calibration crops (seed 0).",
            *_PHOTO_NOTES,
        ],
    )


def _fashion_rows(keras: bool) -> list[list]:
    report, _ = run_demo(CACHE / ("demo-keras" if keras else "demo-torch"), runs=10, keras=keras, precisions=PRECISIONS)
    rows = []
    for r in report["rows"]:
        if "does not support precision" in r["status"]:
            continue
        if r["status"] != "ok":
            rows.append([report["model"], "Fashion-MNIST test 10k", r["target"], r["precision"], r["status"], "-", "-", "-"])
            continue
        rows.append(
            [
                report["model"],
                "Fashion-MNIST test 10k",
                r["target"],
                r["precision"],
                f"{r['accuracy']:.2f}% (ref {r['reference_accuracy']:.2f}%)",
                f"{r['drop_points']:+.2f}",
                f"{r['top1_agreement']:.2f}%",
                "-",
            ]
        )
    return rows


def _softmax_max(logits):
    import numpy as np

    e = np.exp(logits - logits.max(1, keepdims=True))
    return (e / e.sum(1, keepdims=True)).max(1)


def _logits(path, samples, fmt: str):
    """The model's first output on `samples`, bound to its input names (litert-torch names its input args_0)."""
    runner = make_runner(open_source(str(path)))
    runner.load()
    return run_batches(runner, samples.bind(runner.inputs), 50 if fmt != "tflite" else 1)[0]


def _photo_rows() -> list[list]:
    """EfficientNet-Lite0 fp16/int8 vs fp32 on each runtime: agreement (all / confident crops), cosine, p50 ratio."""
    samples = load_samples(str(photo_calibration(600, seed=1, model="efficientnet_lite0")))
    rows = []
    for fmt in ("onnx", "openvino", "tflite"):
        fp32_path = artifact("efficientnet_lite0", "fp32", fmt)
        fp32 = _logits(fp32_path, samples, fmt)
        confident = _softmax_max(fp32) > 0.5  # most crops are far from ImageNet: near-ties flip easily
        for precision in ("fp16", "int8") if fmt == "onnx" else ("int8",):
            path = artifact("efficientnet_lite0", precision, fmt)
            out = _logits(path, samples, fmt)
            fidelity = compare_output("logits", fp32, out)
            sure = float((fp32.argmax(1) == out.argmax(1))[confident].mean() * 100)
            agreement = f"{fidelity.top1_agreement:.2f}% ({sure:.2f}% on the {int(confident.sum())} crops fp32 is >50% sure of); cosine {fidelity.cosine_mean:.4f}"
            ratio = p50(path, 2) / p50(fp32_path, 2)
            rows.append(
                [
                    "EfficientNet-Lite0",
                    "600 real-photo crops",
                    TARGETS[fmt],
                    precision,
                    "-",
                    f"p50 ratio {ratio:.3f} (2 threads)",
                    agreement,
                ]
            )
    return rows
