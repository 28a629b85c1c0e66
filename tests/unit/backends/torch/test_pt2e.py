"""PT2E int8 (backends.torch.pt2e) on the trained FashionCNN and real Fashion-MNIST: empirical bias correction, and
--per-tensor / --calib-method on the PT2E paths (PyTorch -> LiteRT, PyTorch -> ExecuTorch) and Keras -> TFLite:
applied where the backend has them, recorded as applied, refused in one line where it has not."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from edgekit.conversion import SUFFIXES, CalibrationOptions, ConvertOptions
from edgekit.converters.pipeline import convert
from edgekit.errors import EdgekitError
from edgekit.source import open_source
from tests.conftest import INPUTS

pytest.importorskip("torch")


def _weight_scales(tflite_path) -> list[int]:
    """The number of scales of each int8 conv/dense weight of a .tflite."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(str(tflite_path))
    counts = []
    for t in interpreter.get_tensor_details():
        q = t["quantization_parameters"]
        if t["dtype"] == np.int8 and len(t["shape"]) in (2, 4) and t["shape"][0] > 1 and len(q["scales"]):
            counts.append(len(q["scales"]))
    return counts


@pytest.mark.parametrize("to", ["tflite", "executorch"])
def test_pt2e_calibration_method_outside_its_observers_is_refused_before_any_work(tmp_path, demo_data, to):
    pytest.importorskip({"tflite": "litert_torch", "executorch": "executorch"}[to])
    method = CalibrationOptions(str(demo_data[1]), 50, "entropy")
    with pytest.raises(EdgekitError, match=f"--calib-method entropy is not available in {to}'s int8") as info:
        convert(open_source("zoo:fashion-cnn"), to, tmp_path / f"m.{to}", ConvertOptions("int8", INPUTS, method))
    assert "minmax or histogram" in info.value.hint and not list(tmp_path.iterdir())


def test_torch_to_tflite_per_tensor_weights_and_the_observer_used_are_recorded(tmp_path, demo_data):
    pytest.importorskip("litert_torch")
    from edgekit.backends.tflite.from_torch import TorchToTflite
    from edgekit.backends.torch.pt2e import OBSERVERS

    assert set(TorchToTflite.calib_methods) == set(OBSERVERS)
    calibration = CalibrationOptions(str(demo_data[1]), 100)
    per_tensor = convert(open_source("zoo:fashion-cnn"), "tflite", tmp_path / "t.tflite", ConvertOptions("int8", INPUTS, calibration, True))
    scheme = per_tensor.meta["provenance"]["tflite"]["quantization"]
    # --calib-method auto (the default) ran as PT2E's default_calib_method, and the provenance names what ran
    assert "per-tensor" in scheme["weights"] and "HistogramObserver" in scheme["activations"]
    assert per_tensor.meta["provenance"]["calibration"]["method"] == "histogram"
    assert scheme["weight_rounding"]["layers"] == 5  # the fit runs on per-tensor weights too
    assert _weight_scales(per_tensor.path) and set(_weight_scales(per_tensor.path)) == {1}
    with pytest.raises(EdgekitError, match="--per-tensor is not available for TFLite int8-dynamic from PyTorch"):
        convert(open_source("zoo:fashion-cnn"), "tflite", tmp_path / "d.tflite", ConvertOptions("int8-dynamic", INPUTS, per_tensor=True))


def test_executorch_per_tensor_is_applied_and_recorded(tmp_path, demo_data):
    pytest.importorskip("executorch")
    from edgekit.backends.executorch.convert import TorchToExecutorch
    from edgekit.backends.torch.pt2e import OBSERVERS

    assert set(TorchToExecutorch.calib_methods) == set(OBSERVERS)
    calibration = CalibrationOptions(str(demo_data[1]), 100, "minmax")
    artifact = convert(open_source("zoo:fashion-cnn"), "executorch", tmp_path / "t.pte", ConvertOptions("int8", INPUTS, calibration, True))
    scheme = artifact.meta["provenance"]["executorch"]["quantization"]
    assert "per-tensor" in scheme["weights"] and "MinMaxObserver" in scheme["activations"]
    assert scheme["weight_rounding"]["layers"] == 5 and artifact.meta["provenance"]["fallback"]["percent"] == 0.0


