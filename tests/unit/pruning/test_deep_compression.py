"""Deep Compression on the real trained FashionCNN: weight sharing, Huffman and relative-index coding, surgery, size gates."""

import numpy as np
import pytest
import torch

from edgekit.api.stages import gate_compressed
from edgekit.backends.torch.loader import load_torch
from edgekit.backends.torch.prune import cluster_torch
from edgekit.backends.torch.prune_methods import magnitude_prune, prunable, surgery_mask
from edgekit.calibration import load_samples
from edgekit.conversion import ConvertOptions
from edgekit.converters.pipeline import convert
from edgekit.errors import EdgekitError
from edgekit.metrics.coding import Huffman, from_relative_index, relative_index, size_metrics, symbols_of, tensor_storage
from edgekit.metrics.gate import Thresholds, check_row, failures
from edgekit.pruning import PruneOptions
from edgekit.pruning.sharing import initial_centroids
from edgekit.pruning.stages import prune
from edgekit.source import open_source
from tests.conftest import INPUTS, run_cli


@pytest.fixture(scope="module")
def fashion_module(fashion_source):
    return load_torch(fashion_source)[0]


@pytest.fixture(scope="module")
def train512(tmp_path_factory, demo_data):
    """512 labelled Fashion-MNIST training images (the committed calibration split): a fraction of an epoch."""
    with np.load(demo_data[1]) as npz:
        path = tmp_path_factory.mktemp("train") / "train512.npz"
        np.savez(path, image=npz["image"][:512], labels=npz["labels"][:512])
    return path


@pytest.fixture(scope="module")
def pruned(fashion_module):
    return magnitude_prune(fashion_module, PruneOptions("magnitude", sparsity=0.8), None)[0]


def _masks(model):
    return {n: (m.weight != 0).clone() for n, m in prunable(model)}


def test_kmeans_keeps_k_values_and_the_mask(pruned, train512):
    samples = load_samples(str(train512), specs=list(INPUTS))
    before = _masks(pruned)
    for init in ("linear", "density"):
        shared, report = cluster_torch(pruned, PruneOptions("cluster", clusters=16, init=init), None)
        tuned, _ = cluster_torch(pruned, PruneOptions("cluster", clusters=16, init=init, epochs=1, learning_rate=1e-3), samples)
        for model in (shared, tuned):
            for name, layer in prunable(model):
                assert len(torch.unique(layer.weight[layer.weight != 0])) <= 16
                assert torch.equal(layer.weight != 0, before[name])  # zeros stay zero, non-zeros stay non-zero
        assert all(layer["clusters"] <= 16 for layer in report.layers)
        moved = [not torch.equal(a.weight, b.weight) for (_, a), (_, b) in zip(prunable(shared), prunable(tuned), strict=True)]
        assert all(moved)  # the centroids were trained


def test_cluster_chain_after_pruning_writes_the_storage_table(tmp_path, fashion_source, small_test_npz):
    report = prune(
        fashion_source, PruneOptions("magnitude,cluster", sparsity=0.9, clusters=16), tmp_path / "mc.pt2", list(INPUTS), str(small_test_npz)
    )
    stages = {row["stage"]: row for row in report.storage}
    assert list(stages) == ["original", "pruned", "clustered", "int8"]
    assert stages["pruned"]["total"]["nonzeros"] == stages["clustered"]["total"]["nonzeros"]
    assert stages["original"]["total"]["ratio"] == pytest.approx(1.0)
    assert stages["clustered"]["total"]["coded_bytes"] < stages["pruned"]["total"]["coded_bytes"] / 3
    assert stages["clustered"]["total"]["ratio"] > 20
    assert stages["original"]["accuracy"] > 90 and stages["clustered"]["accuracy"] is not None
    module, _ = load_torch(open_source(str(tmp_path / "mc.pt2")))
    weights = [p for n, p in module.state_dict().items() if n.endswith("weight") and p.ndim > 1]
    assert all(len(torch.unique(w[w != 0])) <= 16 for w in weights)  # the saved model holds the shared values


