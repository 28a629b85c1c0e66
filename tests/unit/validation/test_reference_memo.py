"""A matrix's cells compare against one reference pass: the reference's outputs are kept per process by what makes them
(its content, target, threads, batch, the samples' bytes), so a changed reference file or other samples run it again."""

import shutil

from edgekit.source import open_source
from edgekit.validation import validate as v
from tests.conftest import INPUTS


def _evaluate(artifact, reference, data, limit):
    request = v.ValidationRequest(open_source(str(artifact)), open_source(str(reference)), data=str(data), data_limit=limit, inputs=INPUTS)
    report, _ = v.evaluate(request)
    return report["fidelity"][0]


def test_the_reference_runs_once_for_a_matrix_and_again_when_it_or_the_samples_change(fashion_onnx, small_test_npz, tmp_path, monkeypatch):
    reference = tmp_path / "reference.onnx"
    shutil.copy(fashion_onnx["fp32"], reference)
    passes = []
    run_batches = v.run_batches
    monkeypatch.setattr(v, "run_batches", lambda runner, samples, batch: passes.append(len(samples)) or run_batches(runner, samples, batch))
    v._reference_outputs.clear()

    same = _evaluate(fashion_onnx["fp32"], reference, small_test_npz, 300)
    int8 = _evaluate(fashion_onnx["int8"], reference, small_test_npz, 300)
    assert passes == [300, 300, 300]  # the reference once, then each artifact
    assert same["max_abs"] == 0.0 and int8["max_abs"] > 0.0

    shutil.copy(fashion_onnx["int8"], reference)  # the same path, other content: not the kept outputs
    against_int8 = _evaluate(fashion_onnx["fp32"], reference, small_test_npz, 300)
    assert against_int8["max_abs"] == int8["max_abs"] and passes == [300] * 5

    _evaluate(fashion_onnx["fp32"], reference, small_test_npz, 200)  # other samples
    assert passes == [300] * 5 + [200, 200]


def test_the_model_itself_on_the_references_runtime_is_run_once_for_both_sides(small_test_npz, monkeypatch):
    passes = []
    run_batches = v.run_batches
    monkeypatch.setattr(
        v, "run_batches", lambda runner, samples, batch: passes.append(runner.target) or run_batches(runner, samples, batch)
    )
    v._reference_outputs.clear()
    model = open_source("zoo:fashion-cnn")
    report, _ = v.evaluate(v.ValidationRequest(model, model, "torch:cpu", str(small_test_npz), 300))
    assert passes == ["torch:cpu"] and report["fidelity"][0]["name"] == "output" and report["fidelity"][0]["max_abs"] == 0.0
    assert report["accuracy"]["artifact"] == report["accuracy"]["reference"] > 80