def test_keras_to_tflite_per_tensor_is_applied_and_calibration_method_refused(tmp_path, demo_data):
    pytest.importorskip("tensorflow")
    from edgekit.zoo.fashion_mnist import KERAS_MODEL

    keras = open_source(str(KERAS_MODEL))
    with np.load(demo_data[1]) as npz:  # the Keras model takes NHWC
        np.savez(tmp_path / "nhwc.npz", image=npz["image"][:100].transpose(0, 2, 3, 1))
    calibration = CalibrationOptions(str(tmp_path / "nhwc.npz"), 100)
    per_tensor = convert(keras, "tflite", tmp_path / "k.tflite", ConvertOptions("int8", (), calibration, True))
    assert per_tensor.meta["provenance"]["tflite"]["weights"] == "int8 symmetric, per-tensor"
    assert _weight_scales(per_tensor.path) and set(_weight_scales(per_tensor.path)) == {1}
    with pytest.raises(EdgekitError, match="--calib-method is not applied by tflite's int8 \\(KerasToTflite\\)"):
        convert(
            keras,
            "tflite",
            tmp_path / "p.tflite",
            ConvertOptions("int8", (), CalibrationOptions(str(tmp_path / "nhwc.npz"), 100, "percentile")),
        )


def test_empirical_bias_correction_brings_each_layer_mean_to_the_float_model(demo_data):
    """After the correction, every conv/linear output of the quantized model has the float model's per-channel mean on
    the calibration samples (each layer corrected for the errors of the layers before it)."""
    pytest.importorskip("litert_torch")
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from edgekit.backends.tflite.quantizer import litert_quantizer
    from edgekit.backends.torch import pt2e_weights
    from edgekit.backends.torch.loader import load_torch
    from edgekit.calibration import load_samples
    from edgekit.conversion import CalibrationOptions, ConvertOptions
    from edgekit.source import zoo_model

    model = load_torch(zoo_model("zoo:fashion-cnn")[0])[0].eval()
    batches = [(torch.from_numpy(f["image"]),) for f in itertools.islice(load_samples(str(demo_data[1])).batches(1), 64)]
    prepared = prepare_pt2e(
        torch.export.export(model, batches[0]).module(),
        litert_quantizer(ConvertOptions("int8", (), CalibrationOptions(method="minmax")))[0],
    )
    for tensors in batches:
        prepared(*tensors)
    quantized = convert_pt2e(prepared, fold_quantize=False)
    float_means = pt2e_weights.float_output_means(quantized, batches)  # the fp32 model: quantize/dequantize as identity
    pt2e_weights.fit_weight_rounding(quantized, batches)  # moves the means (rounding error, then its own mean correction)
    assert pt2e_weights.correct_biases(quantized, batches, float_means)["layers"] == 5
    now = {}
    pt2e_weights._walk(
        quantized,
        batches[: pt2e_weights.SAMPLES_FOR_MEANS],
        set(float_means),
        lambda n, outs: now.__setitem__(n, pt2e_weights._channel_mean(n, outs)),
        True,
    )
    assert len(now) == 5
    for node, mean in now.items():
        assert torch.allclose(mean, float_means[node], atol=1e-4 * (1 + float(float_means[node].abs().max()))), node


def test_pt2e_quantize_leaves_the_source_module_as_it_was(demo_data):
    """quantize() works on a copy: the export shares parameters with the module (the Linear's bias, which the bias
    correction edits in place), and the sensitivity search and accuracy control quantize the same module again."""
    import torch

    from edgekit.backends.tflite.quantizer import litert_quantizer
    from edgekit.backends.torch.pt2e import calibration_batches, quantize
    from edgekit.calibration import load_samples
    from edgekit.conversion import load_for_conversion

    pytest.importorskip("litert_torch")
    module, specs = load_for_conversion(open_source("zoo:fashion-cnn"), [])
    module.eval()
    before = {k: v.clone() for k, v in module.state_dict().items()}
    batches = list(calibration_batches(load_samples(str(demo_data[1]), specs=specs, limit=32), specs, "nchw"))
    quantizer, _ = litert_quantizer(ConvertOptions("int8", (), CalibrationOptions(str(demo_data[1]), 32, "histogram")))
    _, notes = quantize(module, batches[0], quantizer, batches, fold_quantize=False)
    assert notes["bias_correction"]["layers"] > 0
    assert all(torch.equal(before[k], v) for k, v in module.state_dict().items())


