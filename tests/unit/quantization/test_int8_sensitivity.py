"""Sensitivity-driven int8 (the default) and accuracy-aware int8 on ONNX Runtime, on real weights and data."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.backends.onnx.float_activations import activation_pairs, activation_sensitivity, quantized_range, unrounded
from edgekit.calibration import load_samples
from edgekit.calibration.samples import Samples
from edgekit.conversion import CalibrationOptions, ConvertOptions
from edgekit.converters.pipeline import convert
from edgekit.errors import EdgekitError
from edgekit.metrics.compare import accuracy_percent, compare_output, run_batches
from edgekit.provenance import read_provenance
from edgekit.quantization.accuracy import ACTIVATION
from edgekit.quantization.sensitivity import LayerSensitivity, fake_quantize, outliers
from edgekit.source import open_source
from edgekit.targets import make_runner
from tests.conftest import INPUTS

pytest.importorskip("onnxruntime")


def _accuracy(path, samples) -> float:
    return accuracy_percent(_outputs(path, samples), samples.labels)


def _outputs(path, samples):
    return run_batches(make_runner(open_source(str(path)), inputs=list(INPUTS)), samples, 500)[0]


def test_fake_quantize_is_per_channel_and_symmetric():
    weights = np.array([[1.0, -0.5, 0.25], [100.0, 3.0, -100.0]], np.float32)
    quantized = fake_quantize(weights, axis=0)
    assert quantized[0, 0] == 1.0 and quantized[1, 2] == -100.0  # each row keeps its own max exactly
    assert abs(quantized[1, 1] - 3.0) <= 100 / 127 / 2 + 1e-6  # rounding within half a step of that row


def test_outlier_rule_takes_only_layers_far_above_the_median():
    ranked = [LayerSensitivity(f"l{i}", "Conv", 10, loss) for i, loss in enumerate([5e-2, 3e-3, 9e-4, 2e-4, 1e-4, 1e-4, 1e-4])]
    assert [s.name for s in outliers(ranked)] == ["l0", "l1"]  # > 10x the median 1e-4, 9e-4 is not
    flat = [LayerSensitivity(f"l{i}", "Conv", 10, 2e-5) for i in range(5)]
    assert outliers(flat) == []  # a model with no outlier keeps every layer in int8
    tiny = [LayerSensitivity("a", "Conv", 1, 5e-5)] + flat
    assert outliers(tiny) == []  # 2.5x median and under the floor


@pytest.fixture(scope="module")
def test2k(small_test_npz):
    return load_samples(str(small_test_npz), specs=list(INPUTS))


def test_default_int8_records_its_sensitivity_and_keeps_fashion_accuracy(fashion_onnx, test2k):
    quant = read_provenance(fashion_onnx["int8"])["quantization"]
    sensitivity = quant["sensitivity"]
    assert sensitivity["layers_measured"] == 5 and len(sensitivity["most_sensitive"]) == 5
    assert quant["excluded"] == [k["name"] for k in sensitivity["kept_in_float"]]
    assert _accuracy(fashion_onnx["fp32"], test2k) - _accuracy(fashion_onnx["int8"], test2k) <= 0.5


def test_an_activation_returned_to_float_keeps_its_clamp_and_loses_only_its_rounding(fashion_onnx, demo_data, test2k):
    """backends.onnx.float_activations on the real FashionCNN int8: the ranking covers the activations both models
    compute, and unrounding all of them leaves no activation Q/DQ, each replaced by a Clip to its own int8 range,
    with outputs closer to fp32 than int8's."""
    import onnx

    int8, fp32 = onnx.load(str(fashion_onnx["int8"])), onnx.load(str(fashion_onnx["fp32"]))
    pairs = activation_pairs(int8)
    assert len(pairs) >= 5
    calibration = load_samples(str(demo_data[1]), specs=list(INPUTS))
    probe = Samples({name: array[:16] for name, array in calibration.arrays.items()})
    ranked = activation_sensitivity(fp32, int8, probe)
    assert ranked and all(s.op == ACTIVATION for s in ranked) and all(s.loss >= 0 for s in ranked)
    assert [s.loss for s in ranked] == sorted((s.loss for s in ranked), reverse=True) and ranked[0].loss > 0
    names = [q.input[0] for q, _ in pairs]
    float_all = unrounded(int8, names)
    assert activation_pairs(float_all) == [] and len(activation_pairs(unrounded(int8, []))) == len(pairs)
    clips = {n.input[0]: n for n in float_all.graph.node if n.op_type == "Clip" and n.name.endswith("_unrounded")}
    inits = {i.name: float(onnx.numpy_helper.to_array(i)) for i in float_all.graph.initializer if not i.dims}
    for quantize, _ in pairs:
        low, high = quantized_range(int8.graph, quantize)
        assert (inits[clips[quantize.input[0]].input[1]], inits[clips[quantize.input[0]].input[2]]) == (low, high)
    reference = _outputs(fashion_onnx["fp32"], test2k)
    cosines = {}
    for name, model in (("int8", int8), ("float activations", float_all)):
        path = fashion_onnx["int8"].with_name(f"fashion.{name}.onnx")
        onnx.save(model, str(path))
        cosines[name] = compare_output("logits", reference, _outputs(path, test2k)).cosine_mean
    assert cosines["float activations"] > cosines["int8"]


