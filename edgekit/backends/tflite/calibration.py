"""Calibration samples as TFLiteConverter reads them."""

from __future__ import annotations

from edgekit.calibration.samples import Samples


def tflite_representative(samples: Samples, specs):
    """A TFLiteConverter representative_dataset: one list of arrays (input order) per sample, or per batch of the
    size a model with a fixed batch takes (the last filled up with repeated samples)."""
    from edgekit.artifact import fixed_batch

    names = [s.name for s in specs]

    def generate():
        for feeds in samples.batches(1, fixed_batch(specs)):
            yield [feeds[name] for name in names]

    return generate
