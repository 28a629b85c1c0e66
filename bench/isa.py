"""3. int8 scheme per ISA class: agreement with fp32 and speed-up of each ONNX Runtime scheme on this host,
the int8 numerics of an AVX2-only CPU under `qemu-x86_64 -cpu Haswell` where qemu-user is installed, and of
Arm64 CPUs under qemu-aarch64 where the sysroot of `make arm64-sysroot` is (edgekit.emulation)."""

from __future__ import annotations

import platform
import shutil
import sys
from importlib.metadata import version
from pathlib import Path

import numpy as np

from bench.common import (
    CACHE,
    ISA_CLASS,
    artifact,
    code_stamp,
    fidelity_cells,
    labelled_cell,
    p50,
    photo_calibration,
    publish,
    ratio_text,
    spread,
)
from edgekit.artifact import TensorSpec
from edgekit.emulation import ARM_CPUS, SYSROOT, arm_python, run_json, sysroot_missing
from edgekit.isa import CLASSES
from edgekit.zoo.photos import crop_labels

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
    if sysroot_missing() is None:
        rows += _arm_rows(data, emulated_crops)
    publish(
        "isa",
        f"int8 schemes on this host (ISA class {ISA_CLASS}), and on emulated AVX2 and Arm64 CPUs",
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
            "Emulated Arm64: ONNX Runtime's aarch64 wheel under qemu-aarch64, each CPU's /proc/cpuinfo served so that ONNX Runtime "
            "takes its kernels (edgekit.emulation): " + ", ".join(f"{c.isa_class} = -cpu {c.qemu_cpu}" for c in ARM_CPUS.values()) + ".",
            f"The scheme edgekit picks on this host: {CLASSES[ISA_CLASS].activations} activations x {CLASSES[ISA_CLASS].weights} weights"
            + (", pair-safe (quantization.pair_safe)." if CLASSES[ISA_CLASS].pair_safe_weights else "."),
        ],
    )


def run_arm_lite0(crops: int = 600, seeds: tuple[int, ...] = (1, 2, 3)) -> None:
    """EfficientNet-Lite0 in the Arm scheme over whole crop sets on the emulated Arm64 CPUs: ONNX Runtime on all three
    on the first seed, then on the Raspberry Pi 5's (arm64-dotprod) on the others; LiteRT's int8 TFLite on the Pi 5 on
    the first seed; the same files run on this host beside them.
    `python -c "from bench.isa import run_arm_lite0; run_arm_lite0()"`: about 7 minutes per emulated run of 600
    crops, two at a time, on a 2-core EPYC; not part of `make bench`."""
    from concurrent.futures import ThreadPoolExecutor

    runtime = {"onnx": f"ONNX Runtime {version('onnxruntime')}", "tflite": f"LiteRT ({version('ai-edge-litert')} here, 1.4.0 emulated)"}
    onnx = {p: artifact("efficientnet_lite0", p, for_target="arm64" if p == "int8" else None) for p in ("fp32", "int8")}
    tflite = {p: artifact("efficientnet_lite0", p, "tflite") for p in ("fp32", "int8")}
    data = {seed: {"photos": photo_calibration(crops, seed=seed, model="efficientnet_lite0")} for seed in seeds}
    labels = crop_labels(crops)
    jobs = [(seeds[0], "onnx", c) for c in ARM_CPUS] + [(seed, "onnx", "arm64-dotprod") for seed in seeds[1:]]
    jobs.append((seeds[0], "tflite", "arm64-dotprod"))

    def emulated(job: tuple[int, str, str]) -> np.ndarray:
        seed, fmt, isa_class = job
        script, model = (EMULATED, onnx["int8"]) if fmt == "onnx" else (EMULATED_LITERT, tflite["int8"])
        return _run_emulated([str(arm_python(SYSROOT, isa_class))], [(model, data[seed]["photos"], crops)], script)[0]

    with ThreadPoolExecutor(2) as pool:
        outputs = dict(zip(jobs, pool.map(emulated, jobs), strict=True))
    rows = []
    for seed, fmt in dict.fromkeys((seed, fmt) for seed, fmt, _ in jobs):
        models, batch = (onnx, 50) if fmt == "onnx" else (tflite, 1)
        reference = _outputs(models["fp32"], data[seed], crops, batch)
        a76 = outputs[(seed, fmt, "arm64-dotprod")]
        for (s, f, isa_class), out in outputs.items():
            if (s, f) == (seed, fmt):
                same = "yes" if np.array_equal(out, a76) else "no"
                where = f"qemu-aarch64 {ARM_CPUS[isa_class].qemu_cpu} ({isa_class})"
                rows.append([seed, runtime[fmt], where, *_scores(reference, out, labels), same])
        native = _outputs(models["int8"], data[seed], crops, batch)
        same = "yes" if np.array_equal(native, a76) else f"no: up to {np.abs(native - a76).max():.2f} apart"
        rows.append([seed, runtime[fmt], f"this host ({ISA_CLASS})", *_scores(reference, native, labels), same])
    publish(
        "isa-arm-lite0",
        "EfficientNet-Lite0 int8 on ONNX Runtime's and LiteRT's Arm kernels, emulated",
        [
            "crops (seed)",
            "runtime",
            "run on",
            "agreement",
            "confident crops",
            "mean cosine",
            "largest fp32 margin among the flips",
            "expected top-1 cost (pts)",
            f"top-1 on the {int(labels.any(1).sum())} hand-labelled crops, int8 / fp32 (drop, 95% interval)",
            "logits = the A76's",
        ],
        rows,
        [
            f"{crops} crops of real photos per seed, against the same runtime's fp32 run on this host (arm64 fp32 matches it to 1e-5); "
            "calibration on 300 others (seed 0). ONNX Runtime: the Arm scheme (s8 x s8 QDQ); LiteRT: PT2E int8 TFLite, batch 1.",
            "Emulated: the aarch64 wheels (onnxruntime, ai-edge-litert 1.4.0: 2.x has no aarch64 Linux wheel) under qemu-aarch64, "
            "each CPU's /proc/cpuinfo served (edgekit.emulation); numerics only. One thread.",
            "Hand-labelled crops: those of the photos an ImageNet class names, each with every class that names its main "
            "object, as ImageNet-ReaL labels (zoo.photos.PHOTO_CLASSES; bench/results/*/accuracy-lite0.md).",
        ],
    )


