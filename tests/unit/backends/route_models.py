"""Small real models that a converter's own route cannot convert (tests/unit/backends/test_conversion_routes.py).

- BilinearNet: bilinear (second-order) pooling as in B-CNN (Lin et al., 2015), its signed square root written with
  torch.signbit. Neither OpenVINO's PyTorch frontend ("No conversion rule found for operations: aten::signbit") nor
  litert-torch ("Lowering not found: aten.signbit.default") converts signbit; torch.onnx's exporter writes it as
  Less/Where, which both OpenVINO's ONNX frontend and onnx2tf read.
- MedianPoolNet: each channel pooled by its median (robust to a few outlying positions). aten.median.dim has no
  conversion in OpenVINO's PyTorch frontend, no lowering in litert-torch, and no ONNX translation in torch.onnx's
  exporters: every route fails.
"""

from __future__ import annotations

import torch
from torch import nn

SIDE = 16


class BilinearNet(nn.Module):
    """Two convolutions, the channels' Gram matrix over the positions, sign(g) * sqrt(|g|), L2 normalization and a
    linear classifier over the 8 x 8 second-order features."""

    edgekit_inputs = (f"image:batchx3x{SIDE}x{SIDE}",)

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1))
        self.classifier = nn.Linear(8 * 8, 5)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        f = self.features(image).flatten(2)
        gram = (f @ f.transpose(1, 2) / f.shape[-1]).flatten(1)
        root = gram.abs().sqrt()
        signed = torch.where(torch.signbit(gram), -root, root)
        return self.classifier(signed / signed.square().sum(1, keepdim=True).add(1e-12).sqrt())


class MedianPoolNet(nn.Module):
    """A convolution, each channel's median over the positions, and a linear classifier."""

    edgekit_inputs = (f"image:batchx3x{SIDE}x{SIDE}",)

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.classifier = nn.Linear(8, 4)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.conv(image).flatten(2).median(-1).values)


def bilinear_net() -> BilinearNet:
    torch.manual_seed(0)
    return BilinearNet().eval()


def median_pool_net() -> MedianPoolNet:
    torch.manual_seed(0)
    return MedianPoolNet().eval()
