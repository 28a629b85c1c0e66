"""Calibration samples as ONNX Runtime's quantizer reads them."""

from __future__ import annotations

from edgekit.calibration.samples import Samples


def ort_reader(samples: Samples, batch: int = 16, fixed: int | None = None):
    """An onnxruntime.quantization CalibrationDataReader over `samples` (one pass), in batches of `batch`, or of
    exactly `fixed` for a model whose batch is fixed (Samples.batches)."""
    from onnxruntime.quantization import CalibrationDataReader

    class _Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._batches = samples.batches(batch, fixed)

        def get_next(self):
            return next(self._batches, None)

        def rewind(self) -> None:
            self._batches = samples.batches(batch, fixed)

    return _Reader()
