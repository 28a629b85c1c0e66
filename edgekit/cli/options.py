"""Options shared by several commands, declared once."""

from __future__ import annotations

import typer

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


EMIT_RECIPE = typer.Option(None, "--emit-recipe", help="Also write the recipe that reproduces this command (`edgekit run FILE`).")


# Gate thresholds, shared by `validate` (applied to the new result) and `gate` (replacing a saved report's).
MAX_DROP = typer.Option(None, "--max-drop", help="Gate: fail (exit 2) if accuracy falls more than this many points.")
MIN_COSINE = typer.Option(None, "--min-cosine", help="Gate: fail (exit 2) if any output's mean cosine similarity is below this.")
MIN_AGREEMENT = typer.Option(
    None, "--min-agreement", help="Gate: fail (exit 2) if top-1 agreement with the reference is below this percent (classification)."
)
MIN_SNR = typer.Option(None, "--min-snr", help="Gate: fail (exit 2) if any output's SNR vs the reference is below this many dB.")
MAX_FALLBACK = typer.Option(
    None,
    "--max-fallback",
    "--max-npu-fallback",
    help="Gate: fail (exit 2) if more than this percent of ops run outside the NPU or delegate (Ethos-U, XNNPACK).",
)
MAX_NPU_FALLBACK = MAX_FALLBACK  # the option's old name; --max-npu-fallback stays an alias
NO_DEFAULT_GATES = typer.Option(
    False,
    "--no-default-gates",
    help="Without thresholds of your own, non-finite outputs and a fidelity floor (cosine, SNR) still fail; this turns that off.",
)


def thresholds(max_drop=None, min_cosine=None, min_agreement=None, min_snr=None, max_fallback=None):
    """The Thresholds the threshold options ask for."""
    from edgekit.metrics.gate import Thresholds

    return Thresholds(max_drop=max_drop, min_cosine=min_cosine, min_agreement=min_agreement, min_snr_db=min_snr, max_fallback=max_fallback)
