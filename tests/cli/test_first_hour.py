"""Issue 19's done-when: a new user converts, validates and reports zoo:fashion-cnn in int8 with one command
each and no extra flags; zoo: names work in every command."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import assert_clean_error, run_cli


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("first-hour")


@pytest.fixture(scope="module")
def converted(folder):
    return run_cli("convert", "zoo:fashion-cnn", "--to", "onnx", "-p", "int8", cwd=folder)


def test_convert_needs_no_calibration_flag(converted, folder):
    assert converted.code == 0, converted.stderr
    assert "no --calib given: calibrating on zoo:fashion-mnist-calib, the default calibration set of zoo:fashion-cnn" in converted.stderr
    assert (
        "300 samples from zoo:fashion-mnist-calib" in converted.stdout and "default calibration set of zoo:fashion-cnn" in converted.stdout
    )
    provenance = json.loads((folder / "fashion-cnn.int8.onnx.edgekit.json").read_text())
    assert provenance["calibration"]["default_of"] == "zoo:fashion-cnn" and provenance["source"]["zoo"] == "zoo:fashion-cnn"


def test_validate_needs_no_reference_or_data(converted, folder):
    result = run_cli("validate", "fashion-cnn.int8.onnx", cwd=folder)
    assert result.code == 0, result.stdout + result.stderr
    assert "10000 samples from zoo:fashion-mnist-test (the validation set of zoo:fashion-cnn; -d to choose)" in result.stdout
    assert "accuracy: reference 91.98%" in result.stdout and "gate passed" in result.stdout


def test_the_report_needs_no_extra_flags(converted, folder):
    validated = run_cli("validate", "fashion-cnn.int8.onnx", "--runs", "10", "--report", "report.json", cwd=folder)
    assert validated.code == 0, validated.stderr
    report = run_cli("report", "report.json", cwd=folder)
    assert report.code == 0, report.stderr
    row = re.search(r"\| onnx \| int8 \| onnxruntime:cpu \| ok \| top-1 \| (\d+\.\d+)%", report.stdout)
    assert row and float(row.group(1)) > 91.0, report.stdout  # the trained model's int8 (fp32: 91.98%)


@pytest.fixture(scope="module")
def fp32(folder):
    result = run_cli("convert", "zoo:fashion-cnn", "--to", "onnx", cwd=folder)
    assert result.code == 0, result.stderr
    return folder / "fashion-cnn.fp32.onnx"


@pytest.mark.parametrize(
    "args",
    [
        ("info", "zoo:fashion-cnn"),
        ("bench", "zoo:fashion-cnn", "--runs", "3", "--warmup", "1"),
        ("prune", "zoo:fashion-cnn", "-m", "magnitude", "-o", "pruned.pt2"),
        ("quantize", "fashion-cnn.fp32.onnx", "--calib", "zoo:fashion-mnist-calib", "--calib-samples", "100", "-o", "q.onnx"),
        ("validate", "fashion-cnn.fp32.onnx", "-r", "zoo:fashion-cnn", "-d", "zoo:fashion-mnist-test", "--limit", "500", "--runs", "3"),
    ],
    ids=["info", "bench", "prune", "quantize", "validate"],
)
def test_zoo_names_work_in_every_command(fp32, folder, args):
    result = run_cli(*args, cwd=folder)
    assert result.code == 0, result.stdout + result.stderr
    assert "weights are random" not in result.stderr  # zoo:fashion-cnn comes with its trained weights


def test_quantize_names_what_it_takes(folder):
    assert_clean_error(
        run_cli("quantize", "zoo:fashion-cnn", "-o", "x.onnx", cwd=folder), "quantize takes an .onnx file, not torch-factory"
    )
