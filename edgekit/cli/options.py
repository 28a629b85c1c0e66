"""Options shared by several commands, declared once."""

from __future__ import annotations

import typer

from edgekit.artifact import TensorSpec, parse_input_spec

INPUT = typer.Option(
    None,
    "--input",
    "-i",
    help="Model input as NAME:SHAPE[:DTYPE], e.g. image:1x3x224x224:float32, or a constant NAME=VALUE[:DTYPE], e.g. sr=16000:int64 (repeat per input).",
)
WEIGHTS = typer.Option(None, "--weights", help="State dict for a module:factory model.")
ALLOW_PICKLE = typer.Option(
    False,
    "--allow-pickle",
    help="Allow loading a whole pickled torch module. Unpickling runs code from the file: only for files you trust.",
)
THREADS = typer.Option(None, "--threads", help="Intra-op threads (default: all usable cores). Always recorded.")
TARGET = typer.Option(None, "--target", "-t", help="runtime:device, e.g. onnxruntime:cpu (see `edgekit targets`).")
PREPROCESS = typer.Option(
    None,
    "--preprocess",
    help="Image preprocessing: key=value,... (resize, crop, scale, mean, std, order, layout, dtype) or a YAML/JSON file.",
)


def input_specs(values: list[str] | None) -> tuple[TensorSpec, ...]:
    return tuple(parse_input_spec(v) for v in values or [])


EMIT_RECIPE = typer.Option(None, "--emit-recipe", help="Also write the recipe that reproduces this command (`edgekit run FILE`).")
