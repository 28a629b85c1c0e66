"""Train the Keras FashionCNN (NHWC, 28x28x1 in [0, 1]) on Fashion-MNIST; writes edgekit/zoo/data/fashion_cnn.keras.

Needs the IDX files (`apt-get install dataset-fashion-mnist`) and TensorFlow. ~1-2 minutes on 2 cores.
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from edgekit.zoo.fashion_mnist import KERAS_MODEL, read_idx  # noqa: E402


def build() -> keras.Model:
    inputs = keras.Input((28, 28, 1), name="image")
    x = keras.layers.Rescaling(1 / 0.3530, offset=-0.2860 / 0.3530)(inputs)
    for filters in (32, 64, 64):
        x = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.ReLU()(x)
        x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(128, activation="relu")(x)
    outputs = keras.layers.Dense(10, name="logits")(x)
    return keras.Model(inputs, outputs, name="fashion_cnn")


def main() -> None:
    keras.utils.set_random_seed(0)
    train_x, train_y = read_idx("train")
    test_x, test_y = read_idx("t10k")
    model = build()
    model.compile(
        optimizer=keras.optimizers.AdamW(2e-3), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"]
    )
    start = time.perf_counter()
    model.fit(_nhwc(train_x), train_y, batch_size=128, epochs=3, verbose=2)
    _, accuracy = model.evaluate(_nhwc(test_x), test_y, verbose=0)
    print(f"trained in {time.perf_counter() - start:.0f}s; test accuracy {accuracy * 100:.2f}%")
    model.save(KERAS_MODEL)


def _nhwc(images_u8: np.ndarray) -> np.ndarray:
    return (images_u8.astype(np.float32) / 255.0)[..., None]


if __name__ == "__main__":
    main()