def test_huffman_size_is_the_bit_count_and_decodes_back(pruned):
    weight = cluster_torch(pruned, PruneOptions("cluster", clusters=16), None)[0].classifier[1].weight.detach().numpy()
    symbols = symbols_of(weight)[0].ravel()
    code = Huffman.fit(symbols)
    codes = code.codes()
    values, counts = np.unique(symbols, return_counts=True)
    assert code.bits(symbols) == sum(len(codes[int(v)]) * int(c) for v, c in zip(values, counts, strict=True))
    assert sum(2.0 ** -len(c) for c in codes.values()) == pytest.approx(1.0)  # a complete prefix code
    data, nbits = code.encode(symbols)
    assert nbits == code.bits(symbols) and len(data) == (nbits + 7) // 8
    assert np.array_equal(code.decode(data, nbits), symbols)
    assert code.bits(symbols) < 4 * len(symbols)  # beats the fixed 4-bit index on a skewed distribution


def test_relative_index_round_trips_with_long_gaps(pruned):
    weight = pruned.classifier[1].weight.detach().numpy().ravel().copy()
    weight[1000:4000] = 0  # a gap far beyond both spans
    for bits in (5, 8):
        gaps, values = relative_index(weight, bits)
        assert gaps.max() <= 2**bits and gaps.min() >= 1
        assert (values == 0).sum() >= 3000 // 2**bits  # filler zeros bridge the long gap
        assert np.array_equal(from_relative_index(gaps, values, weight.size), weight)
    storage = tensor_storage(weight.reshape(128, -1), 5)
    assert storage["nonzeros"] == np.count_nonzero(weight)
    assert storage["sparse_bytes"] == (len(relative_index(weight, 5)[0]) * (32 + 5) + 7) // 8


def test_surgery_splices_weights_back(fashion_module, train512):
    weight = torch.tensor([0.01, 0.05, 0.5, 0.105, 0.2])
    mask = torch.tensor([True, True, False, False, False])
    # a = 0.1, b = 0.11: below a is cut, above b (a cut weight that grew: 0.5, 0.2) comes back, in between (0.105) stays cut
    assert surgery_mask(weight, mask, 0.1, 0.11).tolist() == [False, False, True, False, True]
    samples = load_samples(str(train512), specs=list(INPUTS))
    options = PruneOptions("magnitude", sparsity=0.8, epochs=2, learning_rate=3e-3, surgery=True)
    model, report = magnitude_prune(fashion_module, options, samples)
    assert sum(layer["spliced_back"] for layer in report.layers) > 0  # weights cut during training returned
    assert all(0 <= layer["spliced_kept"] <= layer["spliced_back"] for layer in report.layers)
    zeros = sum(layer["sparsity"] * layer["parameters"] for layer in report.layers)
    assert zeros / sum(layer["parameters"] for layer in report.layers) == pytest.approx(0.8, abs=0.01)


def test_size_metric_gate(tmp_path, fashion_source):
    report = prune(fashion_source, PruneOptions("magnitude,cluster", sparsity=0.9), tmp_path / "g.pt2", list(INPUTS))
    onnx_path = convert(open_source(str(tmp_path / "g.pt2")), "onnx", tmp_path / "g.onnx", ConvertOptions("fp32")).path
    sizes = size_metrics(onnx_path)
    stored = onnx_path.stat().st_size / 1e6
    assert sizes["coded_mb"] < sizes["gzip_mb"] < stored
    row = {"size_mb": stored, **sizes}
    between = (sizes["coded_mb"] + stored) / 2
    assert failures(check_row(row, Thresholds(max_size_mb=between, size_metric="coded"))) == []
    assert [f.metric for f in failures(check_row(row, Thresholds(max_size_mb=between)))] == ["size_mb"]
    below = sizes["coded_mb"] * 0.9
    assert [f.metric for f in failures(check_row(row, Thresholds(max_size_mb=below, size_metric="coded")))] == ["coded_size_mb"]
    result = {"stages": [], "stage": report.to_dict()}  # no stage rows: the output file and its coded weights
    coded = [r for r in report.storage if r["stage"] == "clustered"][0]["total"]["coded_bytes"] / 1e6
    assert gate_compressed(result, tmp_path / "g.pt2", Thresholds(max_size_mb=coded * 1.01, size_metric="coded"))["passed"]
    assert not gate_compressed(result, tmp_path / "g.pt2", Thresholds(max_size_mb=coded * 0.99, size_metric="coded"))["passed"]
    assert not gate_compressed(result, tmp_path / "g.pt2", Thresholds(max_size_mb=coded * 1.01, size_metric="stored"))["passed"]


