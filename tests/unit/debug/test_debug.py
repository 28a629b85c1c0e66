"""`edgekit debug`: per-tensor error on the trained FashionCNN and real Fashion-MNIST, every format pair it matches."""

import json
import math

import numpy as np
import pytest

from edgekit.conversion import CalibrationOptions, ConvertOptions
from edgekit.converters.pipeline import convert
from edgekit.debug import DebugRequest, debug
from edgekit.errors import EdgekitError
from edgekit.metrics.tensors import first_jump
from edgekit.source import open_source
from tests.conftest import INPUTS, assert_clean_error, run_cli


def _debug(artifact, reference, data, samples=4) -> dict:
    return debug(DebugRequest(open_source(str(artifact)), open_source(str(reference)), str(data), samples))


def _calib(precision: str, calib: CalibrationOptions) -> CalibrationOptions:
    return calib if precision == "int8" else CalibrationOptions()


def _row(rows: list[dict], tensor: str) -> dict:
    return next(r for r in rows if r["tensor"] == tensor)


@pytest.fixture(scope="module")
def damaged_onnx(tmp_path_factory, fashion_onnx):
    """The fp32 ONNX with the second conv's weights scaled by 1.5 (the conv feeding `features.2`)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(fashion_onnx["fp32"]))
    weight = next(t for t in model.graph.initializer if t.name == "features.2.0.weight")
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * 1.5, weight.name))
    damaged_node = next(n for n in model.graph.node if weight.name in n.input)
    path = tmp_path_factory.mktemp("damaged") / "damaged.onnx"
    onnx.save(model, str(path))
    return path, damaged_node.output[0]


def test_damaged_conv_is_the_first_jump(damaged_onnx, fashion_onnx, small_test_npz):
    path, damaged_tensor = damaged_onnx
    report = _debug(path, fashion_onnx["fp32"], small_test_npz)
    rows = report["rows"]
    assert report["first_jump"]["tensor"] == damaged_tensor
    assert report["first_jump"]["layer"].endswith("(features.2.1)")  # Conv folded with its BatchNorm, named by module
    before = rows[: report["first_jump"]["depth"]]
    assert before and all(r["exact"] for r in before)
    assert report["worst"][0]["tensor"] == damaged_tensor
    assert report["unmatched"] == {"reference_only": [], "artifact_only": [], "skipped": []}


def test_onnx_int8_vs_fp32(fashion_onnx, small_test_npz):
    report = _debug(fashion_onnx["int8"], fashion_onnx["fp32"], small_test_npz)
    rows = report["rows"]
    # the QDQ model's activations come back under the float names, after Q -> DQ (what the int8 model passes on)
    assert {"relu", "relu_1", "relu_2", "output"} <= {r["tensor"] for r in rows}
    lossy = [r for r in rows if not r["exact"]]
    assert lossy and all(25 < r["sqnr_db"] < 80 and r["cosine"] > 0.99 for r in lossy)
    assert report["first_jump"] is None
    # Conv outputs the quantizer fused with their Relu exist only in the float model, and are listed
    assert "getitem" in report["unmatched"]["reference_only"]
    assert _row(rows, "relu")["shape"] == [1, 32, 28, 28]


def test_reordered_channels_are_compared_in_the_source_order(fashion_onnx, demo_data, small_test_npz, tmp_path):
    """Pair-safe int8 (x86-avx2) reorders the hidden layer's channels (backends.onnx.channel_order): compared channel by
    channel with the fp32 model's, its tensors would look broken (cosine about 0.5); put back in order they do not."""
    options = ConvertOptions("int8", (), CalibrationOptions(str(demo_data[1]), 300), for_target="x86-avx2")
    avx2 = convert(open_source(str(fashion_onnx["fp32"])), "onnx", tmp_path / "avx2.onnx", options)
    (space,) = avx2.meta["provenance"]["quantization"]["channel_order"]["spaces"]
    assert space["tensors"] == ["linear", "relu_3"]
    report = _debug(avx2.path, fashion_onnx["fp32"], small_test_npz)
    hidden = _row(report["rows"], "relu_3")
    assert hidden["shape"] == [1, 128] and hidden["cosine"] > 0.99 and hidden["sqnr_db"] > 25
    assert report["first_jump"] is None and _row(report["rows"], "output")["cosine"] > 0.99
    info = run_cli("info", str(avx2.path))
    assert "channels reordered in 1 place to pair large weights with small: largest pair / largest weight" in info.stdout


def test_torch_vs_onnx_by_module_scopes(fashion_onnx, small_test_npz):
    report = debug(DebugRequest(open_source(str(fashion_onnx["fp32"])), open_source("zoo:fashion-cnn"), str(small_test_npz), 4))
    rows = report["rows"]
    assert [r["layer"] for r in rows][:3] == ["features.0.1", "features.0.2", "features.1"]
    assert _row(rows, "getitem")["op"] == "BatchNorm2d"  # the exporter folded the Conv into the BatchNorm's node
    assert len(rows) >= 12 and all(r["exact"] or r["sqnr_db"] > 80 for r in rows)
    assert set(report["unmatched"]["artifact_only"]) == {"sub", "div"}  # functional ops: no module to hook


