"""Compression stages on the real trained models: what they remove, that results still load and convert."""

import numpy as np
import pytest
import torch

from edgekit.api.stages import gzip_size
from edgekit.backends.torch.loader import load_torch
from edgekit.calibration import load_samples
from edgekit.conversion import ConvertOptions
from edgekit.converters.pipeline import convert
from edgekit.errors import EdgekitError
from edgekit.metrics.compare import accuracy_percent, run_batches
from edgekit.pruning import PruneOptions
from edgekit.pruning.stages import prune
from edgekit.source import open_source
from edgekit.targets import make_runner
from tests.conftest import INPUTS

pytest.importorskip("torch_pruning")


@pytest.fixture(scope="module")
def test2k(small_test_npz):
    return load_samples(str(small_test_npz), specs=list(INPUTS))


def _accuracy(path, samples):
    return accuracy_percent(run_batches(make_runner(open_source(str(path)), inputs=list(INPUTS)), samples, 500)[0], samples.labels)


def test_magnitude_reaches_the_sparsity_and_shrinks_gzip(tmp_path, fashion_source, test2k):
    for scope in ("global", "layer"):
        report = prune(fashion_source, PruneOptions("magnitude", sparsity=0.5, scope=scope), tmp_path / f"{scope}.pt2", list(INPUTS))
        weights = sum(layer["parameters"] for layer in report.layers)
        zeros = sum(layer["sparsity"] * layer["parameters"] for layer in report.layers)
        assert zeros / weights == pytest.approx(0.5, abs=0.01)
        if scope == "layer":
            assert all(layer["sparsity"] == pytest.approx(0.5, abs=0.02) for layer in report.layers)
    assert report.parameters_after == report.parameters_before and report.nonzero_after < 0.6 * report.parameters_before
    module, specs = load_torch(open_source(str(tmp_path / "global.pt2")))
    assert specs[0].shape[1:] == (1, 28, 28)
    assert _accuracy(tmp_path / "global.pt2", test2k) > 85.0
    dense = convert(fashion_source, "onnx", tmp_path / "dense.onnx", ConvertOptions("fp32", INPUTS)).path
    sparse = convert(open_source(str(tmp_path / "global.pt2")), "onnx", tmp_path / "sparse.onnx", ConvertOptions("fp32")).path
    assert gzip_size(sparse) < 0.7 * gzip_size(dense)


def test_finetuning_keeps_the_masks(tmp_path, fashion_source, small_test_npz):
    options = PruneOptions("magnitude", sparsity=0.6, epochs=2, learning_rate=3e-4)
    report = prune(fashion_source, options, tmp_path / "ft.pt2", list(INPUTS), finetune_data=str(small_test_npz))
    zeros = sum(layer["sparsity"] * layer["parameters"] for layer in report.layers)
    assert zeros / sum(layer["parameters"] for layer in report.layers) == pytest.approx(0.6, abs=0.01)  # masks held through training
    assert "fine-tuning" in " ".join(report.notes)


def test_channel_pruning_removes_channels_and_still_converts(tmp_path, fashion_source, small_test_npz, test2k):
    out = tmp_path / "ch.pt2"
    report = prune(fashion_source, PruneOptions("channels", channel_ratio=0.3), out, list(INPUTS), data=str(small_test_npz))
    assert report.parameters_after < 0.6 * report.parameters_before and report.macs_after < 0.6 * report.macs_before
    assert any("batch-norm" in note for note in report.notes)
    module, _ = load_torch(open_source(str(out)))
    with torch.no_grad():
        assert tuple(module(torch.rand(3, 1, 28, 28)).shape) == (3, 10)  # output shape untouched
    assert _accuracy(out, test2k) > 80.0
    for fmt, suffix in (("onnx", ".onnx"), ("openvino", ".xml"), ("tflite", ".tflite")):
        pytest.importorskip({"onnx": "onnxruntime", "openvino": "openvino", "tflite": "litert_torch"}[fmt])
        artifact = convert(open_source(str(out)), fmt, tmp_path / f"ch{suffix}", ConvertOptions("fp32"))
        assert artifact.size_bytes() > 0 and artifact.inputs[0].shape[1:] == (1, 28, 28)  # only the batch is dynamic


