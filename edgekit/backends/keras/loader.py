"""Load Keras models (.keras, .h5) and TensorFlow SavedModel folders; read their input signature."""

from __future__ import annotations

import os
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np

from edgekit.artifact import TensorSpec
from edgekit.errors import ModelLoadError
from edgekit.native import stderr_silenced
from edgekit.source import ModelSource


def quiet_tensorflow():
    """Import TensorFlow without its start-up chatter (absl writes it to fd 2 before any setting applies)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with stderr_silenced():
        import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    return tf


class KerasModel:
    """A Keras model or a SavedModel's serving signature behind one interface."""

    def __init__(self, source: ModelSource) -> None:
        tf = quiet_tensorflow()
        self.source = source
        self.keras = None
        self.signature = None
        try:
            if source.format == "savedmodel":
                self._loaded = tf.saved_model.load(str(source.spec))  # the signature needs it alive (its variables)
                self.signature = self._loaded.signatures["serving_default"]
            else:
                import keras

                _check_keras_archive(Path(source.spec))
                self.keras = keras.models.load_model(str(source.spec), compile=False)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ModelLoadError(
                f"cannot load {source.spec}: {str(exc).strip().splitlines()[0][:300]}",
                hint="save it with model.save('m.keras') or model.export('dir'); Lambda layers need the code that defines them",
                cause=str(exc),
            ) from None
        self.specs = self._specs()
        self.output_names = self._output_names()

    def _specs(self) -> list[TensorSpec]:
        if self.signature is not None:
            inputs = self.signature.structured_input_signature[1]
            return [TensorSpec(name, tuple(spec.shape.as_list()), spec.dtype.name) for name, spec in sorted(inputs.items())]
        return [TensorSpec(t.name, tuple(t.shape), str(t.dtype).removeprefix("<dtype: '").removesuffix("'>")) for t in self.keras.inputs]

    def _output_names(self) -> list[str]:
        if self.signature is not None:
            return sorted(self.signature.structured_outputs)
        return [t.name for t in self.keras.outputs]

    def tf_function(self):
        """A tf.function taking the inputs positionally, with a dynamic batch signature."""
        tf = quiet_tensorflow()
        signature = [tf.TensorSpec((None, *s.shape[1:]), s.dtype, name=s.name) for s in self.specs]
        if self.signature is not None:
            names = [s.name for s in self.specs]
            return tf.function(lambda *args: self.signature(**dict(zip(names, args, strict=True))), input_signature=signature)
        return tf.function(lambda *args: self.keras(list(args) if len(args) > 1 else args[0], training=False), input_signature=signature)

    def predict(self, feeds: dict[str, np.ndarray], function=None) -> list[np.ndarray]:
        """Outputs in order for one batch (through `function` when given: a compiled tf.function)."""
        out = (function or self.tf_function())(*[feeds[s.name] for s in self.specs])
        if isinstance(out, dict):
            return [np.asarray(out[name]) for name in sorted(out)]
        return [np.asarray(o) for o in (out if isinstance(out, (list, tuple)) else [out])]

    def export_saved_model(self, folder: Path, batch: int | None = None) -> Path:
        """A SavedModel folder for converters that read one (OpenVINO, TFLite); `batch` fixes the batch dim."""
        if self.signature is not None:
            return Path(self.source.spec)
        tf = quiet_tensorflow()
        signature = [tf.TensorSpec((batch, *s.shape[1:]), s.dtype, name=s.name) for s in self.specs]
        self.keras.export(str(folder), input_signature=signature, verbose=False)
        return folder


def _check_keras_archive(path: Path) -> None:
    """A .keras file is a zip (Keras says "File not found" for one that is not); an .h5 starts with the HDF5 signature."""

    if path.suffix == ".keras" and not zipfile.is_zipfile(path):
        raise ModelLoadError(
            f"{path.name} is not a .keras archive (not a zip file): damaged, truncated or another kind of file",
            hint="save the model again with model.save('model.keras')",
        )


def for_conversion(source: ModelSource, given: list[TensorSpec]):
    """The model converters take, and its input specs."""
    model = KerasModel(source)
    return model, given or model.specs


def keras_summary(source: ModelSource) -> dict:
    """What `edgekit info` shows of a Keras model: inputs, outputs, parameters, layer histogram."""
    model = KerasModel(source)
    info = {"inputs": [s.to_dict() for s in model.specs], "outputs": [{"name": n, "shape": "-"} for n in model.output_names]}
    if model.keras is not None:
        info["parameters"] = int(model.keras.count_params())
        info["ops"] = dict(Counter(type(layer).__name__ for layer in model.keras.layers).most_common())
    return info