@pytest.fixture(scope="module")
def ir(tmp_path_factory, fashion_source, demo_data, fashion_onnx):
    out = tmp_path_factory.mktemp("ir")
    calib = CalibrationOptions(str(demo_data[1]), 300)
    paths = {
        p: convert(
            fashion_source, "openvino", out / f"f.{p}.xml", ConvertOptions(p, INPUTS, _calib(p, calib), for_target="x86-avx512")
        ).path
        for p in ("fp32", "int8")
    }
    paths["from_onnx"] = convert(open_source(str(fashion_onnx["fp32"])), "openvino", out / "o.xml", ConvertOptions("fp32")).path
    return paths


def test_openvino_int8_vs_fp32(ir, small_test_npz):
    report = _debug(ir["int8"], ir["fp32"], small_test_npz)
    rows = report["rows"]
    assert len(rows) >= 15 and not report["unmatched"]["skipped"]
    relu = next(r for r in rows if "features.0.2" in r["tensor"])
    assert 25 < relu["sqnr_db"] < 60  # after the FakeQuantize NNCF put behind it
    assert rows[-1]["shape"] == [1, 10] and rows[-1]["cosine"] > 0.99


def test_onnx_vs_openvino_by_onnx_tensor_names(ir, fashion_onnx, small_test_npz):
    report = _debug(ir["from_onnx"], fashion_onnx["fp32"], small_test_npz)
    rows = report["rows"]
    assert {"relu", "relu_1", "relu_2", "relu_3", "output"} <= {r["tensor"] for r in rows}
    assert all(r["exact"] or r["sqnr_db"] > 80 for r in rows)


@pytest.fixture(scope="module")
def keras_tflite(tmp_path_factory, small_test_npz, demo_data):
    pytest.importorskip("tensorflow")
    from edgekit.zoo.fashion_mnist import KERAS_MODEL

    out = tmp_path_factory.mktemp("tfl")
    for name, src in (("test", small_test_npz), ("calib", demo_data[1])):
        with np.load(src) as npz:
            np.savez(out / f"{name}.npz", image=npz["image"][:300].transpose(0, 2, 3, 1))
    calib = CalibrationOptions(str(out / "calib.npz"), 100)
    source = open_source(str(KERAS_MODEL))
    paths = {p: convert(source, "tflite", out / f"k.{p}.tflite", ConvertOptions(p, (), _calib(p, calib))).path for p in ("fp32", "int8")}
    return paths, out / "test.npz"


def test_tflite_int8_vs_fp32(keras_tflite):
    paths, data = keras_tflite
    report = _debug(paths["int8"], paths["fp32"], data)
    rows = report["rows"]
    assert len(rows) >= 10 and report["unmatched"] == {"reference_only": [], "artifact_only": [], "skipped": []}
    assert all(not r["exact"] and 25 < r["sqnr_db"] < 70 for r in rows)  # every tensor int8, dequantized
    assert rows[-1]["shape"] == [1, 10]  # the output, matched through its DEQUANTIZE


def test_first_jump_rule():
    def rows(*sqnr):
        return [{"exact": s is None, "sqnr_db": s, "nonfinite": 0} for s in sqnr]

    assert first_jump(rows(None, 62.0, 35.0, 33.0)) is None  # rounding after exact tensors is not a jump
    assert first_jump(rows(None, 38.0, 27.0, 26.0)) == 2  # 11 dB below the tensor before
    assert first_jump(rows(None, 30.0, 25.0, 19.0)) == 3  # below the 20 dB floor
    assert first_jump(rows(None, 30.0, 25.0, 19.0), floor_db=10) is None
    assert first_jump(rows(50.0, -math.inf)) == 1


def test_bad_pairs_are_one_clear_error(fashion_onnx, keras_tflite, small_test_npz):
    paths, nhwc = keras_tflite
    with pytest.raises(EdgekitError, match="share no intermediate tensor names"):
        _debug(fashion_onnx["fp32"], paths["fp32"], small_test_npz)
    with pytest.raises(EdgekitError, match="ONNX artifact only"):
        debug(DebugRequest(open_source(str(paths["fp32"])), open_source("zoo:fashion-cnn"), str(nhwc), 2))


