"""3. int8 scheme per ISA class: agreement with fp32 and speed-up of each ONNX Runtime scheme on this host,
and the int8 numerics of an AVX2-only CPU under `qemu-x86_64 -cpu Haswell` where qemu-user is installed."""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from bench.common import CACHE, ISA_CLASS, artifact, code_stamp, p50, photo_calibration, publish, ratio_text, spread
from edgekit.artifact import TensorSpec
from edgekit.isa import CLASSES

# One class per distinct ONNX Runtime scheme: its name picks the scheme through --for-target.
SCHEMES = {"x86-vnni": "u8 x s8", "x86-avx2": "u8 x s8, pair-safe weights", "other": "u8 x u8", "arm64": "s8 x s8"}
FASHION = 2000
FASHION_INPUT = (TensorSpec("image", ("batch", 1, 28, 28), "float32"),)
CROPS = 240


def run(rounds: int = 3, emulated_crops: int = 60) -> None:
    data = _eval_data()
    rows = [_native_row(for_target, data, rounds) for for_target in SCHEMES]
    if platform.machine() == "x86_64" and shutil.which("qemu-x86_64"):
        rows += _emulated_rows(data, emulated_crops)
    publish(
        "isa",
        f"int8 schemes on this host (ISA class {ISA_CLASS}), and on an emulated AVX2 CPU",
        [
            "measured on",
            "scheme (for class)",
            "FashionCNN agreement",
            "EfficientNet-Lite0 agreement / cosine",
            "ResNet-18 shape int8/fp32 p50, 1 thr",
            "2 thr",
        ],
        rows,
        [
            f"FashionCNN: the first {FASHION} Fashion-MNIST test images, int8 calibrated on 300 training images; agreement = top-1 agreement with fp32.",
            f"EfficientNet-Lite0: {CROPS} crops of real photos (seed 1) disjoint from the 300 calibration crops (seed 0); mean cosine of the logits.",
            f"Speed: {rounds} interleaved rounds, a fresh process per artifact, 10 warm-up + 60 timed runs, batch 1.",
            "Emulated: qemu-x86_64 -cpu Haswell offers AVX2 without AVX-512/VNNI, so ONNX Runtime takes an AVX2 CPU's kernels; "
            "numerics only, emulated latency means nothing.",
            f"The scheme edgekit picks on this host: {CLASSES[ISA_CLASS].activations} activations x {CLASSES[ISA_CLASS].weights} weights"
            + (", pair-safe (converters.pair_safe)." if CLASSES[ISA_CLASS].pair_safe_weights else "."),
        ],
    )


def _fashion_data() -> tuple[Path, Path]:
    """(Fashion-MNIST test .npz, calibration .npz), written once under the bench cache."""
    from edgekit.demo import write_demo_data

    (CACHE / "fashion").mkdir(parents=True, exist_ok=True)
    return write_demo_data(CACHE / "fashion")


def _eval_data() -> dict[str, Path]:
    test, _ = _fashion_data()
    crops = photo_calibration(CROPS, seed=1, model="efficientnet_lite0")
    return {"fashion": test, "photos": crops}


def _fashion(precision: str, for_target: str | None = None) -> Path:
    """The repo's FashionCNN as ONNX (int8 calibrated on 300 real training images), cached."""
    from edgekit.converters import CalibrationOptions, ConvertOptions
    from edgekit.converters.pipeline import convert
    from edgekit.demo import demo_source

    out = CACHE / f"fashion.{precision}.{for_target or 'fp32'}.{code_stamp()}.onnx"  # the code that made it: no stale scheme
    if not out.exists():
        _, calib = _fashion_data()
        calibration = CalibrationOptions(str(calib), 300) if precision == "int8" else CalibrationOptions()
        options = ConvertOptions(precision, FASHION_INPUT, calibration, for_target=for_target or "onnxruntime:cpu")
        convert(demo_source(), "onnx", out, options)
    return out


