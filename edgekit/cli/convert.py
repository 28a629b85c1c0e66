"""`edgekit convert` and `edgekit quantize`."""

from __future__ import annotations

from pathlib import Path

import typer

from edgekit.cli import options
from edgekit.conversion import CALIB_METHODS, FORMATS, PRECISIONS


def register(app: typer.Typer) -> None:
    app.command("convert")(convert)
    app.command("quantize")(quantize)


PRECISION = typer.Option(
    "fp32", "--precision", "-p", help=f"One of {', '.join(PRECISIONS)}. int8 needs --calib (a zoo: model brings its own)."
)
CALIB = typer.Option(
    None,
    "--calib",
    help="Calibration data: .npz/.npy, a folder of images (labels: class subfolders or a labels.json), module:function or a zoo: data name.",
)
CALIB_SAMPLES = typer.Option(300, "--calib-samples", help="Samples drawn (deterministically, --seed) from the calibration data.")
CALIB_METHOD = typer.Option(
    "auto", "--calib-method", help=f"Range estimation: {', '.join(CALIB_METHODS)} (auto: the backend's best measured method)."
)
PER_TENSOR = typer.Option(False, "--per-tensor", help="Per-tensor weight scales instead of per-channel.")
EXCLUDE = typer.Option(None, "--exclude", help="Node name to keep in float (repeatable).")
KEEP_SENSITIVE = typer.Option(
    True,
    "--keep-sensitive/--no-keep-sensitive",
    help="int8: keep in float the few layers whose int8 sensitivity stands out (> 10x the median layer's, at most 3).",
)
FOR_TARGET = typer.Option(
    "onnxruntime:cpu",
    "--for-target",
    help="Where the model will run; picks the int8 scheme: a target on this host (onnxruntime:cpu), tensorrt:cuda (symmetric s8), "
    "an ISA class (x86-avx2, x86-vnni, x86-amx, arm64-dotprod, ... see docs/int8-schemes.md), a device preset (raspberry-pi-5) "
    "or an inventory device (NAME, runtime:device@NAME).",
)
SEED = typer.Option(0, "--seed", help="Seed of the calibration sampling.")
VAL = typer.Option(
    None,
    "--val",
    help="Validation data for accuracy-controlled int8 (ONNX, OpenVINO, TFLite from PyTorch), with a limit: --max-drop (and labels), "
    "--min-agreement or --min-cosine.",
)
VAL_SAMPLES = typer.Option(1000, "--val-samples", help="Validation samples drawn for accuracy control.")
MAX_DROP = typer.Option(None, "--max-drop", help="Accuracy control: keep layers in float until the top-1 drop is at most this many points.")
MIN_AGREEMENT = typer.Option(
    None, "--min-agreement", help="Accuracy control: keep layers in float until top-1 agreement with fp32 is at least this percent."
)
MIN_COSINE = typer.Option(
    None,
    "--min-cosine",
    help="Accuracy control: keep layers in float until the first output's mean cosine with fp32's is at least this "
    "(embeddings, detection maps: models whose output is not a class).",
)
IO_DTYPE = typer.Option(
    None, "--io-dtype", help="TFLite full int8: float32, int8 or uint8 inputs/outputs (default float32; int8 with --device)."
)
LAYOUT = typer.Option("nchw", "--layout", help="PyTorch -> TFLite: nhwc gives the model channels-last inputs.")
DEVICE = typer.Option(None, "--device", help="Compile the int8 TFLite for an NPU with Vela, e.g. ethos-u55-128 (see the README).")
MODEL_TYPE = typer.Option(None, "--model-type", help="'transformer' for NNCF's transformer scheme (detected when not given).")
MAX_BATCH = typer.Option(64, "--max-batch", help="TensorRT: the largest batch the engine takes (its optimisation profile).")
OPT_BATCH = typer.Option(1, "--opt-batch", help="TensorRT: the batch the engine is tuned for.")
RANDOM_CALIB = typer.Option(
    False, "--random-calibration", help="Calibrate on random data (plumbing only: the report marks the result as not meaningful)."
)


def convert(
    model: str = typer.Argument(
        ..., help="Model file (.pt2, TorchScript, .onnx, .keras, .h5, SavedModel), module:factory or zoo: name (zoo:fashion-cnn)."
    ),
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
    keep_sensitive: bool = KEEP_SENSITIVE,
    for_target: str = FOR_TARGET,
    seed: int = SEED,
    random_calibration: bool = RANDOM_CALIB,
    val: str = VAL,
    val_samples: int = VAL_SAMPLES,
    max_drop: float = MAX_DROP,
    min_agreement: float = MIN_AGREEMENT,
    min_cosine: float = MIN_COSINE,
    model_type: str = MODEL_TYPE,
    io_dtype: str = IO_DTYPE,
    layout: str = LAYOUT,
    device: str = DEVICE,
    max_batch: int = MAX_BATCH,
    opt_batch: int = OPT_BATCH,
    emit_recipe: Path = options.EMIT_RECIPE,
) -> None:
    """Convert a model (a file, module:factory or zoo: name) to another format and precision, written atomically."""
    from edgekit import api
    from edgekit.cli.render import print_artifact

    converted = api.convert(
        model, to, output, inputs=inputs, weights=weights, allow_pickle=allow_pickle, precision=precision, calib=calib,
        calib_samples=calib_samples, calib_method=calib_method, preprocess=preprocess, per_tensor=per_tensor, exclude=exclude,
        keep_sensitive=keep_sensitive, for_target=for_target, seed=seed, random_calibration=random_calibration, val=val,
        val_samples=val_samples, max_drop=max_drop, min_agreement=min_agreement, min_cosine=min_cosine, model_type=model_type,
        io_dtype=io_dtype, layout=layout, device=device, max_batch=max_batch, opt_batch=opt_batch, emit_recipe=emit_recipe,
    )  # fmt: skip
    print_artifact(converted.artifact)


def quantize(
    model: str = typer.Argument(..., help="An .onnx file."),
    output: Path = typer.Option(..., "--output", "-o", help="Output .onnx file."),
    precision: str = typer.Option("int8", "--precision", "-p", help=f"One of {', '.join(PRECISIONS)}."),
    calib: str = CALIB,
    calib_samples: int = CALIB_SAMPLES,
    calib_method: str = CALIB_METHOD,
    preprocess: str = options.PREPROCESS,
    per_tensor: bool = PER_TENSOR,
    exclude: list[str] = EXCLUDE,
    keep_sensitive: bool = KEEP_SENSITIVE,
    for_target: str = FOR_TARGET,
    seed: int = SEED,
    random_calibration: bool = RANDOM_CALIB,
    emit_recipe: Path = options.EMIT_RECIPE,
) -> None:
    """Quantize an existing ONNX model (fp16, int8-dynamic, static int8 with --calib)."""
    from edgekit import api
    from edgekit.cli.render import print_artifact

    converted = api.quantize(
        model, output, precision=precision, calib=calib, calib_samples=calib_samples, calib_method=calib_method,
        preprocess=preprocess, per_tensor=per_tensor, exclude=exclude, keep_sensitive=keep_sensitive, for_target=for_target,
        seed=seed, random_calibration=random_calibration, emit_recipe=emit_recipe,
    )  # fmt: skip
    print_artifact(converted.artifact)
