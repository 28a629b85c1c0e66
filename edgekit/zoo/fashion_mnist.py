"""Fashion-MNIST as numpy arrays: the committed split, or the full set from the IDX files."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from edgekit.errors import EdgekitError

DATA_DIR = Path(__file__).parent / "data"
WEIGHTS = DATA_DIR / "fashion_cnn.pt"
GRU_WEIGHTS = DATA_DIR / "fashion_gru.pt"  # zoo:fashion-gru, the stateful example (scripts/train_fashion_gru.py)
VIT_WEIGHTS = DATA_DIR / "fashion_vit.pt"  # zoo:fashion-vit, the transformer example (scripts/train_fashion_vit.py)
DET_WEIGHTS = DATA_DIR / "fashion_det.pt"  # zoo:fashion-det, the detector (scripts/train_fashion_det.py)
DET_TEST_NPZ = DATA_DIR / "fashion_det_test.npz"  # its test canvases (edgekit.zoo.canvases), uint8 `images` [200, 96, 96]
DET_TEST_JSON = DATA_DIR / "fashion_det_test.json"  # their boxes, COCO instances
DET_CALIB_NPZ = DATA_DIR / "fashion_det_calib.npz"  # its calibration canvases, uint8 `images` [200, 96, 96]
COUNT_WEIGHTS = DATA_DIR / "fashion_count.pt"  # zoo:fashion-count, the regressor (scripts/train_fashion_count.py)
COUNT_TEST_NPZ = DATA_DIR / "fashion_count_test.npz"  # its canvases (0-4 items), uint8 `images` [200, 96, 96], `labels` counts
KERAS_MODEL = DATA_DIR / "fashion_cnn.keras"
KERAS_BN_MODEL = DATA_DIR / "fashion_cnn_bn.keras"  # zoo:fashion-cnn-bn-keras, FER-shaped (scripts/train_fashion_cnn_bn_keras.py)
TEST_NPZ = DATA_DIR / "fashion_mnist_test.npz"
CALIB_NPZ = DATA_DIR / "fashion_mnist_calib.npz"
IDX_DIR = Path("/usr/share/datasets/fashion-mnist")
CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")


def read_idx(split: str, idx_dir: Path = IDX_DIR) -> tuple[np.ndarray, np.ndarray]:
    """Read the IDX files of `split` ("train" or "t10k"): uint8 images [N, 28, 28] and labels [N]."""
    images_path = idx_dir / f"{split}-images-idx3-ubyte.gz"
    if not images_path.exists():
        raise EdgekitError(
            f"Fashion-MNIST not found at {idx_dir}",
            hint="install it with `apt-get install dataset-fashion-mnist` (Debian/Ubuntu)",
        )
    with gzip.open(images_path) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
    with gzip.open(idx_dir / f"{split}-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    return images, labels


def to_model_input(images_u8: np.ndarray) -> np.ndarray:
    """uint8 [N, H, W] -> float32 [N, 1, H, W] in [0, 1], the input of the FashionCNN (28x28) and the FashionDet (96x96)."""
    return (images_u8.astype(np.float32) / 255.0)[:, None]


def load_split(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A committed split as (float32 model input, int64 labels)."""
    with np.load(path) as npz:
        return to_model_input(npz["images"]), npz["labels"].astype(np.int64)


def write_preprocessed(raw: Path, folder: Path, layout: str = "nchw") -> Path:
    """A committed raw file (uint8 `images` [N, H, W], `labels` if it has them) written once into `folder` as the
    models take it: float32 `image` [N, 1, H, W] in [0, 1] (nchw) or [N, H, W, 1] (nhwc), int64 `labels` when
    there are any. Named after the raw file (`_nhwc` added for nhwc); rewritten when the raw file is newer."""
    path = folder / f"{raw.stem}{'' if layout == 'nchw' else '_nhwc'}.npz"
    if not path.exists() or path.stat().st_mtime < raw.stat().st_mtime:
        with np.load(raw) as npz:
            images = to_model_input(npz["images"])
            arrays = {"image": images if layout == "nchw" else images.transpose(0, 2, 3, 1)}
            if "labels" in npz:
                arrays["labels"] = npz["labels"].astype(np.int64)
        np.savez(path, **arrays)
    return path


def write_demo_data(workdir: Path, layout: str = "nchw") -> tuple[Path, Path]:
    """The committed Fashion-MNIST splits (test, calibration) as .npz files keyed by the model's input name."""
    return write_preprocessed(TEST_NPZ, workdir, layout), write_preprocessed(CALIB_NPZ, workdir, layout)