def test_cli_json_html_and_data_that_does_not_fit(tmp_path, damaged_onnx, fashion_onnx, small_test_npz):
    path, damaged_tensor = damaged_onnx
    out_json, out_html = tmp_path / "d.json", tmp_path / "d.html"
    result = run_cli("debug", path, "-r", fashion_onnx["fp32"], "-d", small_test_npz, "-n", "2", "--json", out_json, "--html", out_html)
    assert result.code == 0, result.stderr
    assert f"#5 {damaged_tensor}" in result.stdout and "<- first jump" in result.stdout
    report = json.loads(out_json.read_text())
    assert report["kind"] == "debug" and report["first_jump"]["tensor"] == damaged_tensor and len(report["rows"]) == 15
    page = out_html.read_text()
    assert "<script" in page and "<script src=" not in page and damaged_tensor in page  # plotly.js inline, no CDN
    with np.load(small_test_npz) as npz:
        np.savez(tmp_path / "nhwc.npz", image=npz["image"][:4].transpose(0, 2, 3, 1))
    assert_clean_error(run_cli("debug", path, "-r", fashion_onnx["fp32"], "-d", tmp_path / "nhwc.npz"), "does not match")


def test_cli_reads_an_image_folder_with_its_preprocessing(tmp_path, damaged_onnx, fashion_onnx, small_test_npz):
    from PIL import Image

    path, damaged_tensor = damaged_onnx
    (tmp_path / "shop").mkdir()
    with np.load(small_test_npz) as npz:
        for i, pixels in enumerate(npz["image"][:4]):
            Image.fromarray(np.rint(pixels[0] * 255).astype(np.uint8)).resize((56, 56)).save(tmp_path / "shop" / f"{i}.png")
    out = tmp_path / "d.json"
    args = ("-d", tmp_path / "shop", "--preprocess", "resize=28,mean=0.1,std=0.9", "-n", "2", "--json", out)
    result = run_cli("debug", path, "-r", fashion_onnx["fp32"], *args)
    assert result.code == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["data"]["preprocess"]["resize"] == 28 and report["data"]["preprocess"]["mean"] == [0.1]
    assert report["data"]["samples"] == 2 and report["first_jump"]["tensor"] == damaged_tensor


def test_info_says_which_ops_xnnpack_leaves_and_why(keras_tflite):
    from edgekit.backends.tflite.loader import tflite_summary

    paths, _ = keras_tflite
    fp32 = tflite_summary(paths["fp32"])["delegate"]
    why = {row["op"]: row["why"] for row in fp32["cpu_ops"]}
    assert sum(r["count"] for r in fp32["cpu_ops"]) == fp32["ops_total"] - fp32["ops_on_delegate"] > 0
    assert "no SHAPE kernel" in why["SHAPE"] and "computed at run time" in why["RESHAPE"]  # Flatten's shape arithmetic
    int8 = tflite_summary(paths["int8"])["delegate"]
    # the int8 graph quantizes its input and dequantizes its output only: no layout or requantize passes inside
    assert int8["data_movement"] == []


def test_tflite_pairs_by_op_type_and_order_where_names_differ():
    from edgekit.debug import match
    from edgekit.metrics.tensors import TensorRef

    fp32 = [TensorRef("a;1", "MUL", ""), TensorRef("conv_fp32", "CONV_2D", ""), TensorRef("x", "ADD", ""), TensorRef("y", "ADD", "")]
    int8 = [TensorRef("a;1", "SUB", ""), TensorRef("conv_int8", "CONV_2D", ""), TensorRef("x2", "ADD", "")]
    pairs, unmatched = match(fp32, int8, by_order=True)
    assert [(r.key, a.key) for r, a in pairs] == [("conv_fp32", "conv_int8")]  # same name, other op: not a pair
    assert unmatched["reference_only"] == ["a;1", "x", "y"]  # 2 ADDs against 1: not paired by order
    assert [(r.key, a.key) for r, a in match(fp32, int8)[0]] == [("a;1", "a;1")]  # by name only (ONNX, OpenVINO)


def test_tflite_layers_are_named_by_the_modules_litert_torch_records():
    from edgekit.backends.tflite.debug import module_layer

    root = "edgekit.zoo.models.FashionCNN"
    block = f"{root}/torch.nn.modules.container.Sequential_features/torch.nn.modules.container.Sequential_0"
    fused = ";;".join(f"{block}/torch.nn.modules.{kind}" for kind in ("activation.ReLU_2", "batchnorm.BatchNorm2d_1", "conv.Conv2d_0"))
    assert module_layer(fused + ";1") == "features.0.{0,1,2}"  # names as litert-torch writes them (FashionCNN, fp32)
    assert module_layer(f"{root}/torch.nn.modules.container.Sequential_features/torch.nn.modules.pooling.MaxPool2d_1;") == "features.1"
    stem = "efficientnet_lite_pytorch.utils.Conv2dStaticSamePadding__conv_stem"  # an attribute with a leading underscore
    assert module_layer(f"Lite/efficientnet_lite_pytorch.model.EfficientNet_net/{stem};1") == "net._conv_stem"
    for other in (f"{root};3", f"{root};;{root};", "sequential/conv2d/Relu;sequential/conv2d/BiasAdd", "serving_default_output_0"):
        assert module_layer(other) is None  # the root module only, or another converter's names: the op's index names it