@pytest.mark.parametrize("to", ["tflite", "executorch"])
def test_pt2e_int8_keeps_the_best_prefix_of_the_sensitivity_outliers_in_float(tmp_path, fashion_source, demo_data, to):
    """LiteRT's and ExecuTorch's default int8 from PyTorch rank the layers (quantization.sensitivity), try the outliers'
    prefixes as ONNX Runtime's default does (one search: pt2e.int8_keeping_sensitive), keep the one closest to fp32,
    and say so; --no-keep-sensitive skips it."""
    pytest.importorskip("litert_torch" if to == "tflite" else "executorch")
    calib = CalibrationOptions(str(demo_data[1]), 64)
    default = convert(fashion_source, to, tmp_path / f"d{SUFFIXES[to]}", ConvertOptions("int8", INPUTS, calib))
    sensitivity = default.meta["provenance"][to]["quantization"]["sensitivity"]
    trials = sensitivity["output_loss_by_kept"]
    assert "none (all int8)" in trials
    kept = ", ".join(layer["name"] for layer in sensitivity["kept_in_float"]) or "none (all int8)"
    assert trials[kept] == min(trials.values())
    plain = convert(fashion_source, to, tmp_path / f"p{SUFFIXES[to]}", ConvertOptions("int8", INPUTS, calib, keep_sensitive=False))
    assert "sensitivity" not in plain.meta["provenance"][to]["quantization"]


def test_litert_sensitivity_search_converts_the_trial_closest_to_fp32(tmp_path, fashion_source, demo_data, monkeypatch):
    """The search's mechanics with an outlier to try (FashionCNN has none of its own, so the stem is named one): both
    prefixes are quantized and scored, the one with the least loss is written, and a stem kept runs float."""
    pytest.importorskip("litert_torch")
    from edgekit.quantization import sensitivity

    ranked_outliers = sensitivity.outliers
    monkeypatch.setattr(sensitivity, "outliers", lambda ranked: [s for s in ranked if s.name == "features.0.0"] or ranked_outliers(ranked))
    calib = CalibrationOptions(str(demo_data[1]), 64)
    result = convert(fashion_source, "tflite", tmp_path / "s.tflite", ConvertOptions("int8", INPUTS, calib))
    trials = result.meta["provenance"]["tflite"]["quantization"]["sensitivity"]["output_loss_by_kept"]
    assert sorted(trials) == ["features.0.0", "none (all int8)"]
    kept = [layer["name"] for layer in result.meta["provenance"]["tflite"]["quantization"]["sensitivity"]["kept_in_float"]]
    assert trials[", ".join(kept) or "none (all int8)"] == min(trials.values())
    from tests.unit.backends.tflite.test_litert_accuracy import _float_kernels

    assert _float_kernels(result.path) == ([[1, 3, 3, 32]] if kept else [])


