"""int8 coverage read from each runtime: a ResNet-shaped CNN quantized to int8 runs all its MACs in int8 on ONNX
Runtime, OpenVINO, LiteRT and ExecuTorch, each counting the same layers and MACs as the ONNX graph does; a layer
kept float is named with its own MACs (ONNX Runtime, OpenVINO); `edgekit info --for-target` says it before any timing."""

import json

import numpy as np
import pytest

import edgekit
from edgekit.backends.onnx.loader import read_onnx
from edgekit.backends.onnx.macs import layer_macs
from edgekit.source import open_source
from edgekit.targets import make_runner
from edgekit.zoo.models import ResNet18Shape, _give_batchnorm_realistic_statistics
from tests.conftest import run_cli

SUFFIXES = {"onnx": "onnx", "openvino": "xml", "tflite": "tflite", "executorch": "pte"}
PACKAGES = {"onnx": "onnxruntime", "openvino": "openvino", "tflite": "litert_torch", "executorch": "executorch"}
TARGETS = {"onnx": "onnxruntime:cpu", "openvino": "openvino:cpu", "tflite": "litert:cpu", "executorch": "executorch:cpu"}


class SmallResNet(ResNet18Shape):
    """The ResNet-18 architecture (20 convolutions, 3 of them 1x1 shortcuts, and a classifier) at width 8 on 64x64."""

    edgekit_inputs = ("image:batchx3x64x64",)


def small_resnet() -> SmallResNet:
    import torch

    torch.manual_seed(0)
    model = SmallResNet(num_classes=10, width=8).eval()
    _give_batchnorm_realistic_statistics(model)
    return model


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """32 crops of real photos at 64x64 (ImageNet normalisation), the calibration set."""
    from edgekit.zoo.photos import imagenet_crops

    path = tmp_path_factory.mktemp("coverage") / "photos.npz"
    np.savez(path, image=imagenet_crops(32, size=64, seed=3))
    return path


@pytest.fixture(scope="module")
def fp32_onnx(tmp_path_factory):
    path = tmp_path_factory.mktemp("coverage-fp32") / "resnet.onnx"
    edgekit.convert(f"{__name__}:small_resnet", "onnx", path)
    return path


@pytest.fixture(scope="module")
def fp32_macs(fp32_onnx):
    """The fp32 ONNX's layers and their MACs: what every runtime's count must agree with."""
    return layer_macs(read_onnx(fp32_onnx))


@pytest.mark.parametrize("fmt", SUFFIXES)
def test_a_fully_int8_resnet_runs_all_its_macs_in_int8(fmt, photos, fp32_macs, tmp_path):
    pytest.importorskip(PACKAGES[fmt])
    artifact = edgekit.convert(f"{__name__}:small_resnet", fmt, tmp_path / f"r.{SUFFIXES[fmt]}", precision="int8", calib=str(photos))
    runner = make_runner(open_source(str(artifact.path)), TARGETS[fmt], 1)
    runner.load()
    coverage = runner.int8_coverage()
    assert coverage["layers"] == len(fp32_macs) == 21, [x for x in coverage["float_layers"]]
    assert coverage["macs"] == pytest.approx(sum(x["macs"] for x in fp32_macs), rel=0.01)  # the same work, counted by each runtime
    assert coverage["macs_share"] >= 0.99 and coverage["int8_layers"] >= 20, coverage["float_layers"]


@pytest.mark.parametrize("fmt", ["onnx", "openvino"])
def test_a_layer_kept_float_is_named_and_takes_its_macs_out_of_the_share(fmt, photos, fp32_onnx, fp32_macs, tmp_path):
    """The classifier kept float (--exclude its node, named as the ONNX graph names it): coverage drops by exactly its
    MACs and names it."""
    pytest.importorskip(PACKAGES[fmt])
    head = next(x for x in fp32_macs if x["op"] in ("Gemm", "MatMul"))
    out = tmp_path / f"kept.{SUFFIXES[fmt]}"
    kept = edgekit.convert(str(fp32_onnx), fmt, out, precision="int8", calib=str(photos), exclude=[head["node"]])
    runner = make_runner(open_source(str(kept.path)), TARGETS[fmt], 1)
    runner.load()
    coverage = runner.int8_coverage()
    total = sum(x["macs"] for x in fp32_macs)
    assert [x["macs"] for x in coverage["float_layers"]] == [head["macs"]]
    if fmt == "onnx":  # OpenVINO names a layer fused into the graph's output after the output (`output`): its MACs name it
        assert coverage["float_layers"][0]["name"].startswith(head["node"])
    assert coverage["macs_share"] == pytest.approx(1 - head["macs"] / total, abs=1e-6)
    assert coverage["int8_layers"] == 20


def test_info_for_target_gives_coverage_before_timing(fashion_onnx):
    result = run_cli("info", str(fashion_onnx["int8"]), "--for-target", "onnxruntime:cpu", "--json")
    assert result.code == 0, result.stderr
    coverage = json.loads(result.stdout)["int8_coverage"]
    assert coverage["macs_share"] == 1.0 and coverage["layers"] == 5 and coverage["float_layers"] == []
    table = run_cli("info", str(fashion_onnx["int8"]), "--for-target", "onnxruntime:cpu")
    assert "int8 coverage on onnxruntime:cpu: 100.0% of its MACs (5/5" in table.stdout
