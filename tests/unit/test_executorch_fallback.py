"""The delegate split of a .pte: an op XNNPACK does not take runs on ExecuTorch's own kernels, and the
provenance, `edgekit info` and the --max-fallback gate all say so."""

from __future__ import annotations

import pytest

from tests.conftest import INPUTS

torch = pytest.importorskip("torch")
pytest.importorskip("executorch", reason="pip install edgekit[executorch]")


class WithArgmax(torch.nn.Module):
    """The trained FashionCNN, also returning its top-1 class: argmax is not an XNNPACK op."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, image):
        logits = self.net(image)
        return logits, torch.argmax(logits, dim=1)


def fashion_with_argmax():
    from edgekit.loaders.torch import load_torch
    from edgekit.zoo.names import zoo_model

    return WithArgmax(load_torch(zoo_model("zoo:fashion-cnn")[0])[0]).eval()


def test_an_op_outside_the_delegate_is_counted(tmp_path):
    from edgekit.backends.executorch.describe import executorch_summary
    from edgekit.converters import ConvertOptions
    from edgekit.converters.pipeline import convert
    from edgekit.loaders import ModelSource
    from edgekit.validate.gate import Thresholds, check_row, failures
    from edgekit.validate.validation import summary_row

    source = ModelSource(f"{__name__}:fashion_with_argmax", "torch-factory")
    artifact = convert(source, "executorch", tmp_path / "argmax.pte", ConvertOptions("fp32", INPUTS))
    fallback = artifact.meta["provenance"]["fallback"]
    assert fallback["not_delegated_ops"] == {"aten_argmax_default": 1}, fallback
    assert 0 < fallback["percent"] < 20 and fallback["delegated_ops"]["aten_convolution_default"] == 3
    delegate = executorch_summary(artifact.path)["delegate"]  # read back from the .pte's execution plan
    assert [op.split(".")[0] for op in delegate["ops_on_cpu"]] == ["aten::argmax"], delegate
    row = summary_row({"artifact": artifact.to_dict(), "fidelity": []})
    assert [f.metric for f in failures(check_row(row, Thresholds(max_fallback=1)))] == ["fallback"]