def test_cli_prints_coded_sizes_and_gates(tmp_path, small_test_npz):
    out = tmp_path / "cli.pt2"
    result = run_cli(
        "prune", "edgekit.zoo.models:fashion_cnn", "--weights", "edgekit/zoo/data/fashion_cnn.pt", "-i", "image:1x1x28x28",
        "-m", "magnitude,cluster", "--sparsity", "0.9", "--clusters", "16", "-d", small_test_npz, "--threads", "1",
        "-o", out, "--max-size-mb", "0.05", "--size-metric", "coded",
    )  # fmt: skip
    assert result.code == 0, result.stderr
    assert "coded size" in result.stdout and "storage (Deep Compression accounting)" in result.stdout
    assert "clustered" in result.stdout and "coded_size_mb" in result.stdout
    stored = run_cli(
        "prune", "edgekit.zoo.models:fashion_cnn", "--weights", "edgekit/zoo/data/fashion_cnn.pt", "-i", "image:1x1x28x28",
        "-m", "cluster", "--clusters", "16", "-o", tmp_path / "c.pt2", "--max-size-mb", "0.05",
    )  # fmt: skip
    assert stored.code == 2 and "FAIL" in stored.stdout  # the stored .pt2 (~0.5 MB) is over the limit


def test_clear_errors(tmp_path, fashion_source):
    with pytest.raises(EdgekitError, match="--surgery"):
        prune(fashion_source, PruneOptions("magnitude", surgery=True), tmp_path / "s.pt2", list(INPUTS))
    with pytest.raises(EdgekitError, match="unknown compression method 'magnitude,quantum'"):
        prune(fashion_source, PruneOptions("magnitude,quantum"), tmp_path / "q.pt2", list(INPUTS))
    with pytest.raises(EdgekitError, match="initialisation"):
        initial_centroids(np.array([0.1, 0.2, 0.3]), 2, "random")
    assert not (tmp_path / "s.pt2").exists() and not (tmp_path / "q.pt2").exists()


def test_recipe_takes_the_size_metric_and_chains(tmp_path):
    from edgekit.recipe.schema import RecipeError, load_recipe

    path = tmp_path / "r.yaml"
    path.write_text(
        "model: {path: m.onnx}\ncompress:\n  - {method: 'magnitude,cluster', sparsity: 0.9, clusters: 16, surgery: false}\n"
        "gates: {max_size_mb: 0.1, size_metric: coded}\n"
    )
    recipe = load_recipe(path)
    assert recipe.gates.size_metric == "coded" and recipe.compress[0].clusters == 16
    path.write_text("model: {path: m.onnx}\ngates: {max_size_mb: 0.1, size_metric: zipped}\n")
    with pytest.raises(RecipeError, match="'gates.size_metric' has unknown value 'zipped'"):
        load_recipe(path)


def test_keras_cluster_chain_keeps_k_values_and_zeros(tmp_path):
    pytest.importorskip("tensorflow")
    from edgekit.backends.keras.loader import KerasModel
    from edgekit.zoo.fashion_mnist import KERAS_MODEL

    report = prune(open_source(str(KERAS_MODEL)), PruneOptions("magnitude,cluster", sparsity=0.8, clusters=8), tmp_path / "c.keras", [])
    assert report.method == "magnitude,cluster" and all(layer["clusters"] <= 8 for layer in report.layers)
    kernels = [w for w in KerasModel(open_source(str(tmp_path / "c.keras"))).keras.get_weights() if w.ndim > 1]
    assert all(len(np.unique(k[k != 0])) <= 8 for k in kernels)
    assert np.mean(np.concatenate([k.ravel() for k in kernels]) == 0) == pytest.approx(0.8, abs=0.01)
    with pytest.raises(EdgekitError, match="PyTorch models"):
        prune(open_source(str(KERAS_MODEL)), PruneOptions("cluster", epochs=1), tmp_path / "f.keras", [])
