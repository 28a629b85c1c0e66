"""The Python API: the commands as functions with typed results, and what they work out for the user."""

from __future__ import annotations

import json
import logging
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import edgekit
from edgekit.api.results import Bench, BenchResult, Converted, Fidelity, Gate, GateCheck, GateResult, LatencyStats, Validation, as_result
from edgekit.errors import EdgekitError

DOCS = Path(__file__).parents[3] / "docs" / "python-api.md"


def flat_linear():
    """A factory whose module declares no input shapes (deterministic weights): shapes must come from the data."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10)).eval()


@pytest.fixture(scope="module")
def zoo_int8(tmp_path_factory) -> Converted:
    """zoo:fashion-cnn to int8 ONNX with no calibration argument: the zoo model's own set is used."""
    return edgekit.convert("zoo:fashion-cnn", "onnx", tmp_path_factory.mktemp("api") / "fashion-cnn.int8.onnx", precision="int8")


@pytest.fixture(scope="module")
def validated(zoo_int8, tmp_path_factory) -> tuple[Validation, Path]:
    report = tmp_path_factory.mktemp("report") / "report.json"
    return edgekit.validate(str(zoo_int8.path), limit=2000, runs=10, warmup=2, report=report), report


def test_importing_edgekit_imports_no_framework():
    code = "import sys, edgekit; edgekit.validate; edgekit.run; print(sorted({m.split('.')[0] for m in sys.modules}))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    for heavy in ("torch", "onnxruntime", "onnx", "openvino", "tensorflow", "numpy", "typer"):
        assert f"'{heavy}'" not in loaded, heavy


def test_each_api_name_is_the_function_whatever_was_imported():
    """No module of edgekit or edgekit.api is named after a command (importing it would set the name to the module)."""
    import importlib
    import pkgutil

    for package in (edgekit, edgekit.api):
        named = {m.name for m in pkgutil.iter_modules(package.__path__)} & set(edgekit.API)
        assert not named, f"{package.__name__} has modules named after API functions: {sorted(named)}"
    for name in ("edgekit.validation.validate", "edgekit.quantization.scheme", "edgekit.api.stages", "edgekit.pruning.stages"):
        importlib.import_module(name)
    for name in edgekit.API:
        assert getattr(edgekit, name).__module__ == "edgekit.api" and getattr(edgekit.api, name).__module__ == "edgekit.api", name
    assert set(edgekit.API) <= set(dir(edgekit))


def test_convert_a_zoo_model_to_int8_with_its_own_calibration_set(zoo_int8):
    assert isinstance(zoo_int8, Converted) and zoo_int8.format == "onnx" and zoo_int8.precision == "int8"
    calibration = zoo_int8.provenance["calibration"]
    assert calibration["source"] == "zoo:fashion-mnist-calib" and calibration["default_of"] == "zoo:fashion-cnn"
    assert calibration["samples"] == 300 and calibration["random"] is False
    assert zoo_int8.provenance["source"]["zoo"] == "zoo:fashion-cnn"
    assert zoo_int8.to_dict()["meta"]["provenance"] == zoo_int8.provenance


def test_validate_finds_reference_and_data_and_returns_typed_results(validated):
    result, _ = validated
    assert isinstance(result, Validation) and result.kind == "validate"
    assert result.reference["zoo"] == "zoo:fashion-cnn" and result.reference["spec"] == "edgekit.zoo.models:fashion_cnn"
    assert result.data["source"] == "zoo:fashion-mnist-test" and result.data["default_of"] == "zoo:fashion-cnn"
    assert result.accuracy["samples"] == 2000 and result.accuracy["reference"] > 90.0 and abs(result.accuracy["drop_points"]) < 1.0
    assert isinstance(result.fidelity[0], Fidelity) and result.fidelity[0].cosine_mean > 0.999
    assert isinstance(result.latency, BenchResult) and isinstance(result.latency.latency, LatencyStats)
    assert result.latency.latency.runs == 10 and result.latency.latency.p50 > 0
    assert isinstance(result.gate, Gate) and all(isinstance(r, GateResult) for r in result.gate.results)
    assert result.passed and result.gate.thresholds["min_cosine"] == 0.97


def test_the_typed_result_is_the_written_report(validated):
    from edgekit.report.schema import load_json, schema_problem

    result, report = validated
    written = load_json(report)
    assert json.loads(result.to_json()) == written
    assert list(result.to_dict()) == list(written)  # same keys, same order
    again = as_result(written)
    assert isinstance(again, Validation) and again.to_dict() == written and schema_problem(again.to_dict()) is None
    assert {"task", "output_pairing"} <= set(again.extra) and "fidelity" not in again.extra  # open keys kept, schema fields typed


