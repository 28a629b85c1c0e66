"""A convolution's input patches for weight rounding (backends.torch.layer_inputs): gathered at the drawn places only,
they are what torch's unfold gives there, and the input moments follow from them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgekit.backends.torch.layer_inputs import _patches_at, input_moments


@pytest.mark.parametrize(
    ("shape", "kernel", "strides", "dilations"),
    [
        ((2, 5, 12, 10), (3, 3), (1, 1), (1, 1)),
        ((2, 4, 13, 9), (3, 3), (2, 2), (1, 1)),
        ((1, 3, 17, 11), (5, 3), (2, 1), (2, 1)),
        ((2, 6, 7, 7), (1, 1), (1, 1), (1, 1)),
    ],
)
@pytest.mark.parametrize("positions", [5, 10_000])
def test_gathered_patches_are_unfolds_columns(shape, kernel, strides, dilations, positions):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    unfolded = torch.nn.functional.unfold(x, kernel, dilations, 0, strides)
    drawn = np.random.default_rng(1).choice(unfolded.shape[2], min(positions, unfolded.shape[2]), replace=False)
    gathered = _patches_at(x, kernel, {"strides": strides, "dilations": dilations}, positions, np.random.default_rng(1))
    assert torch.equal(gathered, unfolded[:, :, torch.from_numpy(drawn)])


def test_a_depthwise_convolutions_moments_are_per_channel():
    x = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(2))
    geometry = {"pads": (1, 1, 1, 1), "strides": (1, 1), "dilations": (1, 1), "groups": 3}
    second, mean_sum, rows = input_moments(x, (3, 1, 3, 3), geometry, 1000, np.random.default_rng(0))
    patches = torch.nn.functional.unfold(torch.nn.functional.pad(x, (1, 1, 1, 1)), (3, 3)).reshape(2, 3, 9, 36)
    expected = torch.einsum("nckp,ncjp->ckj", patches.double(), patches.double())
    assert second.shape == (3, 9, 9) and rows == 2 * 36 and np.allclose(second, expected.numpy(), rtol=1e-5, atol=1e-4)
    assert np.allclose(mean_sum, x.double().sum(0).numpy())