def _scores(reference: np.ndarray, out: np.ndarray, labels: np.ndarray) -> list[str]:
    """An Arm Lite0 row's cells against fp32: fidelity_cells, then top-1 against the crops' label sets."""
    return [*fidelity_cells(reference, out)[0], labelled_cell(reference, out, labels)]


def _fashion_data() -> tuple[Path, Path]:
    """(Fashion-MNIST test .npz, calibration .npz), written once under the bench cache."""
    from edgekit.zoo.fashion_mnist import write_demo_data

    (CACHE / "fashion").mkdir(parents=True, exist_ok=True)
    return write_demo_data(CACHE / "fashion")


def _eval_data() -> dict[str, Path]:
    test, _ = _fashion_data()
    crops = photo_calibration(CROPS, seed=1, model="efficientnet_lite0")
    return {"fashion": test, "photos": crops}


def _fashion(precision: str, for_target: str | None = None) -> Path:
    """The repo's FashionCNN as ONNX (int8 calibrated on 300 real training images), cached."""
    from edgekit.conversion import CalibrationOptions, ConvertOptions
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
        python = ["qemu-x86_64", "-cpu", "Haswell", sys.executable]
        outputs["fashion int8"], outputs["effnet int8"] = _run_emulated(python, _int8_runs(models, data, crops))
        rows.append(["qemu Haswell (x86-avx2)", f"{SCHEMES[for_target]} ({for_target})", *_fidelity(outputs), "-", "-"])
    return rows


def _arm_rows(data: dict[str, Path], crops: int) -> list[list]:
    """The Arm scheme on each emulated Arm64 CPU, against fp32 run natively."""
    models = _models("arm64")
    reference = {name: _outputs(path, data, crops) for name, path in models.items() if "fp32" in name}
    rows = []
    for isa_class, cpu in ARM_CPUS.items():
        int8 = _run_emulated([str(arm_python(SYSROOT, isa_class))], _int8_runs(models, data, crops))
        outputs = {**reference, "fashion int8": int8[0], "effnet int8": int8[1]}
        rows.append([f"qemu-aarch64 {cpu.qemu_cpu} ({isa_class})", f"{SCHEMES['arm64']} (arm64)", *_fidelity(outputs), "-", "-"])
    return rows


def _int8_runs(models: dict[str, Path], data: dict[str, Path], crops: int) -> list[tuple[Path, Path, int]]:
    return [(models["fashion int8"], data["fashion"], FASHION), (models["effnet int8"], data["photos"], crops)]


def _outputs(path: Path, data: dict[str, Path], crops: int, batch: int = 50) -> np.ndarray:
    """The first FASHION test images or the first `crops` photo crops through the model, natively."""
    from edgekit.source import open_source
    from edgekit.targets import make_runner

    fashion = path.name.startswith("fashion")
    images = np.load(data["fashion" if fashion else "photos"])["image"][: FASHION if fashion else crops]
    runner = make_runner(open_source(str(path)), threads=2)
    runner.load()
    name = runner.inputs[0].name  # litert-torch names the input args_0
    return np.concatenate([runner.infer({name: images[i : i + batch]})[0] for i in range(0, len(images), batch)])


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
def run(model, data, n):
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    x = np.load(data)["image"][:n]
    return np.concatenate([session.run(None, {"image": x[i:i + 50]})[0] for i in range(0, len(x), 50)]).tolist()
args = sys.argv[1:]
print(json.dumps([run(args[i], args[i + 1], int(args[i + 2])) for i in range(0, len(args), 3)]))
"""


EMULATED_LITERT = """
import json, sys
import numpy as np
from ai_edge_litert.interpreter import Interpreter
def run(model, data, n):
    interpreter = Interpreter(model, num_threads=1)
    interpreter.allocate_tensors()
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    def quantized(d): return np.dtype(d["dtype"]).kind in "iu" and d["quantization"][0] != 0
    rows = []
    for x in np.load(data)["image"][:n]:
        if quantized(inp):  # as the device runner quantizes (edgekit.devices.device_runner.quantize)
            s, z = inp["quantization"]; i = np.iinfo(inp["dtype"])
            x = np.clip(np.round(x / s + z), i.min, i.max).astype(inp["dtype"])
        interpreter.set_tensor(inp["index"], x[None]); interpreter.invoke()
        y = interpreter.get_tensor(out["index"])[0]
        rows.append(((y.astype(np.float32) - out["quantization"][1]) * out["quantization"][0] if quantized(out) else y).tolist())
    return rows
args = sys.argv[1:]
print(json.dumps([run(args[i], args[i + 1], int(args[i + 2])) for i in range(0, len(args), 3)]))
"""


def _run_emulated(python: list[str], runs: list[tuple[Path, Path, int]], script: str = EMULATED) -> list[np.ndarray]:
    """Each (model, data, first n samples) through an emulated CPU's Python (`python`: its argv), one thread, by
    `script` (EMULATED: ONNX Runtime; EMULATED_LITERT: LiteRT's interpreter)."""
    outputs = run_json(python, script, [item for run in runs for item in run])
    return [np.asarray(o, dtype=np.float32) for o in outputs]