def test_gate_on_the_saved_report(validated):
    _, report = validated
    check = edgekit.gate(report)
    assert isinstance(check, GateCheck) and check.passed and check.exit_code == 0
    strict = edgekit.gate(report, min_cosine=0.9999999)
    assert not strict.passed and strict.exit_code == 2
    assert [g["metric"] for g in strict.rows[0]["gates"] if not g["passed"]] == ["cosine"]


def test_bench_returns_typed_results(zoo_int8, tmp_path):
    result = edgekit.bench(str(zoo_int8.path), runs=5, warmup=1, threads=1, report=tmp_path / "b.json")
    assert isinstance(result, Bench) and len(result.results) == 1
    row = result.results[0]
    assert isinstance(row, BenchResult) and row.threads == 1 and row.latency.runs == 5 and len(row.times_ms) == 5
    assert row.size_bytes == zoo_int8.size_bytes
    assert json.loads((tmp_path / "b.json").read_text()) == json.loads(result.to_json())


def test_the_documented_one_liner_runs_as_shown(zoo_int8):
    block = re.search(r"```bash\n(python -c .*)\n```", DOCS.read_text()).group(1)
    args = shlex.split(block)
    proc = subprocess.run([sys.executable, *args[1:]], capture_output=True, text=True, cwd=zoo_int8.path.parent, timeout=600)
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip()
    assert (
        line.startswith("Validation(fashion-cnn.int8.onnx on onnxruntime:cpu vs zoo:fashion-cnn: cosine 0.99") and "gate passed" in line
    ), line
    assert re.search(r"accuracy 9\d\.\d\d% \(drop [+-]\d\.\d\d pts\)", line), line


def test_validate_without_reference_or_provenance_says_what_to_pass(tmp_path, zoo_int8):
    bare = tmp_path / "bare.onnx"
    bare.write_bytes(zoo_int8.path.read_bytes())  # no sidecar next to it
    with pytest.raises(EdgekitError, match="no edgekit provenance") as info:
        edgekit.validate(str(bare))
    assert "-r/--reference" in info.value.hint


def test_input_shapes_come_from_the_calibration_data(tmp_path):
    out = edgekit.convert(
        "tests.unit.api.test_api:flat_linear", "onnx", tmp_path / "flat.onnx", precision="int8", calib="zoo:fashion-mnist-calib"
    )
    assert [(s["name"], s["shape"][1:]) for s in out.inputs] == [("image", [1, 28, 28])]
    assert out.provenance["calibration"].get("default_of") is None  # given, not a default
    with pytest.raises(EdgekitError, match="does not record its input shapes"):
        edgekit.convert("tests.unit.api.test_api:flat_linear", "onnx", tmp_path / "flat2.onnx")


def test_the_committed_raw_data_files_are_read_with_their_declared_preprocessing():
    from edgekit.artifact import TensorSpec
    from edgekit.calibration import load_samples
    from edgekit.zoo.fashion_mnist import CALIB_NPZ

    with np.load(CALIB_NPZ) as raw:
        assert raw["images"].dtype == np.uint8  # as committed: not what the model takes
    nchw = load_samples(str(CALIB_NPZ), 50, specs=[TensorSpec("image", ("batch", 1, 28, 28))])
    nhwc = load_samples(str(CALIB_NPZ), 50, specs=[TensorSpec("image", ("batch", 28, 28, 1))])
    assert nchw.arrays["image"].dtype == np.float32 and nchw.arrays["image"].max() <= 1.0 and nchw.labels is not None
    assert np.array_equal(nchw.arrays["image"].transpose(0, 2, 3, 1), nhwc.arrays["image"])
    assert nchw.provenance["source"] == "zoo:fashion-mnist-calib"


def test_a_factory_with_random_weights_is_not_silent(caplog):
    from edgekit.backends.torch.loader import load_torch
    from edgekit.source import open_source
    from edgekit.zoo.fashion_mnist import WEIGHTS

    with caplog.at_level(logging.WARNING, logger="edgekit"):
        load_torch(open_source("edgekit.zoo.models:fashion_cnn"))
    assert "weights are random" in caplog.text and "zoo:fashion-cnn" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="edgekit"):
        load_torch(open_source("edgekit.zoo.models:fashion_cnn", str(WEIGHTS)))
        load_torch(open_source("tests.unit.api.test_api:flat_linear"))  # seeded: the same weights every build
    assert "weights are random" not in caplog.text