def test_accuracy_aware_int8_returns_layers_to_float_until_the_drop_fits(tmp_path, fashion_onnx, demo_data, small_test_npz, test2k):
    garbage = tmp_path / "garbage.npz"  # ranges 100x too small: plain int8 loses many points
    with np.load(demo_data[1]) as npz:
        np.savez(garbage, image=npz["image"][:100] * 0.01)
    calib = CalibrationOptions(str(garbage), 100)
    source = open_source(str(fashion_onnx["fp32"]))
    plain = convert(source, "onnx", tmp_path / "plain.onnx", ConvertOptions("int8", (), calib, keep_sensitive=False))
    options = ConvertOptions("int8", (), calib, validation_data=str(small_test_npz), validation_samples=500, max_drop=1.0)
    controlled = convert(source, "onnx", tmp_path / "ac.onnx", options)
    control = controlled.meta["provenance"]["quantization"]["accuracy_control"]
    reference = _accuracy(fashion_onnx["fp32"], test2k)
    assert reference - _accuracy(plain.path, test2k) > 3.0  # plain int8 misses the limit
    assert control["reverted_to_float"] and control["final"]["drop_points"] <= 1.0
    first, *tried = control["steps"]  # each step is kept only where it brought the outputs closer to fp32
    assert first["kept_in_float"] is None and all((step["cosine_gain"] > 1e-5) == step["kept"] for step in tried)
    assert tried[-1]["kept"] and control["final"]["cosine"] == tried[-1]["cosine"]  # the artifact is the last step kept
    kept = sorted(step["kept_in_float"] for step in tried if step["kept"])
    assert kept == sorted([*control["reverted_to_float"], *control["activations_in_float"]])
    assert reference - _accuracy(controlled.path, test2k) <= 1.5  # held on data it was not validated on (2k vs 500)
    _assert_coverage_names_the_reverted_layers(controlled.path, control["reverted_to_float"])


def _assert_coverage_names_the_reverted_layers(path, reverted: list[str]) -> None:
    """ONNX Runtime's int8 coverage of an accuracy-controlled model: the layers it returned to float, and no other,
    are float, with their MACs out of the share."""
    import onnx

    from edgekit.backends.onnx.macs import layer_macs

    layers = {x["node"]: x["macs"] for x in layer_macs(onnx.load(str(path)))}
    runner = make_runner(open_source(str(path)), "onnxruntime:cpu", 1)
    runner.load()
    coverage = runner.int8_coverage()
    floats = sorted(layers[name] for name in reverted if name in layers)
    assert floats and sorted(x["macs"] for x in coverage["float_layers"]) == floats
    assert coverage["macs_share"] == pytest.approx(1 - sum(floats) / sum(layers.values()), abs=1e-9)


def test_min_agreement_without_labels_and_its_limits(tmp_path, fashion_onnx, demo_data):
    unlabelled = tmp_path / "unlabelled.npz"
    with np.load(demo_data[0]) as npz:
        np.savez(unlabelled, image=npz["image"][:300])
    calib = CalibrationOptions(str(demo_data[1]), 100)
    source = open_source(str(fashion_onnx["fp32"]))
    options = ConvertOptions("int8", (), calib, validation_data=str(unlabelled), min_agreement=98.0)
    control = convert(source, "onnx", tmp_path / "a.onnx", options).meta["provenance"]["quantization"]["accuracy_control"]
    assert control["final"]["agreement"] >= 98.0 and control["final"]["accuracy"] is None
    for wrong, message in (({"min_agreement": 100.1}, "is not a percentage"), ({"min_agreement": 0.0}, "is not a percentage")):
        with pytest.raises(EdgekitError, match=message):  # refused before any work
            convert(source, "onnx", tmp_path / "b.onnx", ConvertOptions("int8", (), calib, validation_data=str(unlabelled), **wrong))
    with pytest.raises(EdgekitError, match="is negative"):
        convert(source, "onnx", tmp_path / "b.onnx", ConvertOptions("int8", (), calib, validation_data=str(demo_data[0]), max_drop=-1.0))
    garbage = tmp_path / "garbage.npz"  # ranges 100x too small: no 12 steps bring int8 to full agreement
    with np.load(demo_data[1]) as npz:
        np.savez(garbage, image=npz["image"][:100] * 0.01)
    wrong_ranges = CalibrationOptions(str(garbage), 100)
    with pytest.raises(EdgekitError, match="misses the limit") as missed:
        convert(
            source,
            "onnx",
            tmp_path / "b.onnx",
            ConvertOptions("int8", (), wrong_ranges, validation_data=str(unlabelled), min_agreement=100.0),
        )
    assert "on 300 validation samples: agreement" in missed.value.message and "(all int8: agreement" in missed.value.message
    steps = missed.value.cause.splitlines()  # what each layer returned to float bought
    assert steps[0].startswith("all int8: agreement") and len(steps) > 1 and all(" in float (" in line for line in steps[1:])
    assert "layers and activations went back to float" in missed.value.hint and "cosine" in missed.value.message
    with pytest.raises(EdgekitError, match="one limit"):  # NNCF's accuracy control (x86-avx512 keeps NNCF for a CNN)
        both = ConvertOptions(
            "int8",
            (),
            calib,
            for_target="x86-avx512",
            validation_data=str(demo_data[0]),
            validation_samples=100,
            min_agreement=98.0,
            max_drop=1.0,
        )
        convert(source, "openvino", tmp_path / "c.xml", both)
    assert not (tmp_path / "b.onnx").exists() and not (tmp_path / "c.xml").exists()  # nothing half-written


