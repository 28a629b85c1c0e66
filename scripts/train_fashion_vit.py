"""Train zoo:fashion-vit, the transformer example: a 2-block encoder over the 16 7x7 patches of a Fashion-MNIST image.

Writes edgekit/zoo/data/fashion_vit.pt (state dict, ~70k parameters). Needs the IDX files
(`apt-get install dataset-fashion-mnist`); about 3 minutes on 2 cores.
"""

from __future__ import annotations

import time

import torch
from fashion_training import evaluate, train

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
    x, y = torch.from_numpy(to_model_input(train_x)), torch.from_numpy(train_y)
    train(model, x, y, epochs=EPOCHS, batch=BATCH, lr=2e-3, max_lr=3e-3, weight_decay=0.05, log=True)
    print(f"trained in {time.perf_counter() - start:.0f}s; test accuracy {evaluate(model, to_model_input(test_x), test_y):.2f}%")
    torch.save(model.state_dict(), VIT_WEIGHTS)


if __name__ == "__main__":
    main()
