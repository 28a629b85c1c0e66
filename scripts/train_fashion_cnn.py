"""Train the demo's FashionCNN on Fashion-MNIST and write its weights and data splits.

Writes edgekit/zoo/data/: fashion_cnn.pt (state dict), fashion_mnist_test.npz (the 10k test
images, uint8) and fashion_mnist_calib.npz (1,000 training images for calibration, never used
for evaluation). Needs the IDX files (`apt-get install dataset-fashion-mnist`). ~1 minute on 2 cores.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from fashion_training import evaluate, train

from edgekit.zoo.fashion_mnist import CALIB_NPZ, TEST_NPZ, WEIGHTS, read_idx, to_model_input
from edgekit.zoo.models import FashionCNN

EPOCHS, BATCH, SEED, CALIB_COUNT = 3, 128, 0, 1000


def main() -> None:
    torch.manual_seed(SEED)
    torch.set_num_threads(2)
    train_x, train_y = read_idx("train")
    test_x, test_y = read_idx("t10k")
    model = FashionCNN()
    start = time.perf_counter()
    x, y = torch.from_numpy(to_model_input(train_x)), torch.from_numpy(train_y)
    train(model, x, y, epochs=EPOCHS, batch=BATCH, lr=2e-3, max_lr=4e-3, weight_decay=1e-4)
    accuracy = evaluate(model, to_model_input(test_x), test_y)
    print(f"trained in {time.perf_counter() - start:.0f}s; test accuracy {accuracy:.2f}%")
    WEIGHTS.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), WEIGHTS)
    np.savez_compressed(TEST_NPZ, images=test_x, labels=test_y.astype(np.uint8))
    calib = np.random.default_rng(SEED).choice(len(train_x), CALIB_COUNT, replace=False)
    np.savez_compressed(CALIB_NPZ, images=train_x[calib], labels=train_y[calib].astype(np.uint8))


if __name__ == "__main__":
    main()