def test_min_cosine_holds_a_model_without_classes_to_its_fp32_outputs(tmp_path, fashion_onnx, demo_data):
    """--min-cosine: the limit for embeddings and detection maps, where top-1 means nothing. Through the real CLI, without
    labels: ranges 100x too small put plain int8 at cosine ~0.94; the layers returned to float bring it over 0.99; the
    recipe it emits carries the limit, and bad limits are refused in one line before any work."""
    from edgekit.recipe.schema import load_recipe
    from tests.conftest import assert_clean_error, run_cli

    garbage, unlabelled = tmp_path / "garbage.npz", tmp_path / "unlabelled.npz"
    with np.load(demo_data[1]) as npz:
        np.savez(garbage, image=npz["image"][:200] * 0.01)
    with np.load(demo_data[0]) as npz:
        np.savez(unlabelled, image=npz["image"][:300])
    args = ["convert", fashion_onnx["fp32"], "--to", "onnx", "-p", "int8", "--calib", garbage, "--val", unlabelled]
    result = run_cli(*args, "--min-cosine", "0.99", "-o", tmp_path / "c.onnx", "--emit-recipe", tmp_path / "r.yaml")
    assert result.code == 0, result.stderr
    assert "accuracy control (cosine >= 0.99, scored on onnxruntime:cpu)" in result.stdout
    control = read_provenance(tmp_path / "c.onnx")["quantization"]["accuracy_control"]
    first, *steps = control["steps"]
    assert control["min_cosine"] == 0.99 and control["min_agreement"] is None and control["final"]["accuracy"] is None
    assert first["cosine"] < 0.99 <= control["final"]["cosine"] and control["reverted_to_float"]
    samples = load_samples(str(unlabelled), specs=list(INPUTS))
    fidelity = compare_output("logits", _outputs(fashion_onnx["fp32"], samples), _outputs(tmp_path / "c.onnx", samples))
    assert fidelity.cosine_mean >= 0.99  # the artifact as written, run again
    assert load_recipe(tmp_path / "r.yaml").convert.min_cosine == 0.99
    for wrong in ("1.5", "0"):
        assert_clean_error(run_cli(*args, "--min-cosine", wrong, "-o", tmp_path / "w.onnx"), f"--min-cosine {wrong}", "--min-cosine 0.999")
    assert not (tmp_path / "w.onnx").exists()


def test_min_agreement_on_openvino(tmp_path, fashion_onnx, demo_data):
    """OpenVINO accuracy control on agreement with the fp32 model (no labels), on the host's route (ONNX Runtime's loop
    scored on OpenVINO for x86-amx/vnni/avx2, NNCF's elsewhere)."""
    pytest.importorskip("openvino")
    unlabelled = tmp_path / "unlabelled.npz"
    with np.load(demo_data[0]) as npz:
        np.savez(unlabelled, image=npz["image"][:300])
    calib = CalibrationOptions(str(demo_data[1]), 100)
    options = ConvertOptions("int8", (), calib, validation_data=str(unlabelled), min_agreement=99.0)
    result = convert(open_source(str(fashion_onnx["fp32"])), "openvino", tmp_path / "a.xml", options)
    control = result.meta["provenance"]["quantization"]["accuracy_control"]
    assert control["min_agreement"] == 99.0 and control["validation_samples"] == 300
    samples = load_samples(str(unlabelled), specs=list(INPUTS))
    reference = run_batches(make_runner(open_source(str(fashion_onnx["fp32"])), inputs=list(INPUTS)), samples, 100)[0]
    int8 = run_batches(make_runner(open_source(str(result.path))), samples, 100)[0]
    assert compare_output("logits", reference, int8).top1_agreement >= 99.0
