"""The training loop the Fashion-MNIST zoo models share (AdamW, one-cycle schedule, shuffled mini-batches).

`forward(model, x)` returns the logits: the GRU takes a zero state beside the images.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn


def logits_of(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x)


def train(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int,
    batch: int,
    lr: float,
    max_lr: float,
    weight_decay: float,
    forward: Callable = logits_of,
    log: bool = False,
) -> None:
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=max_lr, total_steps=epochs * (len(x) // batch))
    model.train()
    for epoch in range(epochs):
        order = torch.randperm(len(x))
        for i in range(len(x) // batch):
            idx = order[i * batch : (i + 1) * batch]
            loss = nn.functional.cross_entropy(forward(model, x[idx]), y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
        if log:
            print(f"epoch {epoch + 1}/{epochs}: loss {loss.item():.3f}", flush=True)
    model.eval()


@torch.no_grad()
def evaluate(model: nn.Module, x: np.ndarray, y: np.ndarray, forward: Callable = logits_of) -> float:
    """Top-1 accuracy (%) over `x`, 1,000 images at a time."""
    logits = torch.cat([forward(model, torch.from_numpy(x[i : i + 1000])) for i in range(0, len(x), 1000)])
    return float((logits.argmax(1).numpy() == y).mean() * 100)
