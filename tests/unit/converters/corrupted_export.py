"""A model whose exported graph is not the model: under torch.export it scales its output by 1.01 (a converter bug
stand-in, through the real exporter). Verification against the source must refuse what it writes."""

import torch
from torch import nn


class Corrupted(nn.Module):
    edgekit_inputs = ("x:batchx8",)

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        if torch.compiler.is_exporting():
            y = y * 1.01
        return y


def corrupted() -> Corrupted:
    return Corrupted().eval()
