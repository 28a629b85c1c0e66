"""Train zoo:fashion-vit, the transformer example: a 2-block encoder over the 16 7x7 patches of a Fashion-MNIST image.

Writes edgekit/zoo/data/fashion_vit.pt (state dict, ~70k parameters). Needs the IDX files
(`apt-get install dataset-fashion-mnist`); about 3 minutes on 2 cores.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn

from edgekit.zoo.fashion_mnist import VIT_WEIGHTS, read_idx, to_model_input
from edgekit.zoo.models import FashionViT

EPOCHS, BATCH, SEED = 4, 128, 0


def main() -> None:
    torch.manual_seed(SEED)
    torch.set_num_threads(1)  # the tiny matrices gain nothing from a second thread on a busy 2-core machine
    train_x, train_y = read_idx("train")
    test_x, test_y = read_idx("t10k")
    model = FashionViT()
    start = time.perf_counter()
    train(model, torch.from_numpy(to_model_input(train_x)), torch.from_numpy(train_y))
    print(f"trained in {time.perf_counter() - start:.0f}s; test accuracy {evaluate(model, to_model_input(test_x), test_y):.2f}%")
    torch.save(model.state_dict(), VIT_WEIGHTS)


def train(model: FashionViT, x: torch.Tensor, y: torch.Tensor) -> None:
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.05)
    steps = EPOCHS * (len(x) // BATCH)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=steps)
    model.train()
    for epoch in range(EPOCHS):
        order = torch.randperm(len(x))
        for i in range(len(x) // BATCH):
            idx = order[i * BATCH : (i + 1) * BATCH]
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
        print(f"epoch {epoch + 1}/{EPOCHS}: loss {loss.item():.3f}", flush=True)
    model.eval()


@torch.no_grad()
def evaluate(model: FashionViT, x: np.ndarray, y: np.ndarray) -> float:
    logits = torch.cat([model(torch.from_numpy(x[i : i + 1000])) for i in range(0, len(x), 1000)])
    return float((logits.argmax(1).numpy() == y).mean() * 100)


if __name__ == "__main__":
    main()
