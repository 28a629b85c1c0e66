"""Calibration and validation samples as NNCF reads them, in the batch the OpenVINO model takes."""

from __future__ import annotations

from edgekit.calibration.samples import Samples


def model_batch(ov_model, samples: Samples) -> int | None:
    """The batch the ov.Model fixes for the inputs `samples` feed (artifact.fixed_batch), None where it takes any."""
    from edgekit.artifact import TensorSpec, fixed_batch

    specs = []
    for port in ov_model.inputs:
        name = next(iter(sorted(port.get_names() & set(samples.arrays))), None)
        if name is not None:
            specs.append(TensorSpec(name, tuple(d.get_length() if d.is_static else None for d in port.get_partial_shape())))
    return fixed_batch(specs)


def nncf_dataset(samples: Samples, ov_model):
    """An nncf.Dataset of feed dicts over `samples`: one sample each, or batches of the size `ov_model` fixes (the
    last filled up with repeated samples)."""
    import nncf

    return nncf.Dataset(list(samples.batches(1, model_batch(ov_model, samples))))


def nncf_validation(samples: Samples, ov_model):
    """An nncf.Dataset of (feeds, labels, batch) items for accuracy control, over the samples that carry a label: one
    sample each, or a batch of the size `ov_model` fixes with the labels of its real samples only (the rest repeat)."""
    import nncf

    from edgekit.calibration.samples import labelled

    kept = samples.subset(labelled(samples.labels))
    fixed = model_batch(ov_model, kept)
    size = fixed or 1
    items = [(feeds, kept.labels[i * size : i * size + real], size) for i, (feeds, real) in enumerate(kept.counted_batches(1, fixed))]
    return nncf.Dataset(items, lambda item: item[0])


def nncf_outputs_check(samples: Samples, ov_model):
    """An nncf.Dataset of (feeds, real samples, batch) items, for a validation against the fp32 model's outputs: one
    sample each, or batches of the size `ov_model` fixes whose first `real` samples count."""
    import nncf

    fixed = model_batch(ov_model, samples)
    items = [(feeds, real, fixed or 1) for feeds, real in samples.counted_batches(1, fixed)]
    return nncf.Dataset(items, lambda item: item[0])
