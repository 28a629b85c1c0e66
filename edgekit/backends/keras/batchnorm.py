"""Keras batch norms that sit after an activation, folded exactly into the Dense layers around them before int8.

Facial-expression nets are often written Dense(activation="relu") -> BatchNormalization -> Dropout -> Dense. The
ReLU sits between, so TFLite folds the batch norm forward into the next layer's weights: that layer's int8 input is
then the un-normalised activation, whose channels span very different ranges under one per-tensor scale (a channel
with a small variance keeps a few levels, then the fold multiplies it up). `edgekit debug` shows it as the first
jump, at that FULLY_CONNECTED. With every multiplier a = gamma / sqrt(var + eps) positive, the same arithmetic
is BN(relu(z)) = relu(a z) + b: a goes into the Dense before (its kernel columns and bias), b into the bias of
the Dense after (W^T b); the quantized tensor is then the normalised one, as in training. The fold is exact in
float, so every Keras converter (TFLite, ONNX) exports the folded model, and says so in the provenance.
"""

from __future__ import annotations

import copy

import numpy as np


def with_batchnorm_folded(model):
    """(the KerasModel `model`, its foldable batch norms folded, and the provenance note {"batchnorm_folded": ...});
    (`model`, {}) when there is none or it is a SavedModel (no Keras layers to fold)."""

    if model.keras is None:
        return model, {}
    folded, names = fold_batchnorm_after_dense(model.keras)
    if not names:
        return model, {}
    model = copy.copy(model)
    model.keras = folded
    why = "after a ReLU, converters fold them into the next layer, whose int8 input is then the un-normalised activation"
    return model, {"batchnorm_folded": {"layers": names, "why": why}}


def fold_batchnorm_after_dense(model):
    """(a clone of the functional Keras `model` with each foldable batch norm folded and replaced by an identity,
    their names); (`model`, []) when there is none."""
    import keras

    folds = {bn.name: (before, after) for bn in model.layers if (pair := _foldable(bn)) for before, after in [pair]}
    if not folds:
        return model, []

    class Folded(keras.layers.Layer):  # the batch norm's place in the graph, now an identity
        def call(self, inputs, mask=None):
            return inputs

    def clone(layer):
        return Folded(name=layer.name) if layer.name in folds else layer.__class__.from_config(layer.get_config())

    folded = keras.models.clone_model(model, clone_function=clone)
    weights = {layer.name: layer.get_weights() for layer in model.layers}
    for name, (before, after) in folds.items():
        a, b = _affine(model.get_layer(name))
        kernel, bias = weights[before]
        weights[before] = [kernel * a, bias * a]
        kernel, bias = weights[after]
        weights[after] = [kernel, bias + b @ kernel]
    for layer in folded.layers:
        if layer.name not in folds:
            layer.set_weights(weights[layer.name])
    return folded, sorted(folds)


def _foldable(layer) -> tuple[str, str] | None:
    """(the Dense before, the Dense after) of a BatchNormalization between Dense(relu) and a Dense (dropout between
    allowed) whose multipliers are all positive; else None."""
    if type(layer).__name__ != "BatchNormalization" or len(layer._inbound_nodes) != 1:
        return None
    before = layer.input._keras_history.operation
    if type(before).__name__ != "Dense" or getattr(before.activation, "__name__", "") != "relu" or not before.use_bias:
        return None
    if len(layer.input.shape) != 2 or len(before._outbound_nodes) != 1 or (_affine(layer)[0] <= 0).any():
        return None
    after = _single_consumer(layer)
    while after is not None and type(after).__name__ == "Dropout":
        after = _single_consumer(after)
    if after is None or type(after).__name__ != "Dense" or not after.use_bias:
        return None
    return before.name, after.name


def _single_consumer(layer):
    nodes = layer._outbound_nodes
    return nodes[0].operation if len(nodes) == 1 else None


def _affine(batchnorm) -> tuple[np.ndarray, np.ndarray]:
    """Inference-time batch norm as x * a + b."""
    mean, variance = np.asarray(batchnorm.moving_mean), np.asarray(batchnorm.moving_variance)
    gamma = np.asarray(batchnorm.gamma) if batchnorm.scale else np.ones_like(mean)
    beta = np.asarray(batchnorm.beta) if batchnorm.center else np.zeros_like(mean)
    a = gamma / np.sqrt(variance + batchnorm.epsilon)
    return a, beta - mean * a
