"""`zoo:` names: the shipped models and data, usable wherever a model or a data file is (CLI, API, recipes).

A zoo model declares its inputs, its layout and the data it goes with (its default calibration and
validation sets), so `edgekit convert zoo:fashion-cnn -p int8` and `edgekit validate ARTIFACT` need no
other flag. A zoo data set declares its preprocessing: the committed raw files (uint8 `images`) are
turned into the float input the models take, whether named `zoo:...` or by their path.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from edgekit.errors import EdgekitError

log = logging.getLogger("edgekit")


@dataclass(frozen=True)
class ZooModel:
    target: str  # module:factory, or a file under edgekit/zoo/data
    inputs: tuple[str, ...]  # input specs as --input writes them
    layout: str = "nchw"
    calibration: str | None = None  # default calibration set (a zoo: data name)
    validation: str | None = None  # default labelled validation set (a zoo: data name)


FASHION = {"calibration": "zoo:fashion-mnist-calib", "validation": "zoo:fashion-mnist-test"}
MODELS = {
    "zoo:fashion-cnn": ZooModel("edgekit.zoo.models:fashion_cnn", ("image:1x1x28x28",), **FASHION),
    "zoo:fashion-cnn-keras": ZooModel("fashion_cnn.keras", (), "nhwc", **FASHION),
    "zoo:efficientnet-lite0": ZooModel("edgekit.zoo.models:efficientnet_lite0", ("image:1x3x224x224",)),
    "zoo:resnet18-shape": ZooModel("edgekit.zoo.models:resnet18_shape", ("image:1x3x224x224",)),
    # stateful: the GRU's state [layers, batch, hidden] (start it at zeros with --input state=0)
    "zoo:fashion-gru": ZooModel("edgekit.zoo.models:fashion_row_gru", ("image:1x1x28x28", "state:2xbatchx64"), **FASHION),
    # a DBNet-style text detector as such models ship: ONNX, batch/height/width dynamic (edgekit.zoo.models.TextDB,
    # trained by scripts/train_text_db.py on edgekit.zoo.text_pages); int8 takes the page size from its calibration pages
    "zoo:text-db": ZooModel("text_db.onnx", ()),
    # attention (MatMul + Softmax, LayerNorm, GELU): the transformer family's int8 scheme
    "zoo:fashion-vit": ZooModel("edgekit.zoo.models:fashion_vit", ("image:1x1x28x28",), **FASHION),
    # a facial-expression-style Keras CNN: Conv(relu) -> BatchNorm, Dense(relu) -> BatchNorm, dropout, softmax out
    "zoo:fashion-cnn-bn-keras": ZooModel("fashion_cnn_bn.keras", (), "nhwc", **FASHION),
    # a YOLOv8-style single-stage detector, decoded inside: one output [N, 4 + 10, 180] (cx, cy, w, h in pixels, then
    # class probabilities; NMS is the caller's) on 96x96 canvases of Fashion-MNIST items (edgekit.zoo.canvases)
    "zoo:fashion-det": ZooModel(
        "edgekit.zoo.models:fashion_det", ("image:1x1x96x96",), calibration="zoo:fashion-det-calib", validation="zoo:fashion-det-test"
    ),
    # a regressor: the number of items on such a canvas, [N, 1] float (object counting), judged by its error and R^2
    "zoo:fashion-count": ZooModel(
        "edgekit.zoo.models:fashion_count", ("image:1x1x96x96",), calibration="zoo:fashion-det-calib", validation="zoo:fashion-count-test"
    ),
    # a Llama-architecture decoder (3.7 M parameters, BPE vocabulary of 2048) trained on the Python standard library
    # (edgekit.zoo.lm, scripts/train_stdlib_lm.py): `convert --task text-generation`, validated on held-out files
    "zoo:stdlib-lm": ZooModel("edgekit.zoo.lm:stdlib_lm", (), calibration="zoo:stdlib-lm-calib", validation="zoo:stdlib-lm-test"),
}
# zoo data -> the committed raw file, and its preprocessing: uint8 `images` [N, H, W] -> float32 `image` in [0, 1],
# [N, 1, H, W] (nchw) or [N, H, W, 1] (nhwc), with int64 `labels` where the raw file has them
DATA = {
    "zoo:fashion-mnist-test": "fashion_mnist_test.npz",
    "zoo:fashion-mnist-calib": "fashion_mnist_calib.npz",
    "zoo:fashion-det-test": "fashion_det_test.npz",  # 96x96 canvases; their boxes are in LABELS
    "zoo:fashion-det-calib": "fashion_det_calib.npz",
    "zoo:fashion-count-test": "fashion_count_test.npz",  # 96x96 canvases of 0-4 items; `labels`: how many
}
# zoo data -> its labels file under edgekit/zoo/data, where they are not the npz's `labels` (COCO instances for boxes)
LABELS = {"zoo:fashion-det-test": "fashion_det_test.json"}
# zoo token data of the language model: the committed file as it is (token ids, or text its tokenizer reads)
TEXT = {
    "zoo:stdlib-lm-test": "stdlib_lm_test.npz",
    "zoo:stdlib-lm-calib": "stdlib_lm_calib.txt",
    "zoo:stdlib-lm-text": "stdlib_lm_test.txt",
}
TOKENIZERS = {"zoo:stdlib-lm": "stdlib_lm_tokenizer.json"}
PREPROCESSING = "uint8 images / 255 -> float32 `image` [N, 1, H, W] (channels-last for Keras), int64 labels if any"


def is_zoo(spec: str | None) -> bool:
    return bool(spec) and str(spec).startswith("zoo:")


def zoo_entry(spec: str) -> ZooModel:
    if spec not in MODELS:
        raise EdgekitError(f"unknown zoo model '{spec}'", hint=f"known: {', '.join(MODELS)}")
    return MODELS[spec]


def zoo_data(spec: str, folder: Path | None = None, layout: str = "nchw") -> Path:
    """The path of a zoo data set, written out (once) with its declared preprocessing as an .npz the models take."""
    from edgekit.zoo.fashion_mnist import DATA_DIR, write_preprocessed

    if spec not in DATA:
        raise EdgekitError(f"unknown zoo data '{spec}'", hint=f"known: {', '.join(DATA)}")
    folder = folder or Path(os.environ.get("EDGEKIT_CACHE", Path.home() / ".cache" / "edgekit")) / "zoo"
    folder.mkdir(parents=True, exist_ok=True)
    return write_preprocessed(DATA_DIR / DATA[spec], folder, layout)


def zoo_text(spec: str) -> Path:
    """The committed token data (.npz of input_ids) or text of a zoo language model's data name."""
    from edgekit.zoo.fashion_mnist import DATA_DIR

    if spec not in TEXT:
        raise EdgekitError(f"unknown zoo token data '{spec}'", hint=f"known: {', '.join(TEXT)}")
    return DATA_DIR / TEXT[spec]


