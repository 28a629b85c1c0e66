"""The trained FashionCNN exported with its batch fixed (at 1, at 4), as a user's detector with input [1, 3, H, W]
arrives: the models the fixed-batch tests calibrate, validate and debug."""

from __future__ import annotations

import warnings
from pathlib import Path


def fixed_batch_onnx(folder: Path, batch: int | None, dynamic_image: bool = False) -> Path:
    """FashionCNN as ONNX with input `image` fixed at [batch, 1, 28, 28] (with `dynamic_image`: [batch, 1, height, width];
    batch None: a dynamic batch, the model to compare with)."""
    import torch

    from edgekit.zoo.fashion_mnist import WEIGHTS
    from edgekit.zoo.models import fashion_cnn

    model = fashion_cnn()
    model.load_state_dict(torch.load(WEIGHTS))
    path = Path(folder) / f"fashion.b{batch or 'N'}{'.hw' if dynamic_image else ''}.onnx"
    axes = {"image": {2: "height", 3: "width"}} if dynamic_image else None
    if batch is None:
        axes, batch = {"image": {0: "batch"}, "logits": {0: "batch"}}, 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation: it writes the static shapes asked for
        torch.onnx.export(
            model.eval(),
            (torch.zeros(batch, 1, 28, 28),),
            str(path),
            input_names=["image"],
            output_names=["logits"],
            dynamic_axes=axes,
            dynamo=False,
        )
    return path


def fixed_batch_pt2(folder: Path, batch: int) -> Path:
    """FashionCNN as a .pt2 exported at a fixed batch (no dynamic_shapes), as torch.export makes it by default."""
    import torch

    from edgekit.zoo.fashion_mnist import WEIGHTS
    from edgekit.zoo.models import fashion_cnn

    model = fashion_cnn()
    model.load_state_dict(torch.load(WEIGHTS))
    path = Path(folder) / f"fashion.b{batch}.pt2"
    torch.export.save(torch.export.export(model.eval(), (torch.zeros(batch, 1, 28, 28),)), str(path))
    return path
