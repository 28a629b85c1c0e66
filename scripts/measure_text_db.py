"""int8 fidelity of the zoo's text detector (zoo:text-db) on rendered pages, at two page sizes.

Writes calibration pages (one size) and evaluation pages (two sizes, other seeds) to FOLDER, converts the
detector with edgekit (ONNX Runtime static int8: the default path, --per-tensor, --no-keep-sensitive;
OpenVINO int8), runs each on both sizes and prints, per variant and size, the probability map's cosine to
fp32 and the pixel F1 / IoU of the map binarized at 0.3 against fp32's and against the ground truth.

    PYTHONPATH=. python scripts/measure_text_db.py /tmp/textdb [--calib-size 320x480] [--variants default,per-tensor]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from edgekit.zoo.text_pages import DB_ONNX, map_fidelity, text_pages

EVAL_SIZES = ((320, 480), (640, 640))
VARIANTS = {  # name -> (target format, extra convert flags)
    "ort-default": ("onnx", []),
    "ort-per-tensor": ("onnx", ["--per-tensor"]),
    "ort-plain": ("onnx", ["--no-keep-sensitive"]),
    "ort-plain-per-tensor": ("onnx", ["--no-keep-sensitive", "--per-tensor"]),
    "openvino": ("openvino", []),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path)
    parser.add_argument("--calib-size", default="320x480")
    parser.add_argument("--calib-count", type=int, default=32)
    parser.add_argument("--eval-count", type=int, default=6)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--model", type=Path, default=DB_ONNX)
    parser.add_argument("--reuse", action="store_true", help="use the artifacts already in FOLDER")
    args = parser.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    h, w = (int(v) for v in args.calib_size.split("x"))
    calib = args.folder / f"calib_{h}x{w}.npz"
    if not calib.exists():
        np.savez(calib, image=text_pages(args.calib_count, 100, h, w)["image"])
    pages = {size: text_pages(args.eval_count, 200 + i, *size) for i, size in enumerate(EVAL_SIZES)}
    fp32 = {size: run_onnx(args.model, p["image"]) for size, p in pages.items()}
    results = []
    for name in args.variants.split(","):
        to, flags = VARIANTS[name]
        out = args.folder / f"{name}.calib{h}x{w}.{'xml' if to == 'openvino' else 'onnx'}"
        failed = "" if out.exists() and args.reuse else convert(args.model, to, out, calib, [*flags, "-i", f"image:batchx3x{h}x{w}"])
        if failed:
            results.append({"variant": name, "calib": f"{h}x{w}", "failed": failed})
            print(json.dumps(results[-1]), flush=True)
            continue
        for size, p in pages.items():
            maps = run_openvino(out, p["image"]) if to == "openvino" else run_onnx(out, p["image"])
            row = {
                "variant": name,
                "calib": f"{h}x{w}",
                "pages": f"{size[0]}x{size[1]}",
                **map_fidelity(fp32[size][0], maps[0], p["region"]),
            }
            row["binary_cosine"] = cosine(fp32[size][1], maps[1])
            results.append(row)
            print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    (args.folder / f"results.calib{h}x{w}.json").write_text(json.dumps(results, indent=1))


def convert(model: Path, to: str, out: Path, calib: Path, flags: list[str]) -> str:
    """'' when edgekit wrote `out`, else its error line."""
    command = [
        sys.executable,
        "-m",
        "edgekit",
        "convert",
        str(model),
        "--to",
        to,
        "-p",
        "int8",
        "--calib",
        str(calib),
        "-o",
        str(out),
        *flags,
    ]
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return "" if done.returncode == 0 else next((ln for ln in done.stderr.splitlines() if ln.startswith("error:")), done.stderr[-300:])


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) or 1.0)) if np.isfinite(b).all() else float("nan")


def run_onnx(path: Path, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The probability and binary maps [N, 1, H, W], one page at a time."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    runs = [session.run(["prob", "binary"], {"image": images[i : i + 1]}) for i in range(len(images))]
    return np.concatenate([r[0] for r in runs]), np.concatenate([r[1] for r in runs])


def run_openvino(path: Path, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(core.read_model(str(path)), "CPU", {"INFERENCE_NUM_THREADS": "1", "INFERENCE_PRECISION_HINT": "f32"})
    runs = [compiled(images[i : i + 1]) for i in range(len(images))]
    return np.concatenate([r["prob"] for r in runs]), np.concatenate([r["binary"] for r in runs])


if __name__ == "__main__":
    main()
