"""Calibration and validation samples as NNCF reads them."""

from __future__ import annotations

from edgekit.calibration.samples import Samples


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
