"""What a conv/linear layer's inputs look like, for data-aware weight rounding (edgekit.quantization.rounding): the second
moment of its input rows (a Gemm's rows, a convolution's patches) and their mean, gathered as torch's unfold lays them out from the
activations ONNX Runtime or a PT2E model produced; and the mean output error a weight error gives (bias correction)."""

from __future__ import annotations

import numpy as np
import torch


def input_moments(x, weight_shape, geometry: dict | None, positions: int, rng) -> tuple[np.ndarray, np.ndarray, int]:
    """(sum of x x^T over the layer's input rows or patches, the batch sum of the input, number of rows) of a batch
    `x` (numpy or torch). `geometry`: a convolution's pads (top, left, bottom, right), strides, dilations and groups;
    None for a Gemm/MatMul. A convolution's patches are sampled at `positions` places per sample; a depthwise one gets
    one G per channel."""
    x = torch.as_tensor(x)
    mean_sum = x.double().sum(0).numpy()
    if geometry is None:
        rows = x.reshape(-1, x.shape[-1])
        return (rows.T @ rows).double().numpy(), mean_sum, len(rows)
    top, left, bottom, right = geometry["pads"]
    padded = torch.nn.functional.pad(x, (left, right, top, bottom))
    patches = _patches_at(padded, weight_shape[2:], geometry, positions, rng)  # N, C*kh*kw, P (float32, summed in float64 across batches)
    if geometry["groups"] == 1:
        rows = patches.permute(0, 2, 1).reshape(-1, patches.shape[1])
        return (rows.T @ rows).double().numpy(), mean_sum, len(rows)
    channels, taps = x.shape[1], weight_shape[2] * weight_shape[3]  # depthwise: one G per channel
    per_channel = patches.reshape(len(x), channels, taps, -1).permute(1, 0, 3, 2).reshape(channels, -1, taps)
    return torch.einsum("cpk,cpj->ckj", per_channel, per_channel).double().numpy(), mean_sum, per_channel.shape[1]


def _patches_at(padded, kernel, geometry: dict, positions: int, rng):
    """What torch's unfold gives at `positions` output places drawn at random (all where there are fewer), gathered at
    those places only: unfolding all of a large early activation, then keeping a few columns, was most of the cost."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, geometry["strides"], geometry["dilations"]
    height = (padded.shape[2] - dh * (kh - 1) - 1) // sh + 1
    width = (padded.shape[3] - dw * (kw - 1) - 1) // sw + 1
    picked = torch.from_numpy(rng.choice(height * width, min(positions, height * width), replace=False))
    rows = (picked // width) * sh + (torch.arange(kh) * dh)[:, None, None]  # kh, 1, P
    cols = (picked % width) * sw + (torch.arange(kw) * dw)[None, :, None]  # 1, kw, P
    return padded[:, :, rows, cols].reshape(len(padded), -1, len(picked))  # channel-major, then kh, kw: unfold's order


def mean_output_shift(error_rows: np.ndarray, mean: np.ndarray, weight_shape, geometry: dict | None) -> np.ndarray:
    """The mean output error per channel, (W_q - W) E[x], of a layer whose weight error is `error_rows` (one row per
    output channel) and whose mean input is `mean` (a convolution's: [C, H, W], convolved as the layer does)."""
    if geometry is None:
        return error_rows @ mean.reshape(-1, mean.shape[-1]).mean(0)
    top, left, bottom, right = geometry["pads"]
    x = torch.nn.functional.pad(torch.from_numpy(mean[None].astype(np.float32)), (left, right, top, bottom))
    error = torch.from_numpy(error_rows.reshape(weight_shape).astype(np.float32))
    out = torch.nn.functional.conv2d(x, error, None, geometry["strides"], 0, geometry["dilations"], geometry["groups"])
    return out.mean((0, 2, 3)).numpy()