def _models(for_target: str) -> dict[str, Path]:
    return {
        "fashion fp32": _fashion("fp32"),
        "fashion int8": _fashion("int8", for_target),
        "effnet fp32": artifact("efficientnet_lite0", "fp32"),
        "effnet int8": artifact("efficientnet_lite0", "int8", for_target=for_target),
    }


def _native_row(for_target: str, data: dict[str, Path], rounds: int) -> list:
    outputs = {name: _outputs(path, data, CROPS) for name, path in _models(for_target).items()}
    speed = [_speedup(for_target, threads, rounds) for threads in (1, 2)]
    return [f"this host ({ISA_CLASS})", f"{SCHEMES[for_target]} ({for_target})", *_fidelity(outputs), *speed]


def _emulated_rows(data: dict[str, Path], crops: int) -> list[list]:
    rows = []
    for for_target in ("x86-vnni", "x86-avx2", "other"):
        models = _models(for_target)
        outputs = {name: _outputs(path, data, crops) for name, path in models.items() if "fp32" in name}
        outputs["fashion int8"], outputs["effnet int8"] = _run_emulated([models["fashion int8"], models["effnet int8"]], data, crops)
        rows.append(["qemu Haswell (x86-avx2)", f"{SCHEMES[for_target]} ({for_target})", *_fidelity(outputs), "-", "-"])
    return rows


def _outputs(path: Path, data: dict[str, Path], crops: int) -> np.ndarray:
    """The first FASHION test images or the first `crops` photo crops through the model, natively."""
    from edgekit.loaders import open_source
    from edgekit.targets import make_runner

    fashion = path.name.startswith("fashion")
    images = np.load(data["fashion" if fashion else "photos"])["image"][: FASHION if fashion else crops]
    runner = make_runner(open_source(str(path)), threads=2)
    runner.load()
    return np.concatenate([runner.infer({"image": images[i : i + 50]})[0] for i in range(0, len(images), 50)])


def _fidelity(outputs: dict[str, np.ndarray]) -> list[str]:
    fashion = _agreement(outputs["fashion fp32"], outputs["fashion int8"])
    ref, out = outputs["effnet fp32"], outputs["effnet int8"]
    cosine = float(np.mean(np.sum(ref * out, 1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(out, axis=1))))
    return [f"{fashion:.2f}%", f"{_agreement(ref, out):.2f}% / {cosine:.4f} (n={len(ref)})"]


def _agreement(reference: np.ndarray, output: np.ndarray) -> float:
    return float(np.mean(reference.argmax(1) == output.argmax(1)) * 100)


def _speedup(for_target: str, threads: int, rounds: int) -> str:
    fp32, int8 = artifact("resnet18_shape", "fp32"), artifact("resnet18_shape", "int8", for_target=for_target)
    ratios = []
    for _ in range(rounds):  # interleaved, so drift on a noisy VM hits both alike
        ratios.append(p50(int8, threads) / p50(fp32, threads))
    return ratio_text(spread(ratios))


EMULATED = """
import json, sys
import numpy as np, onnxruntime as ort
options = ort.SessionOptions(); options.intra_op_num_threads = 1
def run(model, data, key, n):
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    x = np.load(data)[key][:n]
    return np.concatenate([session.run(None, {"image": x[i:i + 50]})[0] for i in range(0, len(x), 50)]).tolist()
print(json.dumps([run(sys.argv[1], sys.argv[3], "image", int(sys.argv[5])), run(sys.argv[2], sys.argv[4], "image", int(sys.argv[6]))]))
"""


def _run_emulated(models: list[Path], data: dict[str, Path], crops: int) -> list[np.ndarray]:
    args = [*map(str, models), str(data["fashion"]), str(data["photos"]), str(FASHION), str(crops)]
    proc = subprocess.run(
        ["qemu-x86_64", "-cpu", "Haswell", sys.executable, "-c", EMULATED, *args], capture_output=True, text=True, check=True
    )
    return [np.asarray(o, dtype=np.float32) for o in json.loads(proc.stdout.splitlines()[-1])]
