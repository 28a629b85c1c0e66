"""5. Scaling: conversion and calibration time vs model size and calibration sample count."""

from __future__ import annotations

import time

from bench.common import CACHE, IMAGE, photo_calibration, publish
from edgekit.backends.onnx.loader import onnx_summary
from edgekit.conversion import CalibrationOptions, ConvertOptions
from edgekit.converters.pipeline import convert
from edgekit.source import ModelSource, open_source

SIZES = (
    ("efficientnet_lite0", "edgekit.zoo.models:efficientnet_lite0"),
    ("resnet18_shape", "edgekit.zoo.models:resnet18_shape"),
    ("resnet18_shape x4 params", "bench.scaling:resnet18_wide"),
)


def resnet18_wide():
    """ResNet-18 with twice the width: ~4x the parameters and MACs."""
    import torch

    from edgekit.zoo.models import ResNet18Shape

    torch.manual_seed(0)
    return ResNet18Shape(width=128).eval()


def _timed_convert(spec: str, precision: str, samples: int, out, model: str | None = None) -> float:
    calibration = CalibrationOptions(str(photo_calibration(samples, model=model)), samples) if precision == "int8" else CalibrationOptions()
    source = ModelSource(spec, "torch-factory") if ":" in spec and not spec.endswith(".onnx") else open_source(spec)
    start = time.perf_counter()
    convert(source, "onnx", out, ConvertOptions(precision, IMAGE, calibration))
    return time.perf_counter() - start


def run(sample_counts: tuple[int, ...] = (100, 300, 1000)) -> None:
    rows = []
    for name, spec in SIZES:
        export = _timed_convert(spec, "fp32", 0, CACHE / "scale.fp32.onnx")
        params = onnx_summary(CACHE / "scale.fp32.onnx")["parameters"]
        quant = _timed_convert(str(CACHE / "scale.fp32.onnx"), "int8", 300, CACHE / "scale.int8.onnx", name)
        rows.append([name, f"{params / 1e6:.1f} M", f"{export:.1f}", f"{quant:.1f} (300 samples)"])
    base = CACHE / "scale.r18.fp32.onnx"
    _timed_convert("edgekit.zoo.models:resnet18_shape", "fp32", 0, base)
    for count in sample_counts:
        rows.append(
            [
                "resnet18_shape",
                "11.7 M",
                "-",
                f"{_timed_convert(str(base), 'int8', count, CACHE / 'scale.n.int8.onnx'):.1f} ({count} samples)",
            ]
        )
    publish(
        "scaling",
        "Conversion and calibration time (seconds)",
        ["model", "parameters", "export to ONNX fp32 s", "int8 calibration + quantization s"],
        rows,
        ["MinMax calibration, batch 16, 2 cores; one run each (these are minutes-scale steps, not micro-benchmarks)."],
    )
    run_matrix()


def run_matrix() -> None:
    """`python -m bench scaling`'s matrix row alone (python -c "from bench.scaling import run_matrix; run_matrix()")."""
    publish(
        "scaling-matrix",
        "Recipe matrix wall time, serial against `edgekit run --ray` (seconds)",
        ["matrix", "cells", "run", "wall s (speed-up)"],
        matrix_rows(),
        [
            "From an empty cache; host work (conversion, calibration, accuracy) as Ray tasks, then every latency timed alone on the host, "
            "as in a serial run. One run each. A local Ray is started and stopped per recipe (its start-up is in the time).",
        ],
    )


MATRIX_MODELS = (
    # name, model section, calibration, validation, formats
    (
        "fashion_cnn",
        "{path: zoo:fashion-cnn}",
        "zoo:fashion-mnist-calib",
        "{path: zoo:fashion-mnist-test, limit: 2000}",
        "[onnx, openvino]",
    ),
    (
        "resnet18_shape",
        "{path: 'edgekit.zoo.models:resnet18_shape', inputs: ['image:1x3x224x224']}",
        "PHOTOS",
        "{path: VAL, limit: 64}",
        "[onnx]",
    ),
    (
        "efficientnet_lite0",
        "{path: 'edgekit.zoo.models:efficientnet_lite0', inputs: ['image:1x3x224x224']}",
        "PHOTOS",
        "{path: VAL, limit: 64}",
        "[onnx]",
    ),
)


def _matrix_recipes(folder) -> list:
    """One recipe per model (fp32 + int8 cells), written under `folder`, each with its own report dir."""
    from edgekit.recipe.schema import load_recipe

    photos, val = photo_calibration(100), photo_calibration(64, seed=1)
    recipes = []
    for name, model, calib, validation, formats in MATRIX_MODELS:
        path = folder / name / "edgekit.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f"model: {model}\ncalibration: {{path: {str(photos) if calib == 'PHOTOS' else calib}, samples: 100}}\n"
            f"validation: {validation.replace('VAL', str(val))}\nmatrix: {{formats: {formats}, precisions: [fp32, int8]}}\n"
            "latency: {threads: 2, runs: 50, warmup: 5}\nreport: {dir: out, formats: [json]}\n"
        )
        recipes.append(load_recipe(path))
    return recipes


def _matrix_wall(folder, ray) -> tuple[float, int]:
    """Wall time of every recipe's matrix from an empty cache (serial, or with `ray`), and its cell count."""
    import shutil

    from edgekit.recipe.run import run_recipe

    shutil.rmtree(folder, ignore_errors=True)
    recipes = _matrix_recipes(folder)
    start = time.perf_counter()
    rows = [row for recipe in recipes for row in run_recipe(recipe, use_cache=False, ray=ray)["rows"]]
    failed = [r["status"] for r in rows if r["status"] != "ok"]
    if failed:
        raise RuntimeError(f"matrix cells failed: {failed}")
    return time.perf_counter() - start, len(rows)


def matrix_rows(workers: tuple[int, ...] = (2,)) -> list[list[str]]:
    """Matrix wall time, serial against `--ray` with N local workers (a local Ray per recipe, as the CLI does)."""
    from edgekit.recipe.distributed import RayOptions

    serial, cells = _matrix_wall(CACHE / "matrix-serial", None)
    rows = [
        [
            "matrix (FashionCNN onnx+openvino, ResNet-18 shape, EfficientNet-Lite0 onnx; fp32+int8)",
            f"{cells} cells",
            "serial",
            f"{serial:.1f}",
        ]
    ]
    for n in workers:
        wall, _ = _matrix_wall(CACHE / f"matrix-ray{n}", RayOptions(num_cpus=n))
        rows.append(["same matrix", f"{cells} cells", f"--ray, {n} local worker(s)", f"{wall:.1f} ({serial / wall:.2f}x)"])
        wall = _matrix_wall_one_ray(n)
        rows.append(
            ["same matrix", f"{cells} cells", f"--ray, {n} worker(s), one Ray for all recipes", f"{wall:.1f} ({serial / wall:.2f}x)"]
        )
    return rows


def _matrix_wall_one_ray(workers: int) -> float:
    """The matrix with one local Ray started before the clock (as on a cluster that is already up)."""
    from edgekit.recipe.distributed import RayOptions, connected

    with connected(RayOptions(num_cpus=workers)):
        return _matrix_wall(CACHE / f"matrix-ray{workers}-shared", RayOptions(num_cpus=workers))[0]
