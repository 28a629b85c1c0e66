"""What a report says is what ran, and nothing is reported as written unless its runtime runs it."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.conversion import CalibrationOptions, ConvertOptions
from edgekit.converters.pipeline import convert
from edgekit.errors import ConversionError, EdgekitError
from edgekit.source import ModelSource, open_source
from edgekit.targets import make_runner
from tests.conftest import INPUTS


@pytest.mark.parametrize(
    ("target", "needle"),
    [("onnxruntime:gpu", "onnxruntime-gpu"), ("openvino:npu", "NPU driver"), ("openvino:gpu", "GPU")],
)
def test_a_device_that_is_not_here_is_an_error_naming_what_to_install(fashion_onnx, target, needle):
    runner = make_runner(open_source(str(fashion_onnx["fp32"])), target)
    with pytest.raises(EdgekitError) as info:
        runner.load()
    assert needle in info.value.one_line()


def test_litert_npu_is_not_run_on_the_cpu(tmp_path):
    runner = make_runner(ModelSource(str(tmp_path / "m.tflite"), "tflite"), "litert:npu")
    with pytest.raises(EdgekitError, match="litert has no device 'npu' here") as info:
        runner.load()  # refused before the file is even read
    assert "LiteRT delegate" in info.value.hint


def test_an_option_the_backend_ignores_is_an_error(tmp_path, fashion_source, fashion_onnx, demo_data):
    with pytest.raises(EdgekitError, match="--calib-method entropy is not available in tflite's int8"):
        method = CalibrationOptions(str(demo_data[1]), 50, "entropy")  # torchao has no entropy observer
        convert(fashion_source, "tflite", tmp_path / "m.tflite", ConvertOptions("int8", INPUTS, method))
    with pytest.raises(EdgekitError, match="--calib-method entropy is not available in openvino's int8"):
        method = CalibrationOptions(str(demo_data[1]), 50, "entropy")
        nncf = ConvertOptions("int8", INPUTS, method, for_target="arm64-dotprod")  # on x86-avx2/vnni/amx a CNN goes through ONNX Runtime
        convert(open_source(str(fashion_onnx["fp32"])), "openvino", tmp_path / "m.xml", nncf)
    with pytest.raises(EdgekitError, match="--per-tensor applies to int8 quantization, not fp16"):
        convert(open_source(str(fashion_onnx["fp32"])), "onnx", tmp_path / "h.onnx", ConvertOptions("fp16", INPUTS, per_tensor=True))
    assert not list(tmp_path.iterdir())


def _nan_model(fp32, path):
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(fp32))
    for init in model.graph.initializer:
        if init.name == "classifier.3.weight":
            init.CopyFrom(numpy_helper.from_array(np.full_like(numpy_helper.to_array(init), np.nan), init.name))
    onnx.save(model, str(path))
    return path


def test_a_conversion_with_non_finite_outputs_writes_nothing(tmp_path, fashion_onnx):
    broken = open_source(str(_nan_model(fashion_onnx["fp32"], tmp_path / "nan.onnx")))
    with pytest.raises(ConversionError, match=r"non-finite outputs \(.+\) on generated probes"):
        convert(broken, "openvino", tmp_path / "out" / "m.xml", ConvertOptions("fp32", INPUTS))
    assert not (tmp_path / "out" / "m.xml").exists()


def test_an_opset_12_per_channel_int8_that_onnxruntime_refuses_is_not_written(tmp_path, demo_data):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.normal(size=(8, 1, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array((rng.normal(size=(8 * 26 * 26, 10)) / 100).astype(np.float32), "w2"),
        numpy_helper.from_array(np.array([-1, 8 * 26 * 26], np.int64), "s"),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "w"], ["c"]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Reshape", ["r", "s"], ["f"]),
        helper.make_node("MatMul", ["f", "w2"], ["logits"]),
    ]
    image = helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, 28, 28])
    graph = helper.make_graph(nodes, "op12", [image], [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    model.ir_version = 7
    onnx.save(model, str(tmp_path / "op12.onnx"))
    out = tmp_path / "op12.int8.onnx"
    artifact = convert(
        open_source(str(tmp_path / "op12.onnx")), "onnx", out, ConvertOptions("int8", (), CalibrationOptions(str(demo_data[1]), 50))
    )
    # per-channel DequantizeLinear needs opset 13: the quantizer raised it, said so, and what it wrote runs
    quantization = artifact.meta["provenance"]["quantization"]
    assert quantization["opset"]["from"] == 12 and quantization["opset"]["to"] == 13 and quantization["per_channel"]
    assert max(o.version for o in onnx.load(str(out)).opset_import if o.domain in ("", "ai.onnx")) >= 13
    verified = artifact.meta["provenance"]["verified"]
    assert verified["result"] == "match" and verified["runtime"] == "onnxruntime:cpu" and verified["inputs"].startswith("8 samples")