def zoo_tokenizer(spec: str | None) -> Path | None:
    """The tokenizer.json of a zoo language model, else None."""
    from edgekit.zoo.fashion_mnist import DATA_DIR

    return DATA_DIR / TOKENIZERS[spec] if spec in TOKENIZERS else None


def zoo_labels(spec: str) -> Path | None:
    """The committed labels file of a zoo data set kept beside it (COCO instances of zoo:fashion-det-test), else None."""
    from edgekit.zoo.fashion_mnist import DATA_DIR

    return DATA_DIR / LABELS[spec] if spec in LABELS else None


def zoo_name_of_file(path: str | Path) -> str | None:
    """The zoo data name of a committed raw file named by its path (its preprocessing then applies), else None."""
    from edgekit.zoo.fashion_mnist import DATA_DIR

    try:
        resolved = Path(path).resolve()
    except OSError:
        return None
    return next((name for name, file in DATA.items() if resolved == (DATA_DIR / file).resolve()), None)


def zoo_data_for(spec: str, specs=None) -> tuple[str, str]:
    """(path to read, name to report) for a data spec: zoo names and the committed raw files are written out
    preprocessed, in the layout of the model's input (`specs`); any other spec is returned as it is."""
    name = spec if is_zoo(spec) else zoo_name_of_file(spec)
    if name is None:
        return spec, spec
    if not is_zoo(spec):
        log.info("%s is the zoo's raw %s: preprocessed as it declares (%s)", spec, name, PREPROCESSING)
    return str(zoo_data(name, layout=layout_of(specs))), name


def layout_of(specs) -> str:
    """nhwc for one image input with a trailing channel axis of 1 or 3 (a Keras model), else nchw."""
    image = [s for s in specs or [] if s.value is None]
    if len(image) == 1 and len(image[0].shape) == 4 and image[0].shape[-1] in (1, 3) and image[0].shape[1] not in (1, 3):
        return "nhwc"
    return "nchw"