def test_a_second_quantization_of_one_module_reuses_its_calibration_and_gives_what_a_fresh_one_does(demo_data, monkeypatch):
    """The sensitivity search and accuracy control quantize one module again with a few layers float (PT2E calibrates
    in float, so each observer sees the same values): the second quantization takes the observers and float layer
    means the first measured, with no pass of its own, and its model is the one a fresh calibration gives; other
    batches calibrate afresh."""
    import torch
    from torchao.quantization.pt2e.observer import HistogramObserver

    from edgekit.backends.tflite.quantizer import litert_quantizer
    from edgekit.backends.torch import pt2e
    from edgekit.calibration import load_samples
    from edgekit.conversion import load_for_conversion

    pytest.importorskip("litert_torch")
    module, specs = load_for_conversion(open_source("zoo:fashion-cnn"), [])
    module.eval()
    batches = list(pt2e.calibration_batches(load_samples(str(demo_data[1]), specs=specs, limit=32), specs, "nchw"))
    options = ConvertOptions("int8", (), CalibrationOptions(str(demo_data[1]), 32, "histogram"))
    observed, means = [], []
    forward, float_means = HistogramObserver.forward, pt2e.float_output_means
    monkeypatch.setattr(HistogramObserver, "forward", lambda self, x: observed.append(1) or forward(self, x))
    monkeypatch.setattr(pt2e, "float_output_means", lambda *a: means.append(1) or float_means(*a))
    monkeypatch.setattr(pt2e, "_kept_passes", pt2e.Kept(entries=2))

    def quantized(keep_float, on=batches):
        model, _ = pt2e.quantize(module, batches[0], litert_quantizer(options, keep_float)[0], on, fold_quantize=False)
        return model

    pt2e.quantize(module, batches[0], litert_quantizer(options)[0], batches, fold_quantize=False)
    passes = (len(observed), len(means))
    second = quantized(("features.0.0",))
    assert (len(observed), len(means)) == passes  # no pass through the observers, the means kept
    pt2e._kept_passes.clear()
    fresh = quantized(("features.0.0",))
    assert len(observed) > passes[0] and len(means) == passes[1] + 1
    with torch.no_grad():
        assert all(torch.equal(second(*b), fresh(*b)) for b in batches)
    observed.clear()
    quantized(("features.0.0",), batches[:16])
    assert observed  # other batches: calibrated afresh


def test_weight_observers_see_one_batch_and_the_model_is_what_observing_all_gives(demo_data, monkeypatch):
    """A weight is a constant: its observers see the first calibration batch only, and the quantized model is the one
    every observer seeing every batch gives."""
    import torch

    from edgekit.backends.tflite.quantizer import litert_quantizer
    from edgekit.backends.torch import pt2e
    from edgekit.calibration import load_samples
    from edgekit.conversion import load_for_conversion

    pytest.importorskip("litert_torch")
    module, specs = load_for_conversion(open_source("zoo:fashion-cnn"), [])
    module.eval()
    batches = list(pt2e.calibration_batches(load_samples(str(demo_data[1]), specs=specs, limit=16), specs, "nchw"))
    options = ConvertOptions("int8", (), CalibrationOptions(str(demo_data[1]), 16, "histogram"))
    seen = []
    observe = pt2e._observe
    monkeypatch.setattr(pt2e, "_observe", lambda prepared, on, sites: seen.append(_weight_observations(prepared, on, sites, observe)))

    def quantized():
        monkeypatch.setattr(pt2e, "_kept_passes", pt2e.Kept(entries=2))
        return pt2e.quantize(module, batches[0], litert_quantizer(options)[0], batches, fold_quantize=False)[0]

    once = quantized()
    monkeypatch.setattr(pt2e, "_observe", lambda prepared, on, sites: seen.append(_weight_observations(prepared, on, sites, _every_batch)))
    every = quantized()
    assert seen == [1, len(batches)]
    with torch.no_grad():
        assert all(torch.equal(once(*b), every(*b)) for b in batches)


def _every_batch(prepared, batches, sites):
    for tensors in batches:
        prepared(*tensors)


def _weight_observations(prepared, batches, sites, observe) -> int:
    """How many batches the first weight's observer saw while `observe` ran."""
    name = next(n.target for n in prepared.graph.nodes if n.op == "call_module" and n.args and n.args[0].op == "get_attr")
    observer, calls = getattr(prepared, name), []
    forward = observer.forward
    observer.forward = lambda x: calls.append(1) or forward(x)
    observe(prepared, batches, sites)
    del observer.forward
    return len(calls)


def test_the_calibration_key_follows_weights_and_batches_and_takes_a_modules_extra_state():
    """The key a module's calibration is kept under changes with its weights and with the batches, and a module with
    extra state (state_dict entries that are no tensors) gets one too."""
    import torch

    from edgekit.backends.torch.pt2e import _content_key

    class WithExtraState(torch.nn.Linear):
        def get_extra_state(self):
            return {"calibrated_for": "int8"}

        def set_extra_state(self, state):
            pass

    module = WithExtraState(4, 2)
    batches = [(torch.ones(1, 4),)]
    key = _content_key(module, batches)
    assert key == _content_key(module, [(torch.ones(1, 4),)])
    assert key != _content_key(module, [(torch.zeros(1, 4),)])
    with torch.no_grad():
        module.weight[0, 0] += 1
    assert key != _content_key(module, batches)
