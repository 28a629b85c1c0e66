"""Keras 3 / TensorFlow: .keras, .h5 and SavedModel folders, run by TensorFlow."""

from edgekit.backends import Backend

BACKEND = Backend(
    format="keras",
    suffixes={".keras": "keras", ".h5": "keras-h5", ".hdf5": "keras-h5"},
    runners={"tensorflow": "edgekit.targets.tensorflow:TensorFlowRunner"},
    default_targets=("tensorflow:cpu",),
    loader="edgekit.loaders.keras:for_conversion",
    source_only=True,
)
