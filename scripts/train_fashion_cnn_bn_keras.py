"""Train zoo:fashion-cnn-bn-keras: a Keras CNN written as facial-expression nets often are (Conv2D(activation="relu")
-> BatchNormalization blocks, dropout, Dense(relu) -> BatchNormalization -> Dropout -> Dense, softmax probabilities
out, the input standardised inside by a Rescaling layer), on Fashion-MNIST.

The batch norms sit after the ReLU, where no converter can fold them into the layer before: the int8 case that
backends.keras.batchnorm handles. Writes edgekit/zoo/data/fashion_cnn_bn.keras (~1.7 MB). Needs the IDX files
(`apt-get install dataset-fashion-mnist`) and TensorFlow; about 2 minutes on 2 quiet cores (4 under load).
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from edgekit.zoo.fashion_mnist import KERAS_BN_MODEL, read_idx  # noqa: E402

EPOCHS, BATCH, SEED, TRAIN_IMAGES = 2, 128, 0, 30_000


def build() -> keras.Model:
    layers = keras.layers
    inputs = keras.Input((28, 28, 1), name="image")
    x = layers.Rescaling(1 / 0.3530, offset=-0.2860 / 0.3530)(inputs)  # [0, 1] pixels standardised inside
    for filters in (32, 64):
        for _ in range(2):
            x = layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
            x = layers.BatchNormalization()(x)
        x = layers.MaxPooling2D()(x)
        x = layers.Dropout(0.25)(x)
    x = layers.Flatten()(x)
    x = layers.Dense(128, activation="relu")(x)
    x = layers.BatchNormalization()(x)
    x = layers.Dropout(0.5)(x)
    outputs = layers.Dense(10, activation="softmax", name="probabilities")(x)
    return keras.Model(inputs, outputs)


def main() -> None:
    keras.utils.set_random_seed(SEED)
    train_x, train_y = read_idx("train")
    test_x, test_y = read_idx("t10k")
    model = build()
    model.compile(optimizer=keras.optimizers.AdamW(2e-3), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    start = time.perf_counter()
    model.fit(_nhwc(train_x[:TRAIN_IMAGES]), train_y[:TRAIN_IMAGES], batch_size=BATCH, epochs=EPOCHS, verbose=2)
    _, accuracy = model.evaluate(_nhwc(test_x), test_y, verbose=0)
    print(f"trained in {time.perf_counter() - start:.0f}s; test accuracy {accuracy * 100:.2f}%")
    inference = build()  # uncompiled: the file holds the weights without the optimizer's state (a third of the size)
    inference.set_weights(model.get_weights())
    inference.save(KERAS_BN_MODEL)


def _nhwc(images_u8: np.ndarray) -> np.ndarray:
    return (images_u8.astype(np.float32) / 255.0)[..., None]


if __name__ == "__main__":
    main()
