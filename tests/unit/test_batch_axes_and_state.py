"""Models that are not one batched image in, one tensor out: a recurrent state with its batch on axis 1, constant
inputs, TorchScript int arguments (issue 22)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgekit.artifact import TensorSpec, parse_input_spec
from tests.conftest import run_cli


def test_the_batch_axis_is_the_named_dim_then_the_first_dynamic_one_then_dim_0():
    assert parse_input_spec("state:2xbatchx64").batch_axis() == 1
    assert TensorSpec("state", (2, None, 128)).batch_axis() == 1  # a fixed leading 2, the batch unnamed
    assert TensorSpec("image", ("N", 3, "height", "width")).batch_axis() == 0
    assert TensorSpec("image", (1, 3, 224, 224)).batch_axis() == 0
    assert TensorSpec("sr", ()).batch_axis() is None
    state = parse_input_spec("state:2xbatchx64")
    assert state.concrete_shape(8) == (2, 8, 64) and state.sample_shape() == (2, 64)
    assert state.to_model_layout(np.zeros((8, 2, 64))).shape == (2, 8, 64)


def test_a_constant_fills_the_models_shape_with_its_batch():
    from edgekit.targets.base import apply_given_inputs

    (state,) = apply_given_inputs([parse_input_spec("state:2xbatchx64")], [parse_input_spec("state=0")])
    assert state.constant(5).shape == (2, 5, 64) and not state.constant(5).any()
    assert parse_input_spec("sr=16000:int64").constant().shape == ()


def test_samples_are_stored_per_sample_and_fed_in_the_models_layout():
    from edgekit.calibration.samples import Samples

    specs = [parse_input_spec("image:batchx4"), parse_input_spec("state:2xbatchx3")]
    samples = Samples({"image": np.zeros((5, 4), np.float32), "state": np.arange(30, dtype=np.float32).reshape(5, 2, 3)})
    batches = list(samples.bind(specs).batches(2))
    assert [b["state"].shape for b in batches] == [(2, 2, 3), (2, 2, 3), (2, 1, 3)]
    assert np.array_equal(batches[0]["state"][:, 1], samples.arrays["state"][1])  # sample 1's state, batch slot 1
    with pytest.raises(Exception, match="does not match"):
        Samples({"image": np.zeros((5, 4), np.float32), "state": np.zeros((5, 3, 3), np.float32)}).bind(specs)


def test_outputs_with_the_batch_on_axis_1_are_joined_per_sample():
    from edgekit.metrics.compare import sample_major

    chunks = [np.zeros((2, 4, 64)), np.ones((2, 1, 64))]
    joined = np.concatenate(sample_major(chunks, [4, 1]))
    assert joined.shape == (5, 2, 64) and joined[4].all() and not joined[:4].any()


@pytest.mark.e2e
def test_the_stateful_gru_converts_and_validates_from_a_zero_state(tmp_path):
    onnx = tmp_path / "gru.onnx"
    converted = run_cli("convert", "zoo:fashion-gru", "--to", "onnx", "-o", onnx)
    assert converted.code == 0, converted.stdout + converted.stderr
    report = tmp_path / "r.json"
    args = ("-d", "zoo:fashion-mnist-test", "--limit", "600", "--input", "state=0", "--runs", "5", "--report", report)
    result = run_cli("validate", onnx, "-r", "zoo:fashion-gru", "--batch", "8", *args)
    assert result.code == 0, result.stdout + result.stderr
    data = json.loads(report.read_text())
    assert data["accuracy"]["artifact"] > 80  # a trained model (~87% on all 10k test images)
    assert [f["cosine_min"] > 0.999 for f in data["fidelity"]] == [True, True]  # logits and the new state
    missing = run_cli("validate", onnx, "-r", "zoo:fashion-gru", "-d", "zoo:fashion-mnist-test", "--limit", "20")
    assert missing.code == 1 and "state" in missing.stderr and "Traceback" not in missing.stderr


def test_a_torchscript_int_argument_is_given_as_a_constant(tmp_path):
    import torch

    class Head(torch.nn.Module):
        def forward(self, x: torch.Tensor, k: int) -> torch.Tensor:
            return x[:, :k] * 2

    script = tmp_path / "head.pt"
    torch.jit.script(Head()).save(str(script))
    onnx = tmp_path / "head.onnx"
    inputs = ("--input", "x:1x8:float32", "--input", "k=3:int64")
    assert run_cli("convert", script, "--to", "onnx", "-o", onnx, *inputs).code == 0
    result = run_cli("validate", onnx, "-r", script, *inputs, "--runs", "3", "--report", tmp_path / "r.json")
    assert result.code == 0, result.stdout + result.stderr
    fidelity = json.loads((tmp_path / "r.json").read_text())["fidelity"][0]
    assert fidelity["cosine_min"] == pytest.approx(1.0)


def test_nonfinite_validation_data_is_refused_or_by_option_counted_in_the_report(tmp_path, fashion_onnx):
    images = np.random.default_rng(0).random((16, 1, 28, 28), dtype=np.float32)
    images[3, 0, 0, :2] = np.nan
    np.savez(tmp_path / "nan.npz", image=images)
    refused = run_cli("validate", fashion_onnx["int8"], "-r", fashion_onnx["fp32"], "-d", tmp_path / "nan.npz", "--runs", "3")
    assert refused.code == 1 and "2 non-finite" in refused.stderr and "--nonfinite warn" in refused.stderr
    report = tmp_path / "r.json"
    args = ("validate", fashion_onnx["int8"], "-r", fashion_onnx["fp32"], "-d", tmp_path / "nan.npz", "--runs", "3", "--report", report)
    warned = run_cli("--nonfinite", "warn", *args)
    data = json.loads(report.read_text())
    assert data["data"]["nonfinite"] == "warn" and data["data"]["nonfinite_values"] == 2, warned.stderr
    assert any("2 non-finite" in w for w in data["warnings"])
