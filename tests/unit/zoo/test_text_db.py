"""The DBNet-style text detector (zoo:text-db, trained weights, dynamic H/W) in int8 on rendered text pages.

Its binarization B = 1 / (1 + exp(-50 (P - T))) is what int8 breaks: quantized as every other activation,
1 + exp(...) spans 1 .. 1e21, rounds to 0 and B is infinite. The default path keeps that chain in float
(backends.onnx.exponential_ops); ONNX Runtime's quantizer as it is does not, and `edgekit debug` says where and why.
"""

import numpy as np
import pytest

from edgekit.artifact import parse_input_spec
from edgekit.backends.onnx.exponential_ops import exponential_chains
from edgekit.conversion import CalibrationOptions, ConvertOptions
from edgekit.converters.pipeline import convert
from edgekit.debug import DebugRequest, debug
from edgekit.errors import EdgekitError
from edgekit.source import open_source
from edgekit.zoo.text_pages import DB_ONNX, map_fidelity, pixel_scores, text_pages

CALIB, EVAL = (160, 224), (192, 256)  # calibrated on one page size, run on another


def _maps(path, images) -> tuple[np.ndarray, np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    runs = [session.run(["prob", "binary"], {"image": images[i : i + 1]}) for i in range(len(images))]
    return np.concatenate([r[0] for r in runs]), np.concatenate([r[1] for r in runs])


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    folder = tmp_path_factory.mktemp("text_db")
    calib = folder / "calib.npz"
    np.savez(calib, image=text_pages(16, 100, *CALIB)["image"])
    evaluation = text_pages(4, 200, *EVAL)
    np.savez(folder / "eval.npz", image=evaluation["image"])
    return folder, calib, evaluation


@pytest.fixture(scope="module")
def int8_default(pages):
    folder, calib, _ = pages
    out = folder / "text_db.int8.onnx"
    # no input shape given: the ONNX leaves height and width open, the calibration pages (one size) give them
    options = ConvertOptions(precision="int8", calibration=CalibrationOptions(str(calib), samples=16))
    verified = convert(open_source("zoo:text-db"), "onnx", out, options).meta["provenance"]["verified"]
    assert verified["result"] == "match" and verified["inputs"].startswith("8 samples of")  # run on the pages' shape
    return out


@pytest.fixture(scope="module")
def int8_every_op(pages):
    """ONNX Runtime's static int8 as it is (every activation quantized, the exp chain too): the broken variant."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    folder, calib, _ = pages
    images = np.load(calib)["image"]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter([{"image": images[i : i + 8]} for i in range(0, len(images), 8)])

        def get_next(self):
            return next(self.batches, None)

    out = folder / "text_db.every-op.int8.onnx"
    quantize_static(
        str(DB_ONNX), str(out), Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8
    )
    return out


def test_exponential_chain_is_found():
    assert exponential_chains(DB_ONNX) == ["/Sub_1", "/Mul", "/Exp", "/Add_3", "/Reciprocal"]


def test_default_int8_keeps_the_maps_that_every_op_int8_loses(pages, int8_default, int8_every_op):
    _, _, evaluation = pages
    ref_prob, ref_binary = _maps(DB_ONNX, evaluation["image"])
    assert pixel_scores(ref_prob[:, 0] > 0.3, evaluation["region"] > 0.5)["f1"] > 0.6  # a detector worth keeping
    prob, binary = _maps(int8_default, evaluation["image"])
    assert map_fidelity(ref_prob, prob, evaluation["region"])["f1_vs_reference"] > 0.97
    assert np.isfinite(binary).all()
    assert pixel_scores(binary[:, 0] > 0.5, ref_binary[:, 0] > 0.5)["f1"] > 0.9
    _, broken = _maps(int8_every_op, evaluation["image"])
    assert pixel_scores(broken[:, 0] > 0.5, ref_binary[:, 0] > 0.5)["f1"] < 0.5


def test_debug_names_the_exponential(pages, int8_every_op):
    folder, _, _ = pages
    report = debug(DebugRequest(open_source(str(int8_every_op)), open_source(str(DB_ONNX)), str(folder / "eval.npz"), 2))
    rows = {row["tensor"]: row for row in report["rows"]}
    assert report["first_jump"]["op"] == "Exp"
    assert any(n.startswith("wide range") for n in rows["/Exp_output_0"]["notes"])
    assert any(n.startswith("amplifies: its error is 5") for n in rows["/Mul_output_0"]["notes"])  # k = 50
    assert any(n.startswith("non-finite") for n in rows["binary"]["notes"])
    assert all(not r["notes"] for r in report["rows"] if r["op"] in ("Conv", "Relu"))


def test_debug_reads_openvino_with_dynamic_height_and_width(pages):
    folder, _, _ = pages
    ir = folder / "text_db.xml"
    convert(open_source("zoo:text-db"), "openvino", ir, ConvertOptions(inputs=(parse_input_spec(f"image:batchx3x{EVAL[0]}x{EVAL[1]}"),)))
    report = debug(DebugRequest(open_source(str(ir)), open_source(str(DB_ONNX)), str(folder / "eval.npz"), 1))
    rows = {row["tensor"]: row for row in report["rows"]}
    assert rows["prob"]["shape"] == [1, 1, *EVAL]
    assert rows["prob"]["exact"] or rows["prob"]["sqnr_db"] > 60


def test_accuracy_control_holds_the_probability_map_by_its_f1_and_cosine(pages):
    """A detection map has no classes: --min-agreement holds the F1 of its binarized map with fp32's, image by image (the
    argmax over pixels it took before meant nothing), and --min-cosine the map itself; a limit on a measure an output does
    not have (top-1 of a [N, 1] score) is refused in one line before calibration."""
    from edgekit.quantization.accuracy import Limit, check_top1

    folder, calib, _ = pages
    validation = text_pages(4, 300, *CALIB)["image"]  # the page size it is converted for
    np.savez(folder / "val.npz", image=validation)
    options = ConvertOptions(
        precision="int8",
        inputs=(parse_input_spec(f"image:batchx3x{CALIB[0]}x{CALIB[1]}"),),
        calibration=CalibrationOptions(str(calib), samples=16),
        validation_data=str(folder / "val.npz"),
        min_cosine=0.999,
        min_agreement=99.0,
    )
    out = folder / "text_db.controlled.int8.onnx"
    control = convert(open_source("zoo:text-db"), "onnx", out, options).meta["provenance"]["quantization"]["accuracy_control"]
    assert control["final"]["cosine"] >= 0.999 and control["final"]["agreement"] >= 99.0 and control["validation_samples"] == 4
    (prob, _), (ref_prob, _) = _maps(out, validation), _maps(DB_ONNX, validation)
    assert float((prob * ref_prob).sum() / np.linalg.norm(prob) / np.linalg.norm(ref_prob)) >= 0.999
    assert pixel_scores(prob[:, 0] > 0.5, ref_prob[:, 0] > 0.5)["f1"] >= 0.98
    with pytest.raises(EdgekitError, match=r"first output \(batchx1\) is none of them") as refused:
        check_top1(Limit(None, 99.0), ["batch", 1])
    assert "--min-cosine" in refused.value.hint


def test_validate_judges_the_text_detector_by_its_map_f1_blank_pages_included(int8_default, tmp_path):
    """Cosine says little of a map that is blank on some pages; the F1 of the binarized maps, page by page, does: a blank
    page the int8 marks would count as a page lost."""
    import edgekit

    text = text_pages(4, 400, *CALIB)["image"]  # the page size it was converted for
    blank = np.full((2, *text.shape[1:]), 0.9, np.float32)  # two pages of paper without text
    np.savez(tmp_path / "pages.npz", image=np.concatenate([text, blank]))
    report = edgekit.validate(
        str(int8_default), reference=str(DB_ONNX), data=str(tmp_path / "pages.npz"), mask_threshold=0.3, runs=2, warmup=0
    )
    judged = report.task_metrics
    assert report.extra["task"]["name"] == "segmentation" and judged["metric"] == "f1"
    ours = judged["vs_reference"]
    assert ours["threshold"] == 0.3 and ours["empty_maps"] == 2 and ours["false_on_empty"] == 0
    assert judged["agreement"] >= 97.0 and report.gate.passed and report.gate.thresholds["min_agreement"] == 90.0
