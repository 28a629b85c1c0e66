"""2. Accuracy: drop per precision on the Fashion-MNIST 10k test set; int8 top-1 agreement on real photos."""

from __future__ import annotations

from bench.common import CACHE, artifact, photo_calibration, publish
from edgekit.calibration import load_samples
from edgekit.demo import run_demo
from edgekit.loaders import open_source
from edgekit.targets import make_runner
from edgekit.validate.compare import compare_output, run_batches

PRECISIONS = ("fp32", "fp16", "int8", "int8-dynamic", "int8-weights")


def run() -> None:
    rows = _fashion_rows(keras=False) + _fashion_rows(keras=True) + _photo_rows()
    publish(
        "accuracy",
        "Accuracy vs the fp32 original",
        ["model", "data", "runtime", "precision", "accuracy", "drop (pts)", "top-1 agreement"],
        rows,
        [
            "Fashion-MNIST: the repo's trained FashionCNN (PyTorch and Keras), all 10,000 test images; int8 calibrated on 500 training images.",
            "Photos: 600 crops/flips of 14 scikit-image photos (seed 1), disjoint from the 300 calibration crops (seed 0).",
            "Target: int8 drop <= 0.5 points.",
        ],
    )


def _fashion_rows(keras: bool) -> list[list]:
    report, _ = run_demo(CACHE / ("demo-keras" if keras else "demo-torch"), runs=10, keras=keras, precisions=PRECISIONS)
    rows = []
    for r in report["rows"]:
        if "does not support precision" in r["status"]:
            continue
        if r["status"] != "ok":
            rows.append([report["model"], "Fashion-MNIST test 10k", r["target"], r["precision"], r["status"], "-", "-"])
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
            ]
        )
    return rows


def _softmax_max(logits):
    import numpy as np

    e = np.exp(logits - logits.max(1, keepdims=True))
    return (e / e.sum(1, keepdims=True)).max(1)


def _photo_rows() -> list[list]:

    samples = load_samples(str(photo_calibration(600, seed=1, model="efficientnet_lite0")))
    fp32 = run_batches(make_runner(open_source(str(artifact("efficientnet_lite0", "fp32")))), samples, 50)[0]
    rows = []
    for precision in ("fp16", "int8"):
        out = run_batches(make_runner(open_source(str(artifact("efficientnet_lite0", precision)))), samples, 50)[0]
        confident = _softmax_max(fp32) > 0.5  # most crops are far from ImageNet: near-ties flip easily
        sure = float((fp32.argmax(1) == out.argmax(1))[confident].mean() * 100)
        agreement = f"{compare_output('logits', fp32, out).top1_agreement:.2f}% ({sure:.2f}% on the {int(confident.sum())} crops fp32 is >50% sure of)"
        rows.append(["EfficientNet-Lite0", "600 real-photo crops", "onnxruntime:cpu", precision, "-", "-", agreement])
    return rows
