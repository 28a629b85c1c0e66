"""Nothing silent: strict JSON reports, non-finite data, --input applied or refused, .pt2 exports as users make them."""

from __future__ import annotations

import json
import logging
import math

import numpy as np
import pytest

from edgekit.artifact import TensorSpec
from edgekit.calibration import load_samples
from edgekit.errors import EdgekitError, InputMismatchError, ModelLoadError
from edgekit.report.schema import write_json
from edgekit.targets.base import apply_given_inputs

SPEC = [TensorSpec("image", ("batch", 1, 4, 4), "float32")]


def test_reports_are_strict_json_with_a_count_of_non_finite_values(tmp_path):
    path = tmp_path / "r.json"
    write_json({"fidelity": {"snr_db": math.inf, "cosine": [np.float32("nan"), 0.5]}, "warnings": []}, path)
    text = path.read_text()
    assert ": NaN" not in text and "Infinity," not in text
    report = json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c}"))
    assert report["fidelity"] == {"snr_db": None, "cosine": [None, 0.5]}
    assert report["non_finite_values"] == 2 and "2 non-finite" in report["warnings"][0]


def test_non_finite_data_is_an_error_or_by_option_a_warning(tmp_path, monkeypatch, caplog):
    data = np.zeros((4, 1, 4, 4), np.float32)
    data[1, 0, 0, 0] = np.nan
    np.savez(tmp_path / "d.npz", image=data)
    with pytest.raises(InputMismatchError, match="1 non-finite"):
        load_samples(str(tmp_path / "d.npz"), specs=SPEC)
    monkeypatch.setenv("EDGEKIT_NONFINITE", "warn")
    caplog.set_level(logging.WARNING, logger="edgekit")  # an earlier in-process CLI call may have quieted edgekit's logger
    warned = load_samples(str(tmp_path / "d.npz"), specs=SPEC)
    assert len(warned) == 4 and warned.provenance["nonfinite_values"] == 1  # counted in the report's data section
    assert "non-finite" in caplog.text


def test_a_data_key_matching_no_input_lists_the_models_inputs(tmp_path):
    np.savez(tmp_path / "d.npz", pixels=np.zeros((2, 1, 4, 4), np.float32))
    with pytest.raises(InputMismatchError, match=r"inputs are \['image'\]"):
        load_samples(str(tmp_path / "d.npz"), specs=SPEC)
    np.save(tmp_path / "one.npy", np.zeros((2, 1, 4, 4), np.float32))  # one unnamed array still binds to the one input
    assert list(load_samples(str(tmp_path / "one.npy"), specs=SPEC).arrays) == ["image"]


def test_input_sizes_fill_dynamic_dims_and_unknown_names_are_refused():
    model = [TensorSpec("image", ("batch", 3, "height", "width")), TensorSpec("state", (2, 1, 64))]
    given = [TensorSpec("image", (1, 3, 480, 640))]
    assert apply_given_inputs(model, given)[0].shape == ("batch", 3, 480, 640)
    assert apply_given_inputs(model, given)[1] == model[1]
    with pytest.raises(InputMismatchError, match="model's inputs are"):
        apply_given_inputs(model, [TensorSpec("pixels", (1, 3, 4, 4))])
    with pytest.raises(InputMismatchError, match="contradicts"):
        apply_given_inputs(model, [TensorSpec("state", (2, 1, 32))])


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A small CNN exported as users do: eval mode at a fixed batch of 1, and (by mistake) in training mode."""
    import torch

    def net():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.Flatten())

    folder = tmp_path_factory.mktemp("pt2")
    example = (torch.zeros(1, 1, 8, 8),)
    torch.export.save(torch.export.export(net().eval(), example), folder / "eval.pt2")
    torch.export.save(torch.export.export(net().train(), example), folder / "train.pt2")
    return folder


def test_a_pt2_exported_at_batch_1_converts_at_that_batch(exported, tmp_path):
    import onnxruntime as ort

    from edgekit.conversion import ConvertOptions
    from edgekit.converters.pipeline import convert
    from edgekit.source import open_source

    artifact = convert(open_source(str(exported / "eval.pt2")), "onnx", tmp_path / "m.onnx", ConvertOptions("fp32"))
    assert artifact.inputs[0].shape == (1, 1, 8, 8)
    session = ort.InferenceSession(str(artifact.path))
    assert session.run(None, {session.get_inputs()[0].name: np.ones((1, 1, 8, 8), np.float32)})[0].shape == (1, 144)


def test_a_pt2_exported_in_training_mode_says_how_to_export_it(exported):
    from edgekit.backends.torch.loader import load_torch
    from edgekit.source import open_source

    with pytest.raises(ModelLoadError, match="training mode") as info:
        load_torch(open_source(str(exported / "train.pt2")))
    assert "model.eval()" in info.value.hint


def test_an_error_keeps_its_cause_below_the_line():
    err = EdgekitError("OpenVINO cannot convert the model", "replace the op", cause="Summary:\n-- No conversion rule for: A, B")
    assert err.cause_lines() == ["  Summary:", "  -- No conversion rule for: A, B"]
    assert EdgekitError("x failed: boom", cause="boom").cause_lines() == []


def test_info_counts_weights_held_in_constant_nodes(tmp_path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from edgekit.backends.onnx.loader import onnx_summary

    const = helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(np.ones((4, 3), np.float32)))
    graph = helper.make_graph(
        [const, helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "c.onnx")
    assert onnx_summary(tmp_path / "c.onnx")["parameters"] == 12


def test_names_a_converter_made_up_are_matched_by_position(tmp_path):
    made_up = [TensorSpec("args_0", (1, 1, 4, 4))]  # litert-torch names a .tflite's input args_0
    assert apply_given_inputs(made_up, [TensorSpec("image", ("batch", 1, 4, 4))])[0].name == "args_0"
    np.savez(tmp_path / "d.npz", image=np.zeros((2, 1, 4, 4), np.float32))
    assert list(load_samples(str(tmp_path / "d.npz"), specs=made_up).arrays) == ["args_0"]


def test_a_scalar_input_takes_a_constant_from_input(tmp_path):
    from tests.conftest import run_cli
    from tests.corpus.make_corpus import scalar_input_onnx

    scalar_input_onnx(tmp_path / "sr.onnx")
    np.savez(tmp_path / "audio.npz", audio=np.random.default_rng(0).random((8, 16), dtype=np.float32))
    result = run_cli("validate", tmp_path / "sr.onnx", "-r", tmp_path / "sr.onnx", "-d", tmp_path / "audio.npz", "--input", "sr=16000:int64",
                     "--runs", "3", "--report", tmp_path / "v.json")  # fmt: skip
    assert result.code == 0, result.stderr
    report = json.loads((tmp_path / "v.json").read_text())
    assert report["fidelity"][0]["top1_agreement"] == 100.0
