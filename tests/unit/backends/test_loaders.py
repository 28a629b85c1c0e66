import pytest

from edgekit.backends.onnx.loader import onnx_artifact, onnx_summary, read_onnx
from edgekit.errors import ModelLoadError
from edgekit.source import open_source


def test_open_source_classifies_factories_and_files(tmp_path, weights_path, fashion_onnx):
    assert open_source("edgekit.zoo.models:fashion_cnn", str(weights_path)).format == "torch-factory"
    assert open_source(str(fashion_onnx["fp32"])).format == "onnx"


def test_missing_file_is_a_clear_error():
    with pytest.raises(ModelLoadError, match="not found"):
        open_source("no/such/model.onnx")


def test_text_file_named_onnx_is_rejected(tmp_path):
    fake = tmp_path / "model.onnx"
    fake.write_text("this is not a model\n" * 20)
    with pytest.raises(ModelLoadError, match="not a valid ONNX file"):
        read_onnx(fake)


def test_truncated_onnx_is_rejected(tmp_path, fashion_onnx):
    data = fashion_onnx["fp32"].read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: len(data) // 3])
    with pytest.raises(ModelLoadError, match="not a valid ONNX file"):
        read_onnx(cut)


def test_state_dict_needs_a_factory_and_pickle_needs_consent(tmp_path, weights_path):
    with pytest.raises(ModelLoadError, match="allow-pickle"):
        open_source(str(weights_path))
    assert open_source(str(weights_path), allow_pickle=True).format == "torch-pickle"


def test_torch_file_that_is_not_a_zip_is_rejected(tmp_path):
    junk = tmp_path / "model.pt"
    junk.write_bytes(b"\x00" * 100)
    with pytest.raises(ModelLoadError, match="not a PyTorch file"):
        open_source(str(junk))


def test_onnx_signature_and_histogram(fashion_onnx):
    artifact = onnx_artifact(fashion_onnx["int8"])
    assert artifact.precision == "int8"
    assert [(s.name, s.shape[1:], s.dtype) for s in artifact.inputs] == [("image", (1, 28, 28), "float32")]
    assert not isinstance(artifact.inputs[0].shape[0], int)  # dynamic batch
    summary = onnx_summary(fashion_onnx["fp32"])
    assert summary["ops"]["Conv"] == 3 and summary["parameters"] > 100_000
