"""Train zoo:fashion-gru, the stateful example: a 2-layer GRU reading Fashion-MNIST rows from a given state.

Writes edgekit/zoo/data/fashion_gru.pt (state dict, ~40k parameters). Training starts each image from a zero
state (as `--input state=0` feeds it). Needs the IDX files (`apt-get install dataset-fashion-mnist`); a few minutes
on 2 cores.
"""

from __future__ import annotations

import time

import torch
from fashion_training import evaluate, train

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
    x, y = torch.from_numpy(to_model_input(train_x)), torch.from_numpy(train_y)
    train(model, x, y, epochs=EPOCHS, batch=BATCH, lr=3e-3, max_lr=5e-3, weight_decay=1e-4, forward=from_zero_state)
    accuracy = evaluate(model, to_model_input(test_x), test_y, forward=from_zero_state)
    print(f"trained in {time.perf_counter() - start:.0f}s; test accuracy {accuracy:.2f}%")
    torch.save(model.state_dict(), GRU_WEIGHTS)


def from_zero_state(model: FashionRowGRU, x: torch.Tensor) -> torch.Tensor:
    """The logits of `x`, each image read from a zero state."""
    return model(x, torch.zeros(model.layers, len(x), model.hidden))[0]


if __name__ == "__main__":
    main()
