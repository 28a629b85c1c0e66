"""PT2E int8 (backends.torch.pt2e, with litert-torch's quantizer for LiteRT and XNNPACK's for ExecuTorch) on EfficientNet-Lite0
and real photo crops."""

from __future__ import annotations

import pytest

pytest.importorskip("litert_torch")
pytest.importorskip("efficientnet_lite_pytorch")


def default_options(converter):
    """int8 options as the pipeline hands them to `converter` by default (--calib-method auto made concrete)."""
    from edgekit.conversion import CalibrationOptions, ConvertOptions

    return ConvertOptions("int8", (), CalibrationOptions(method=converter.default_calib_method))


def _lite0_prepared(quantizer, crops):
    """EfficientNet-Lite0 exported at batch 1, its symmetric zero pads folded, PT2E-prepared with `quantizer`."""
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    from edgekit.backends.torch.pt2e_patterns import fold_zero_pads
    from edgekit.zoo.models import efficientnet_lite0

    exported = torch.export.export(efficientnet_lite0().eval(), (crops[:1],)).module()
    fold_zero_pads(exported)
    return prepare_pt2e(exported, quantizer)


@pytest.fixture(scope="module")
def lite0_prepared():
    """Prepared with the LiteRT quantizer (default options) and calibrated on 16 real photo crops."""
    import torch

    from edgekit.backends.tflite.from_torch import TorchToTflite
    from edgekit.backends.tflite.quantizer import litert_quantizer
    from edgekit.zoo.photos import photo_crops

    crops = torch.from_numpy(photo_crops(16, seed=0))
    prepared = _lite0_prepared(litert_quantizer(default_options(TorchToTflite))[0], crops)
    with torch.no_grad():
        for i in range(len(crops)):
            prepared(crops[i : i + 1])
    return prepared


def _observer_after(prepared, node):
    (user,) = node.users
    assert user.op == "call_module", f"{node} has no observer of its own"
    return getattr(prepared, user.target)


def test_conv_relu6_output_is_observed_after_the_clamp(lite0_prepared):
    """The stem's conv + ReLU6 range lies in [0, 6]: observed before the clamp it was [-33, 58] (scale 0.72, ~8 levels
    for the 0..6 output) and the LiteRT model agreed with fp32 on 45% of crops."""
    import torch

    clamps = [n for n in lite0_prepared.graph.nodes if n.target == torch.ops.aten.hardtanh.default]
    assert len(clamps) == 33  # stem + expand/depthwise ReLU6 of each block: all fused with their conv
    for clamp in clamps:
        observer = _observer_after(lite0_prepared, clamp)
        assert observer.min_val >= 0 and 3 < observer.max_val <= 6


def test_residual_adds_are_quantized_and_symmetric_pads_folded(lite0_prepared):
    """`x + inputs` adds get observers (they ran float before: DEQUANTIZE, ADD, QUANTIZE); 12 of the 17 ZeroPad2d fold into
    their conv, the 5 one-sided ones (TensorFlow SAME at stride 2) stay."""
    import torch

    adds = [n for n in lite0_prepared.graph.nodes if n.target == torch.ops.aten.add.Tensor]
    assert len(adds) == 9 and all(_observer_after(lite0_prepared, n) is not None for n in adds)
    pads = [n for n in lite0_prepared.graph.nodes if n.target in (torch.ops.aten.pad.default, torch.ops.aten.constant_pad_nd.default)]
    assert len(pads) == 5 and all(list(p.args[1]) in ([0, 1, 0, 1], [1, 2, 1, 2]) for p in pads)


def test_fitted_weight_rounding_brings_the_quantized_model_close_to_fp32(lite0_prepared):
    """The PT2E model litert-torch lowers, on 60 other crops: round-to-nearest weights agreed on ~87% / cosine 0.987
    (the LiteRT model before the quantizer fixes: 45% / 0.74); fitted codes + bias corrections ~95% / 0.997."""
    import copy

    import torch
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e

    from edgekit.backends.torch.pt2e_weights import correct_biases, fit_weight_rounding, float_output_means
    from edgekit.zoo.models import efficientnet_lite0
    from edgekit.zoo.photos import photo_crops

    calibration = torch.from_numpy(photo_crops(16, seed=0))
    test = torch.from_numpy(photo_crops(60, seed=1))
    converted = convert_pt2e(copy.deepcopy(lite0_prepared), fold_quantize=False)
    batches = [(calibration[i : i + 1],) for i in range(len(calibration))]
    means = float_output_means(converted, batches)
    done = fit_weight_rounding(converted, batches)
    assert done["layers"] == 50 and done["output_error_vs_round_to_nearest"] < 0.5
    assert correct_biases(converted, batches, means)["layers"] == 50
    with torch.no_grad():
        reference = efficientnet_lite0()(test)
        out = torch.cat([converted(test[i : i + 1]) for i in range(len(test))])
    agreement = (out.argmax(1) == reference.argmax(1)).float().mean().item() * 100
    assert agreement >= 90.0 and torch.nn.functional.cosine_similarity(out, reference).mean() >= 0.994


def test_executorch_xnnpack_quantizer_observes_relu6_after_the_clamp():
    """The stock XNNPACKQuantizer shares a ReLU6's observer with the conv before it (pre-clamp ranges; the .pte agreed
    with fp32 on ~40% of crops); backends.torch.pt2e's pattern observes the clamp's output and nothing between."""
    pytest.importorskip("executorch")
    import torch

    from edgekit.backends.executorch.convert import TorchToExecutorch
    from edgekit.backends.executorch.quantizer import xnnpack_quantizer
    from edgekit.zoo.photos import photo_crops

    prepared = _lite0_prepared(xnnpack_quantizer(default_options(TorchToExecutorch))[0], torch.from_numpy(photo_crops(1, seed=0)))
    clamps = [n for n in prepared.graph.nodes if n.target == torch.ops.aten.hardtanh.default]
    assert len(clamps) == 33
    for clamp in clamps:
        assert clamp.args[0].target == torch.ops.aten.conv2d.default, clamp.args[0]  # no observer between conv and clamp
        assert _observer_after(prepared, clamp) is not None
