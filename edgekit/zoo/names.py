"""`zoo:` names: the shipped models and data, usable wherever a model or a data file is (CLI, API, recipes)."""

from __future__ import annotations

import os
from pathlib import Path

from edgekit.errors import EdgekitError

# zoo model -> (factory or file, its input specs as --input writes them, input layout)
MODELS = {
    "zoo:fashion-cnn": ("edgekit.zoo.models:fashion_cnn", ("image:1x1x28x28",), "nchw"),
    "zoo:fashion-cnn-keras": ("fashion_cnn.keras", (), "nhwc"),
    "zoo:efficientnet-lite0": ("edgekit.zoo.models:efficientnet_lite0", ("image:1x3x224x224",), "nchw"),
    "zoo:resnet18-shape": ("edgekit.zoo.models:resnet18_shape", ("image:1x3x224x224",), "nchw"),
    # stateful: the GRU's state [layers, batch, hidden] (start it at zeros with --input state=0)
    "zoo:fashion-gru": ("edgekit.zoo.models:fashion_row_gru", ("image:1x1x28x28", "state:2xbatchx64"), "nchw"),
}
# zoo data -> which split of the committed Fashion-MNIST files (written out as float32 .npz keyed `image`, with labels)
DATA = {"zoo:fashion-mnist-test": 0, "zoo:fashion-mnist-calib": 1}


def is_zoo(spec: str | None) -> bool:
    return bool(spec) and str(spec).startswith("zoo:")


def zoo_model(spec: str):
    """(ModelSource, input specs, layout) of a zoo model; the trained FashionCNN comes with its weights."""
    from edgekit.loaders import ModelSource
    from edgekit.zoo.fashion_mnist import DATA_DIR, GRU_WEIGHTS, WEIGHTS

    if spec not in MODELS:
        raise EdgekitError(f"unknown zoo model '{spec}'", hint=f"known: {', '.join(MODELS)}")
    target, inputs, layout = MODELS[spec]
    if target.endswith(".keras"):
        return ModelSource(str(DATA_DIR / target), "keras"), inputs, layout
    weights = {"zoo:fashion-cnn": WEIGHTS, "zoo:fashion-gru": GRU_WEIGHTS}.get(spec)
    return ModelSource(target, "torch-factory", weights), inputs, layout


def zoo_data(spec: str, folder: Path | None = None, layout: str = "nchw") -> Path:
    """The path of a zoo data set, written out (once) as an .npz the models take as they are."""
    from edgekit.demo import write_demo_data

    if spec not in DATA:
        raise EdgekitError(f"unknown zoo data '{spec}'", hint=f"known: {', '.join(DATA)}")
    folder = folder or Path(os.environ.get("EDGEKIT_CACHE", Path.home() / ".cache" / "edgekit")) / "zoo"
    folder.mkdir(parents=True, exist_ok=True)
    return write_demo_data(folder, layout)[DATA[spec]]
