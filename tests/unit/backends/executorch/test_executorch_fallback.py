"""The delegate split of a .pte: an op XNNPACK does not take runs on ExecuTorch's own kernels, and the
provenance, `edgekit info` and the --max-fallback gate all say so; a layer int8 keeps in float stays inside it."""

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
    from edgekit.backends.torch.loader import load_torch
    from edgekit.source import zoo_model

    return WithArgmax(load_torch(zoo_model("zoo:fashion-cnn")[0])[0]).eval()


def test_an_op_outside_the_delegate_is_counted(tmp_path):
    from edgekit.backends.executorch.describe import executorch_summary
    from edgekit.conversion import ConvertOptions
    from edgekit.converters.pipeline import convert
    from edgekit.metrics.gate import Thresholds, check_row, failures
    from edgekit.source import ModelSource
    from edgekit.validation.validate import summary_row

    source = ModelSource(f"{__name__}:fashion_with_argmax", "torch-factory")
    artifact = convert(source, "executorch", tmp_path / "argmax.pte", ConvertOptions("fp32", INPUTS))
    fallback = artifact.meta["provenance"]["fallback"]
    assert fallback["not_delegated_ops"] == {"aten_argmax_default": 1}, fallback
    assert 0 < fallback["percent"] < 20 and fallback["delegated_ops"]["aten_convolution_default"] == 3
    delegate = executorch_summary(artifact.path)["delegate"]  # read back from the .pte's execution plan
    assert [op.split(".")[0] for op in delegate["ops_on_cpu"]] == ["aten::argmax"], delegate
    row = summary_row({"artifact": artifact.to_dict(), "fidelity": []})
    assert [f.metric for f in failures(check_row(row, Thresholds(max_fallback=1)))] == ["fallback"]


def _float_convs(graph_module) -> list[bool]:
    """For each convolution of a PT2E-quantized graph, in order: whether its weight is float (no dequantize before it)."""
    convs = [n for n in graph_module.graph.nodes if n.op == "call_function" and "conv" in str(n.target)]
    return ["dequantize" not in str(conv.args[1].target) for conv in convs]


def test_a_middle_layer_kept_in_float_runs_in_float_inside_the_delegate(tmp_path, demo_data):
    """FashionCNN's middle conv kept float goes float with the conv that computes its input (pt2e_patterns._float_producers:
    XNNPACK takes no quantized conv whose output is float, "Missing out variants: dequantize_per_channel"); the .pte
    lowers whole into XNNPACK and agrees with the fp32 model on real Fashion-MNIST images."""
    import numpy as np

    from edgekit.backends.executorch.convert import lower_to_xnnpack
    from edgekit.backends.executorch.quantizer import xnnpack_quantizer
    from edgekit.backends.torch.loader import example_tensors
    from edgekit.backends.torch.pt2e import first_outputs, int8
    from edgekit.calibration import load_samples
    from edgekit.conversion import CalibrationOptions, ConvertOptions, load_for_conversion
    from edgekit.quantization.accuracy import on_target
    from edgekit.source import open_source

    module, specs = load_for_conversion(open_source("zoo:fashion-cnn"), [])
    module = module.eval()
    calibration = load_samples(str(demo_data[1]), specs=specs, limit=50)
    options = ConvertOptions("int8", (), CalibrationOptions(str(demo_data[1]), 50, "histogram"))
    args = example_tensors(specs, 1)

    def quantize(keep):
        return int8(
            module, args, lambda k: xnnpack_quantizer(options, k), calibration, specs, fold_quantize=True, search=False, keep_float=keep
        )

    assert _float_convs(quantize(())[0]) == [False, False, False]
    converted = quantize(("features.2.0",))[0]
    assert _float_convs(converted) == [True, True, False]  # the middle conv, and the first that computes its input
    with torch.no_grad():
        edge, split = lower_to_xnnpack(converted, args)
    assert split["percent"] == 0.0  # nothing left outside the delegate
    pte = tmp_path / "middle_float.pte"
    pte.write_bytes(edge.to_executorch().buffer)
    images = load_samples(str(demo_data[0]), specs=specs, limit=300)
    batches = [(torch.from_numpy(feeds[specs[0].name]),) for feeds in images.batches(64)]
    reference = np.concatenate(first_outputs(module, batches)).argmax(1)
    (logits,) = on_target(None)(pte, images).values()
    assert (logits.argmax(1) == reference).mean() >= 0.98


class TwoBranches(torch.nn.Module):
    """stem -> (left conv + right conv) -> head: an add joins two branches before the layer kept in float."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.left = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.right = torch.nn.Conv2d(8, 8, 1)
        self.head = torch.nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x):
        y = torch.relu(self.stem(x))
        return self.head(self.left(y) + self.right(y))


def test_a_kept_layer_after_an_add_takes_both_branches_to_float_and_no_further():
    """The head kept in float: the add that feeds it and both convs that feed the add go float (each is read only by
    float ops); the stem, which they read, stays int8. The graph lowers whole into XNNPACK."""
    from edgekit.backends.executorch.convert import lower_to_xnnpack
    from edgekit.backends.executorch.quantizer import xnnpack_quantizer
    from edgekit.backends.torch.pt2e import int8_module
    from edgekit.conversion import CalibrationOptions, ConvertOptions

    module = TwoBranches().eval()
    options = ConvertOptions("int8", (), CalibrationOptions(method="minmax"))
    args = (torch.rand(1, 3, 16, 16),)
    batches = [(torch.rand(1, 3, 16, 16),) for _ in range(8)]
    converted = int8_module(module, args, lambda keep: xnnpack_quantizer(options, keep), batches, ("head",), fold_quantize=True)[0]
    assert _float_convs(converted) == [False, True, True, True]  # stem int8; left, right and head float
    with torch.no_grad():
        split = lower_to_xnnpack(converted, args)[1]
    assert split["percent"] == 0.0
