"""2. Accuracy: drop per precision on the Fashion-MNIST 10k test set; int8 top-1 agreement on real photos."""

from __future__ import annotations

from bench.common import CACHE, artifact, publish
from edgekit.calibration import load_samples
from edgekit.converters import CalibrationOptions, ConvertOptions
from edgekit.converters.pipeline import convert
from edgekit.demo import INPUTS, demo_source, write_demo_data
from edgekit.loaders import open_source
from edgekit.targets import make_runner
from edgekit.validate.compare import accuracy_percent, compare_output, run_batches

FASHION_PRECISIONS = ("fp32", "fp16", "int8", "int8-dynamic")


def run() -> None:
    rows = _fashion_rows() + _photo_rows()
    publish(
        "accuracy",
        "Accuracy vs the fp32 original",
        ["model", "data", "runtime", "precision", "accuracy", "drop (pts)", "top-1 agreement"],
        rows,
        [
            "Fashion-MNIST: the repo's trained FashionCNN, all 10,000 test images; int8 calibrated on 500 training images.",
            "Photos: 600 crops/flips of 14 scikit-image photos (seed 1), disjoint from the 300 calibration crops (seed 0).",
            "Target: int8 drop <= 0.5 points.",
        ],
    )


def _fashion_rows() -> list[list]:
    CACHE.mkdir(parents=True, exist_ok=True)
    test, calib = write_demo_data(CACHE)
    samples = load_samples(str(test), specs=list(INPUTS))
    reference = make_runner(demo_source(), inputs=list(INPUTS))
    ref_logits = run_batches(reference, samples, 500)[0]
    ref_acc = accuracy_percent(ref_logits, samples.labels)
    rows = [["FashionCNN", "Fashion-MNIST test 10k", "torch:cpu", "fp32 (reference)", f"{ref_acc:.2f}%", "-", "-"]]
    for precision in FASHION_PRECISIONS:
        calibration = CalibrationOptions(str(calib), 500) if precision == "int8" else CalibrationOptions()
        path = convert(demo_source(), "onnx", CACHE / f"fashion.{precision}.onnx", ConvertOptions(precision, INPUTS, calibration)).path
        logits = run_batches(make_runner(open_source(str(path))), samples, 500)[0]
        acc = accuracy_percent(logits, samples.labels)
        agree = compare_output("logits", ref_logits, logits).top1_agreement
        rows.append(
            ["FashionCNN", "Fashion-MNIST test 10k", "onnxruntime:cpu", precision, f"{acc:.2f}%", f"{ref_acc - acc:+.2f}", f"{agree:.2f}%"]
        )
    return rows


def _softmax_max(logits):
    import numpy as np

    e = np.exp(logits - logits.max(1, keepdims=True))
    return (e / e.sum(1, keepdims=True)).max(1)


def _photo_rows() -> list[list]:
    import numpy as np

    from edgekit.zoo.photos import imagenet_crops

    path = CACHE / "photos_eval_600_1.npz"
    if not path.exists():
        np.savez(path, image=imagenet_crops(600, seed=1))
    samples = load_samples(str(path))
    fp32 = run_batches(make_runner(open_source(str(artifact("efficientnet_lite0", "fp32")))), samples, 50)[0]
    rows = []
    for precision in ("fp16", "int8"):
        out = run_batches(make_runner(open_source(str(artifact("efficientnet_lite0", precision)))), samples, 50)[0]
        rows.append(
            [
                "EfficientNet-Lite0",
                "600 real-photo crops",
                "onnxruntime:cpu",
                precision,
                "-",
                "-",
                f"{compare_output('logits', fp32, out).top1_agreement:.2f}%",
            ]
        )
    return rows
