"""A real embedding model for the tests: the trained zoo FashionCNN up to its 128-wide hidden layer, rows made unit."""

import torch
from torch import nn

from edgekit.zoo.fashion_mnist import WEIGHTS
from edgekit.zoo.models import FashionCNN


class FashionEmbedder(nn.Module):
    edgekit_inputs = ("image:batchx1x28x28",)

    def __init__(self) -> None:
        super().__init__()
        self.cnn = FashionCNN()
        self.cnn.load_state_dict(torch.load(WEIGHTS, map_location="cpu", weights_only=True))

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        hidden = self.cnn.classifier[:3](self.cnn.features((image - 0.2860) / 0.3530))
        return nn.functional.normalize(hidden, dim=1)


def fashion_embedder() -> FashionEmbedder:
    return FashionEmbedder().eval()
