"""Train zoo:fashion-gru, the stateful example: a 2-layer GRU reading Fashion-MNIST rows from a given state.

Writes edgekit/zoo/data/fashion_gru.pt (state dict, ~40k parameters). Training starts each image from a zero
state (as `--input state=0` feeds it). Needs the IDX files (`apt-get install dataset-fashion-mnist`); a few minutes
on 2 cores.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn

from edgekit.zoo.fashion_mnist import GRU_WEIGHTS, read_idx, to_model_input
from edgekit.zoo.models import FashionRowGRU

EPOCHS, BATCH, SEED = 4, 128, 0


def main() -> None:
    torch.manual_seed(SEED)
    torch.set_num_threads(2)
    train_x, train_y = read_idx("train")
    test_x, test_y = read_idx("t10k")
    model = FashionRowGRU()
    start = time.perf_counter()
    train(model, torch.from_numpy(to_model_input(train_x)), torch.from_numpy(train_y))
    print(f"trained in {time.perf_counter() - start:.0f}s; test accuracy {evaluate(model, to_model_input(test_x), test_y):.2f}%")
    torch.save(model.state_dict(), GRU_WEIGHTS)


def zeros(model: FashionRowGRU, batch: int) -> torch.Tensor:
    return torch.zeros(model.layers, batch, model.hidden)


def train(model: FashionRowGRU, x: torch.Tensor, y: torch.Tensor) -> None:
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    steps = EPOCHS * (len(x) // BATCH)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=5e-3, total_steps=steps)
    model.train()
    for _ in range(EPOCHS):
        order = torch.randperm(len(x))
        for i in range(len(x) // BATCH):
            idx = order[i * BATCH : (i + 1) * BATCH]
            logits, _ = model(x[idx], zeros(model, len(idx)))
            loss = nn.functional.cross_entropy(logits, y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
    model.eval()


@torch.no_grad()
def evaluate(model: FashionRowGRU, x: np.ndarray, y: np.ndarray) -> float:
    chunks = [torch.from_numpy(x[i : i + 1000]) for i in range(0, len(x), 1000)]
    logits = torch.cat([model(c, zeros(model, len(c)))[0] for c in chunks])
    return float((logits.argmax(1).numpy() == y).mean() * 100)


if __name__ == "__main__":
    main()
