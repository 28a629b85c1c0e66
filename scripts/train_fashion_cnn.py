"""Train the demo's FashionCNN on Fashion-MNIST and write its weights and data splits.

Writes edgekit/zoo/data/: fashion_cnn.pt (state dict), fashion_mnist_test.npz (the 10k test
images, uint8) and fashion_mnist_calib.npz (1,000 training images for calibration, never used
for evaluation). Needs the IDX files (`apt-get install dataset-fashion-mnist`). ~1 minute on 2 cores.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn

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
    train(model, torch.from_numpy(to_model_input(train_x)), torch.from_numpy(train_y))
    accuracy = evaluate(model, to_model_input(test_x), test_y)
    print(f"trained in {time.perf_counter() - start:.0f}s; test accuracy {accuracy:.2f}%")
    WEIGHTS.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), WEIGHTS)
    np.savez_compressed(TEST_NPZ, images=test_x, labels=test_y.astype(np.uint8))
    calib = np.random.default_rng(SEED).choice(len(train_x), CALIB_COUNT, replace=False)
    np.savez_compressed(CALIB_NPZ, images=train_x[calib], labels=train_y[calib].astype(np.uint8))


def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)
    steps = EPOCHS * (len(x) // BATCH)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=4e-3, total_steps=steps)
    model.train()
    for _ in range(EPOCHS):
        order = torch.randperm(len(x))
        for i in range(len(x) // BATCH):
            idx = order[i * BATCH : (i + 1) * BATCH]
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
    model.eval()


@torch.no_grad()
def evaluate(model: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    logits = torch.cat([model(torch.from_numpy(x[i : i + 1000])) for i in range(0, len(x), 1000)])
    return float((logits.argmax(1).numpy() == y).mean() * 100)


if __name__ == "__main__":
    main()
