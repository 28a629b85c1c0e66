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
VAL = typer.Option(None, "--val", help="Labelled validation data for accuracy-controlled int8 (with --max-drop; OpenVINO).")
VAL_SAMPLES = typer.Option(1000, "--val-samples", help="Validation samples drawn for accuracy control.")
MAX_DROP = typer.Option(None, "--max-drop", help="Accuracy control: keep layers in float until the top-1 drop is at most this many points.")
MODEL_TYPE = typer.Option(None, "--model-type", help="'transformer' for NNCF's transformer scheme (detected when not given).")
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
    val: str = VAL,
    val_samples: int = VAL_SAMPLES,
    max_drop: float = MAX_DROP,
    model_type: str = MODEL_TYPE,
) -> None:
    """Convert a model to another format and precision, written atomically."""
    from edgekit.loaders import open_source

    source = open_source(model, weights, allow_pickle)
    opts = _options(
        precision=precision,
        inputs=inputs,
        calib=calib,
        calib_samples=calib_samples,
        calib_method=calib_method,
        preprocess=preprocess,
        per_tensor=per_tensor,
        exclude=exclude,
        for_target=for_target,
        seed=seed,
        random_calibration=random_calibration,
        val=val,
        val_samples=val_samples,
        max_drop=max_drop,
        model_type=model_type,
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
            hint="use `edgekit convert MODEL --to ... --precision ...` for other formats",
        )
    opts = _options(
        precision=precision,
        inputs=None,
        calib=calib,
        calib_samples=calib_samples,
        calib_method=calib_method,
        preprocess=preprocess,
        per_tensor=per_tensor,
        exclude=exclude,
        for_target=for_target,
        seed=seed,
        random_calibration=random_calibration,
    )
    _run(source, "onnx", output, opts)


def _options(
    *,
    precision,
    inputs,
    calib,
    calib_samples,
    calib_method,
    preprocess,
    per_tensor,
    exclude,
    for_target,
    seed,
    random_calibration,
    val=None,
    val_samples=1000,
    max_drop=None,
    model_type=None,
):
    from edgekit.converters import CalibrationOptions, ConvertOptions
    from edgekit.errors import EdgekitError

    if precision not in PRECISIONS:
        raise EdgekitError(f"unknown precision '{precision}'", hint=f"choose one of: {', '.join(PRECISIONS)}")
    if calib_method not in CALIB_METHODS:
        raise EdgekitError(f"unknown calibration method '{calib_method}'", hint=f"choose one of: {', '.join(CALIB_METHODS)}")
    calibration = CalibrationOptions(calib, calib_samples, calib_method, seed, preprocess, random_calibration)
    return ConvertOptions(
        precision,
        options.input_specs(inputs),
        calibration,
        per_tensor,
        tuple(exclude or ()),
        for_target,
        model_type=model_type,
        validation_data=val,
        validation_samples=val_samples,
        max_drop=max_drop,
    )


def _default_output(source, to: str, precision: str) -> Path:
    from edgekit.converters import SUFFIXES

    base = Path(source.spec).parent if source.path else Path.cwd()
    return base / f"{source.name}.{precision}{SUFFIXES.get(to, '.' + to)}"


def _run(source, to: str, output: Path, opts) -> None:
    from edgekit.cli.render import print_artifact
    from edgekit.converters.pipeline import convert as run_conversion

    print_artifact(run_conversion(source, to, Path(output), opts))
