"""The ONNX side of accuracy control (quantization.accuracy): ONNX Runtime's logits, and a top-1 limit checked against
the ONNX model's declared output before any calibration."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgekit.backends.onnx.sensitivity import outputs
from edgekit.quantization.accuracy import Limit, check_top1


def check_declared_top1(limit: Limit, model: Path) -> None:
    """check_top1 before any calibration, on the first output's shape as the ONNX `model` declares it (dimension names
    where dynamic); left to the validation run where the declaration cannot tell (no shape, or [N, dynamic])."""
    import onnx

    output = onnx.load(str(model), load_external_data=False).graph.output[0].type.tensor_type
    if not output.HasField("shape"):
        return
    shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in output.shape.dim]
    if len(shape) != 2 or isinstance(shape[1], int):
        check_top1(limit, shape)


def ort_logits(model, samples) -> dict[str, np.ndarray]:
    """Every output of the ONNX `model` over `samples` on ONNX Runtime, by name (quantization.accuracy.Validator's logits)."""
    import onnx

    names = [o.name for o in onnx.load(str(model), load_external_data=False).graph.output]
    return dict(zip(names, outputs(model, samples), strict=True))
