"""`edgekit convert` and `edgekit quantize`."""

from __future__ import annotations

from pathlib import Path

import typer

from edgekit.cli import options
from edgekit.converters import CALIB_METHODS, FORMATS, PRECISIONS


def register(app: typer.Typer) -> None:
    app.command("convert")(convert)
    app.command("quantize")(quantize)


PRECISION = typer.Option("fp32", "--precision", "-p", help=f"One of {', '.join(PRECISIONS)}. int8 needs --calib.")
CALIB = typer.Option(None, "--calib", help="Calibration data: .npz/.npy, a folder of images (class subfolders), or module:function.")
CALIB_SAMPLES = typer.Option(300, "--calib-samples", help="Samples drawn (deterministically, --seed) from the calibration data.")
CALIB_METHOD = typer.Option("minmax", "--calib-method", help=f"Range estimation: {', '.join(CALIB_METHODS)}.")
PER_TENSOR = typer.Option(False, "--per-tensor", help="Per-tensor weight scales instead of per-channel.")
EXCLUDE = typer.Option(None, "--exclude", help="Node name to keep in float (repeatable).")
FOR_TARGET = typer.Option(
    "onnxruntime:cpu", "--for-target", help="Where the model will run; picks the int8 scheme (e.g. tensorrt:cuda wants symmetric s8)."
)
SEED = typer.Option(0, "--seed", help="Seed of the calibration sampling.")
RANDOM_CALIB = typer.Option(
    False, "--random-calibration", help="Calibrate on random data (plumbing only: the report marks the result as not meaningful)."
)


def convert(
    model: str = typer.Argument(..., help="Model file (.pt2, TorchScript, .onnx) or module:factory."),
    to: str = typer.Option(..., "--to", help=f"Target format: {', '.join(FORMATS)}."),
    output: Path = typer.Option(None, "--output", "-o", help="Output file (default: next to the model, named by precision)."),
    inputs: list[str] = options.INPUT,
    weights: str = options.WEIGHTS,
    allow_pickle: bool = options.ALLOW_PICKLE,
    precision: str = PRECISION,
    calib: str = CALIB,
    calib_samples: int = CALIB_SAMPLES,
    calib_method: str = CALIB_METHOD,
    preprocess: str = options.PREPROCESS,
    per_tensor: bool = PER_TENSOR,
    exclude: list[str] = EXCLUDE,
    for_target: str = FOR_TARGET,
    seed: int = SEED,
    random_calibration: bool = RANDOM_CALIB,
) -> None:
    """Convert a model to another format and precision, written atomically."""
    from edgekit.loaders import open_source

    source = open_source(model, weights, allow_pickle)
    opts = _options(
        precision, inputs, calib, calib_samples, calib_method, preprocess, per_tensor, exclude, for_target, seed, random_calibration
    )
    _run(source, to, output or _default_output(source, to, precision), opts)


def quantize(
    model: Path = typer.Argument(..., help="An .onnx file."),
    output: Path = typer.Option(..., "--output", "-o", help="Output .onnx file."),
    precision: str = typer.Option("int8", "--precision", "-p", help=f"One of {', '.join(PRECISIONS)}."),
    calib: str = CALIB,
    calib_samples: int = CALIB_SAMPLES,
    calib_method: str = CALIB_METHOD,
    preprocess: str = options.PREPROCESS,
    per_tensor: bool = PER_TENSOR,
    exclude: list[str] = EXCLUDE,
    for_target: str = FOR_TARGET,
    seed: int = SEED,
    random_calibration: bool = RANDOM_CALIB,
) -> None:
    """Quantize an existing ONNX model (fp16, int8-dynamic, static int8 with --calib)."""
    from edgekit.errors import EdgekitError
    from edgekit.loaders import open_source

    source = open_source(str(model))
    if source.format != "onnx":
        raise EdgekitError(
            f"quantize takes an .onnx file, not {source.format}",
            hint="use `edgekit convert MODEL --to onnx --precision ...` for other formats",
        )
    opts = _options(
        precision, None, calib, calib_samples, calib_method, preprocess, per_tensor, exclude, for_target, seed, random_calibration
    )
    _run(source, "onnx", output, opts)


def _options(precision, inputs, calib, calib_samples, calib_method, preprocess, per_tensor, exclude, for_target, seed, random_calibration):
    from edgekit.converters import CalibrationOptions, ConvertOptions
    from edgekit.errors import EdgekitError

    if precision not in PRECISIONS:
        raise EdgekitError(f"unknown precision '{precision}'", hint=f"choose one of: {', '.join(PRECISIONS)}")
    if calib_method not in CALIB_METHODS:
        raise EdgekitError(f"unknown calibration method '{calib_method}'", hint=f"choose one of: {', '.join(CALIB_METHODS)}")
    calibration = CalibrationOptions(calib, calib_samples, calib_method, seed, preprocess, random_calibration)
    return ConvertOptions(precision, options.input_specs(inputs), calibration, per_tensor, tuple(exclude or ()), for_target)


def _default_output(source, to: str, precision: str) -> Path:
    base = Path(source.spec).parent if source.path else Path.cwd()
    return base / f"{source.name}.{precision}.{to}"


def _run(source, to: str, output: Path, opts) -> None:
    from edgekit.cli.render import print_artifact
    from edgekit.converters.pipeline import convert as run_conversion

    print_artifact(run_conversion(source, to, Path(output), opts))
