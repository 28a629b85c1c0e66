import numpy as np
import pytest
import torch

from edgekit.backends.torch.loader import check_forward, load_torch, resolve_input_specs
from edgekit.errors import InputMismatchError, ModelLoadError
from edgekit.source import open_source
from edgekit.zoo.models import FashionCNN
from tests.conftest import INPUTS


@pytest.fixture(scope="module")
def trained(weights_path):
    model = FashionCNN().eval()
    model.load_state_dict(torch.load(weights_path, weights_only=True))
    return model


@pytest.fixture(scope="module")
def example():
    return torch.rand(2, 1, 28, 28, generator=torch.Generator().manual_seed(0))


def _same_outputs(source, trained, example):
    module, _ = load_torch(source)
    with torch.no_grad():
        np.testing.assert_allclose(module(example).numpy(), trained(example).numpy(), rtol=1e-4, atol=1e-5)


def test_factory_with_weights_loads_the_trained_model(weights_path, trained, example):
    _same_outputs(open_source("edgekit.zoo.models:fashion_cnn", str(weights_path)), trained, example)


def test_factory_from_a_file_path(tmp_path, weights_path, trained, example):
    factory = tmp_path / "my_model.py"
    factory.write_text("from edgekit.zoo.models import FashionCNN\n\ndef build():\n    return FashionCNN()\n")
    _same_outputs(open_source(f"{factory}:build", str(weights_path)), trained, example)


def test_torchscript_and_exported_program_and_pickle(tmp_path, trained, example):
    torch.jit.save(torch.jit.trace(trained, example), tmp_path / "m.ts")
    _same_outputs(open_source(str(tmp_path / "m.ts")), trained, example)
    torch.export.save(torch.export.export(trained, (example,)), tmp_path / "m.pt2")
    source = open_source(str(tmp_path / "m.pt2"))
    _same_outputs(source, trained, example)
    assert [s.name for s in load_torch(source)[1]] == ["image"]
    torch.save(trained, tmp_path / "whole.pt")
    _same_outputs(open_source(str(tmp_path / "whole.pt"), allow_pickle=True), trained, example)


def test_missing_factory_and_wrong_weights_are_clear_errors(tmp_path, weights_path):
    with pytest.raises(ModelLoadError, match="'nope' not found"):
        load_torch(open_source("edgekit.zoo.models:nope"))
    with pytest.raises(ModelLoadError, match="cannot import module"):
        load_torch(open_source("edgekit.no_such_module:build"))
    with pytest.raises(ModelLoadError, match="does not fit the model"):
        load_torch(open_source("edgekit.zoo.models:resnet18_shape", str(weights_path)))


def test_input_specs_are_required_when_the_model_does_not_record_them(trained):
    assert resolve_input_specs(trained, None, list(INPUTS)) == list(INPUTS)
    with pytest.raises(InputMismatchError, match="--input image:"):
        resolve_input_specs(trained, None, [])


def test_wrong_input_shape_is_reported_before_export(trained):
    from edgekit.artifact import parse_input_spec

    with pytest.raises(InputMismatchError, match="does not accept inputs image:1x3x28x28"):
        check_forward(trained, [parse_input_spec("image:1x3x28x28")])
