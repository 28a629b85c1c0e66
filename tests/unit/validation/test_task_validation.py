"""Validation judges each model by its task's metric, on real trained weights: the zoo detector by mAP (its int8 in a
batch fixed at 1, and an int8 calibrated on images 100x too dark that the mAP gate stops), an embedding model by the
neighbours it keeps. (The zoo text detector's map F1: tests/unit/zoo/test_text_db.py.)"""

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

import edgekit
from edgekit.zoo.names import zoo_data
from tests.conftest import run_cli

TEST, CALIB = "zoo:fashion-det-test", "zoo:fashion-det-calib"
EMBEDDER = f"{Path(__file__).parent / 'embedder.py'}:fashion_embedder"


@pytest.fixture(scope="module")
def detector(tmp_path_factory):
    """The zoo detector exported with its batch fixed at 1 (as detectors ship), and its int8 calibrated on 64 canvases."""
    import warnings

    import torch

    from edgekit.zoo.models import fashion_det

    folder = tmp_path_factory.mktemp("det")
    fp32 = folder / "fp32.b1.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation: it writes the static shape asked for
        torch.onnx.export(
            fashion_det(), (torch.zeros(1, 1, 96, 96),), str(fp32), input_names=["image"], output_names=["output0"], dynamo=False
        )
    int8 = edgekit.convert(str(fp32), "onnx", folder / "int8.onnx", precision="int8", calib=CALIB, calib_samples=64)
    return folder, fp32, int8


def test_a_fixed_batch_detector_is_calibrated_and_judged_by_map(detector):
    _, fp32, int8 = detector
    assert int8.inputs[0]["shape"] == [1, 1, 96, 96]
    report = edgekit.validate(str(int8.path), reference="zoo:fashion-det", data=TEST, limit=100, runs=2, warmup=0)
    assert report.extra["task"]["name"] == "detection" and report.extra["task"]["inferred"]
    judged = report.task_metrics
    assert judged["metric"] == "map50" and judged["decoded"] == "yolov8"
    assert judged["agreement"] >= 95.0 and judged["vs_reference"]["map50_95"] > 0.7
    labelled = judged["vs_labels"]
    assert labelled["reference"] >= 0.85 and labelled["samples"] == 100  # the fp32 detector is really trained
    # the box decoding in float (backends.onnx.box_decoding): all-int8 lost 8 points of mAP@0.5:0.95 (0.752 vs 0.835)
    assert labelled["artifact_map50_95"] >= labelled["reference_map50_95"] - 0.02
    assert "Softmax" in {
        n.op_type for n in onnx.load(str(fp32)).graph.node if n.name in int8.provenance["quantization"]["box_decoding_in_float"]
    }
    assert report.accuracy["drop_points"] == pytest.approx(100 * (labelled["reference"] - labelled["artifact"]))
    assert report.gate.passed and report.gate.thresholds.get("min_agreement") == 90.0  # the detection floor, not cosine


def test_an_int8_calibrated_on_dark_images_fails_the_map_gate_and_names_the_images(detector, tmp_path):
    folder, fp32, _ = detector
    with np.load(zoo_data(CALIB)) as npz:
        np.savez(tmp_path / "dark.npz", image=npz["image"][:64] / 100.0)  # a preprocessing bug: images 100x too dark
    dark = edgekit.convert(str(fp32), "onnx", tmp_path / "dark.onnx", precision="int8", calib=str(tmp_path / "dark.npz"))
    result = run_cli(
        "validate",
        dark.path,
        "-r",
        "zoo:fashion-det",
        "-d",
        TEST,
        "--limit",
        "100",
        "--runs",
        "2",
        "--warmup",
        "0",
        "--max-drop",
        "1",
        "--report",
        tmp_path / "r.json",
    )
    assert result.code == 2, result.stdout + result.stderr
    assert "GATE FAILED" in result.stdout and "accuracy_drop" in result.stdout
    assert "changed most: fashion_det_test.npz[" in result.stdout  # the images to look at, by name
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["task_metrics"]["vs_labels"]["drop_points"] > 1.0
    assert report["task_metrics"]["changes"][0]["id"].startswith("fashion_det_test.npz[")


def test_an_embedding_model_is_judged_by_the_neighbours_it_keeps(tmp_path):
    int8 = edgekit.convert(EMBEDDER, "onnx", tmp_path / "emb.onnx", precision="int8", calib="zoo:fashion-mnist-calib", calib_samples=64)
    report = edgekit.validate(
        str(int8.path), reference=EMBEDDER, data="zoo:fashion-mnist-test", limit=300, task="embedding", runs=2, warmup=0
    )
    judged = report.task_metrics
    assert judged["metric"] == "recall_at_10" and judged["agreement"] >= 80.0
    assert 0.9 < judged["vs_reference"]["rank_correlation"] <= 1.0
    labelled = judged["vs_labels"]
    assert labelled["metric"] == "recall_at_1" and labelled["reference"] > 0.8  # nearest neighbour of the same class
    assert abs(labelled["drop_points"]) < 5


def test_a_counting_regressor_is_judged_by_r2_against_its_targets_and_gated_in_r2_points(tmp_path):
    """zoo:fashion-count: int8 against the torch model and against the counts; --max-drop reads R^2 points."""
    from sklearn.metrics import r2_score

    from edgekit.calibration import load_samples
    from edgekit.metrics.compare import run_batches
    from edgekit.source import open_source
    from edgekit.targets import make_runner

    int8 = edgekit.convert("zoo:fashion-count", "onnx", tmp_path / "count.onnx", precision="int8", calib_samples=64)
    report = edgekit.validate(str(int8.path), max_drop=0.5, runs=2, warmup=0)
    assert report.extra["task"]["name"] == "regression" and report.extra["task"]["inferred"]
    labelled = report.task_metrics["vs_labels"]
    samples = load_samples(str(zoo_data("zoo:fashion-count-test")))
    counted = run_batches(make_runner(open_source(str(int8.path))), samples, 50)[0][:, 0]
    assert labelled["metric"] == "r2" and labelled["samples"] == 200
    assert labelled["artifact"] == pytest.approx(r2_score(samples.labels, counted), abs=1e-6)
    assert labelled["reference"] > 0.95 and report.gate.passed  # the fp32 regressor is trained; int8 keeps it
    assert report.task_metrics["vs_reference"]["mean_abs_error"] < 0.1  # items, on counts of 0 to 4
    assert report.accuracy["drop_points"] == pytest.approx(labelled["drop_points"])
    strict = edgekit.validate(str(int8.path), max_drop=-5, runs=2, warmup=0)  # asks int8 to beat fp32 by 5 points
    assert not strict.gate.passed and "accuracy_drop" in json.dumps(strict.gate.to_dict())