def test_kept_channels_are_the_nearest_multiple_of_the_vector_width(fashion_source):
    """torch-pruning keeps int(70%) of each layer's channels; edgekit keeps the nearest multiple of the kernels' width
    (the host ISA class's by default, --round-to N), never fewer than one multiple; the output layer keeps its 10."""
    from edgekit.backends.torch.loader import example_tensors
    from edgekit.backends.torch.prune_methods import channel_prune
    from edgekit.isa import channel_multiple, host_class

    module, _ = load_torch(fashion_source)
    example = example_tensors(list(INPUTS), 1)[0]

    def kept(round_to):
        report = channel_prune(module, PruneOptions("channels", channel_ratio=0.3, round_to=round_to), example, None, None)[1]
        return [layer["channels"] for layer in report.layers], report.notes[1]

    assert kept(1) == (["32 -> 22", "64 -> 44", "64 -> 44", "128 -> 89", "10 -> 10"], "kept channels not rounded")
    assert kept(8)[0] == ["32 -> 24", "64 -> 48", "64 -> 48", "128 -> 88", "10 -> 10"]
    assert kept(16)[0] == ["32 -> 16", "64 -> 48", "64 -> 48", "128 -> 96", "10 -> 10"]  # 22.4 -> 16, not 0
    default, note = kept(None)
    assert default == kept(channel_multiple(host_class().name))[0] and host_class().name in note and "--round-to" in note


def test_batchnorm_recalibration_matters(fashion_source, small_test_npz, test2k):
    from edgekit.backends.torch.loader import example_tensors
    from edgekit.backends.torch.prune_methods import channel_prune, recalibrate_batchnorm

    module, _ = load_torch(fashion_source)
    pruned, _ = channel_prune(module, PruneOptions("channels", channel_ratio=0.4), example_tensors(list(INPUTS), 1)[0], None, None)

    def acc(model):
        with torch.no_grad():
            logits = model(torch.from_numpy(test2k.arrays["image"])).numpy()
        return accuracy_percent(logits, test2k.labels)

    stale = acc(pruned)
    recalibrate_batchnorm(pruned, load_samples(str(small_test_npz), 512, specs=list(INPUTS)))
    assert acc(pruned) > stale


def test_lowrank_halves_the_head_and_keeps_the_output_layer(tmp_path, fashion_source, test2k):
    report = prune(fashion_source, PruneOptions("lowrank", compression=0.5), tmp_path / "lr.pt2", list(INPUTS))
    assert [layer["layer"] for layer in report.layers] == ["classifier.1"]  # classifier.3 is the output layer
    original, factored = report.layers[0]["parameters"]
    assert factored == pytest.approx(original / 2, rel=0.02)
    assert _accuracy(tmp_path / "lr.pt2", test2k) > 88.0


def test_keras_magnitude_and_lowrank(tmp_path):
    pytest.importorskip("tensorflow")
    from edgekit.backends.keras.loader import KerasModel
    from edgekit.zoo.fashion_mnist import KERAS_MODEL

    source = open_source(str(KERAS_MODEL))
    report = prune(source, PruneOptions("magnitude", sparsity=0.5), tmp_path / "m.keras", [])
    assert report.nonzero_after < 0.6 * report.parameters_before
    kernels = [w for w in KerasModel(open_source(str(tmp_path / "m.keras"))).keras.get_weights() if w.ndim > 1]
    assert np.mean([np.mean(k == 0) for k in kernels]) > 0.3
    report = prune(source, PruneOptions("lowrank", compression=0.5), tmp_path / "l.keras", [])
    assert report.parameters_after < report.parameters_before and report.layers
    assert KerasModel(open_source(str(tmp_path / "l.keras"))).specs[0].name == "image"
    with pytest.raises(EdgekitError, match="PyTorch models"):
        prune(source, PruneOptions("channels"), tmp_path / "c.keras", [])


def test_bad_method_and_finetune_without_labels(tmp_path, fashion_source, demo_data):
    with pytest.raises(EdgekitError, match="unknown compression method"):
        prune(fashion_source, PruneOptions("quantum"), tmp_path / "x.pt2", list(INPUTS))
    with pytest.raises(EdgekitError, match="--finetune"):
        prune(fashion_source, PruneOptions("magnitude", epochs=1), tmp_path / "x.pt2", list(INPUTS))
    with np.load(demo_data[0]) as npz:  # label sets score accuracy; training needs a class per sample
        np.savez(tmp_path / "sets.npz", image=npz["image"][:64], labels=np.eye(10, dtype=bool)[npz["labels"][:64]])
    with pytest.raises(EdgekitError, match="fine-tuning needs one class per sample"):
        prune(
            fashion_source, PruneOptions("magnitude", epochs=1), tmp_path / "x.pt2", list(INPUTS), finetune_data=str(tmp_path / "sets.npz")
        )
    assert not (tmp_path / "x.pt2").exists()


def test_a_scope_or_init_that_is_not_a_choice_is_refused_before_any_work():
    from edgekit.errors import EdgekitError

    with pytest.raises(EdgekitError, match="--scope 'bogus' is not one of global, layer"):
        PruneOptions("magnitude", scope="bogus")
    with pytest.raises(EdgekitError, match="--init 'kmeans' is not one of linear, density"):
        PruneOptions("cluster", init="kmeans")
    assert PruneOptions("magnitude", scope="layer").scope == "layer"
