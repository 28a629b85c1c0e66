"""A model with a rank-1 weight (a scoring vector: x @ w): ONNX Runtime's per-channel quantizer logs "Axis 1 is
out-of-range for weight 'w' with rank 1" on the root logger while it quantizes it."""

import torch
from torch import nn


class Scorer(nn.Module):
    edgekit_inputs = ("x:batchx16",)

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(16, 16)
        self.w = nn.Parameter(torch.randn(16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x)) @ self.w


def scorer() -> Scorer:
    return Scorer().eval()
