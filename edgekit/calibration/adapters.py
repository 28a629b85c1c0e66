"""Turn Samples into what each backend's calibrator consumes."""

from __future__ import annotations

from edgekit.calibration.samples import Samples


def ort_reader(samples: Samples, batch: int = 16):
    """An onnxruntime.quantization CalibrationDataReader over `samples` (one pass)."""
    from onnxruntime.quantization import CalibrationDataReader

    class _Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._batches = samples.batches(batch)

        def get_next(self):
            return next(self._batches, None)

        def rewind(self) -> None:
            self._batches = samples.batches(batch)

    return _Reader()


def nncf_dataset(samples: Samples, batch: int = 1):
    """An nncf.Dataset of feed dicts (one sample each by default) over `samples`."""
    import nncf

    return nncf.Dataset(list(samples.batches(batch)))


def nncf_validation(samples: Samples):
    """An nncf.Dataset of (feeds, labels) items, one sample each, for accuracy control: the samples that carry a label."""
    import nncf

    from edgekit.calibration.samples import labelled

    keep = labelled(samples.labels)
    items = [(feeds, samples.labels[i : i + 1]) for i, feeds in enumerate(samples.batches(1)) if keep[i]]
    return nncf.Dataset(items, lambda item: item[0])


def tflite_representative(samples: Samples, specs):
    """A TFLiteConverter representative_dataset: one list of arrays (input order) per sample."""
    names = [s.name for s in specs]

    def generate():
        for feeds in samples.batches(1):
            yield [feeds[name] for name in names]

    return generate
