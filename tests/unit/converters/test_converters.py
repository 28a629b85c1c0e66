import numpy as np
import onnx
import pytest

from edgekit.conversion import CalibrationOptions, ConvertOptions, needs_calibration, plan
from edgekit.converters.pipeline import convert
from edgekit.errors import EdgekitError
from edgekit.quantization.scheme import choose_scheme
from edgekit.source import open_source


def test_plan_exports_fp32_then_quantizes():
    steps = plan("torch", "onnx", "int8")
    assert [(c.__name__, p) for c, p in steps] == [("TorchToOnnx", "fp32"), ("OnnxQuantizer", "int8")]
    assert needs_calibration(steps) and not needs_calibration(plan("torch", "onnx", "fp16"))
    assert [c.__name__ for c, _ in plan("onnx", "onnx", "fp16")] == ["OnnxQuantizer"]


def test_plan_refuses_unknown_routes_and_precisions():
    with pytest.raises(EdgekitError, match="cannot convert"):
        plan("onnx", "tflite", "fp32")
    with pytest.raises(EdgekitError, match="choose one of: fp16, fp32, int8, int8-dynamic"):
        plan("torch", "onnx", "int4")


def test_int8_without_calibration_fails_before_any_work(tmp_path, fashion_source):
    out = tmp_path / "m.onnx"
    with pytest.raises(EdgekitError, match="needs calibration data"):
        convert(fashion_source, "onnx", out, ConvertOptions("int8"))
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_scheme_follows_the_target():
    trt = choose_scheme("tensorrt:cuda")
    assert (trt.activations, trt.weights, trt.symmetric_activations) == ("int8", "int8", True)
    assert choose_scheme("onnxruntime:tensorrt").symmetric_activations
    assert choose_scheme("onnxruntime:cpu").weights == "int8"


def _quant_params(path):
    model = onnx.load(str(path))
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    return [(inits[n.input[1]], inits[n.input[2]]) for n in model.graph.node if n.op_type == "QuantizeLinear" and len(n.input) > 2]


def test_tensorrt_qdq_is_symmetric_int8_with_per_channel_weights(tmp_path, fashion_onnx, demo_data):
    opts = ConvertOptions("int8", calibration=CalibrationOptions(str(demo_data[1]), 64), for_target="tensorrt:cuda")
    artifact = convert(open_source(str(fashion_onnx["fp32"])), "onnx", tmp_path / "trt.onnx", opts)
    params = _quant_params(artifact.path)
    assert params and all(zp.dtype == np.int8 and not zp.any() for _, zp in params)
    model = onnx.load(str(artifact.path))
    weight_dq = [
        n for n in model.graph.node if n.op_type == "DequantizeLinear" and any(i.name == n.input[0] for i in model.graph.initializer)
    ]
    inits = {i.name: i for i in model.graph.initializer}
    assert any(len(inits[n.input[1]].dims) == 1 and inits[n.input[1]].dims[0] > 1 for n in weight_dq)  # per-channel scales


def test_cpu_int8_uses_the_host_class_scheme_and_records_why(fashion_onnx):
    from edgekit.isa import host_class
    from edgekit.provenance import read_provenance

    host = host_class()
    prov = read_provenance(fashion_onnx["int8"])
    quantization = prov["quantization"]
    assert (quantization["activations"], quantization["weights"]) == (host.activations, host.weights)
    assert quantization["isa_class"] == host.name and quantization["isa_from"] == "this host's CPU flags"
    assert quantization["reason"].startswith(host.name)
    assert prov["calibration"]["samples"] == 300 and len(prov["calibration"]["sha256"]) == 64
    activation_zps = [zp for _, zp in _quant_params(fashion_onnx["int8"]) if zp.dtype == np.dtype(host.activations)]
    assert activation_zps
    assert quantization["method"] == "histogram" and quantization["tensors_narrowed"] > 0  # --calib-method auto on ORT
    model = onnx.load(str(fashion_onnx["int8"]))
    producers = {o: n.op_type for n in model.graph.node for o in n.output}
    assert all(producers[o.name] != "DequantizeLinear" for o in model.graph.output)  # outputs not rounded to 8 bits


def test_fp16_keeps_float32_io_and_dynamic_int8(tmp_path, fashion_onnx):
    source = open_source(str(fashion_onnx["fp32"]))
    fp16 = convert(source, "onnx", tmp_path / "h.onnx", ConvertOptions("fp16"))
    assert fp16.inputs[0].dtype == "float32" and fp16.outputs[0].dtype == "float32"
    assert any(i.data_type == onnx.TensorProto.FLOAT16 for i in onnx.load(str(fp16.path)).graph.initializer)
    dyn = convert(source, "onnx", tmp_path / "d.onnx", ConvertOptions("int8-dynamic"))
    assert "DynamicQuantizeLinear" in {n.op_type for n in onnx.load(str(dyn.path)).graph.node}
    assert dyn.precision == "int8-dynamic"


@pytest.mark.parametrize("method", ["percentile", "entropy"])
def test_histogram_calibration_with_an_uneven_sample_count(tmp_path, fashion_onnx, demo_data, method):
    # 150 samples do not split into batches of 16: ONNX Runtime's histogram calibrators fail on a short last batch.
    opts = ConvertOptions("int8", calibration=CalibrationOptions(str(demo_data[1]), 150, method))
    artifact = convert(open_source(str(fashion_onnx["fp32"])), "onnx", tmp_path / f"{method}.onnx", opts)
    assert artifact.meta["provenance"]["quantization"]["method"] == method


def test_a_layer_kept_in_float_stays_float_in_the_onnx_runtime_session(tmp_path, fashion_onnx, demo_data):
    # Fed by a DequantizeLinear, ORT's WeightBiasQuantization would give the float weights per-tensor int8 at load.
    import onnxruntime as ort

    options = ConvertOptions("int8", calibration=CalibrationOptions(str(demo_data[1]), 64), exclude=("node_Conv_55",), keep_sensitive=False)
    artifact = convert(open_source(str(fashion_onnx["fp32"])), "onnx", tmp_path / "kept.onnx", options)
    producers = {o: n for n in onnx.load(str(artifact.path)).graph.node for o in n.output}
    kept = next(n for n in producers.values() if n.name == "node_Conv_55")
    assert producers[kept.input[0]].op_type == "Clip"  # DQ -> Clip -> Conv: the pattern ORT does not re-quantize
    session = ort.SessionOptions()
    session.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    session.optimized_model_filepath = str(tmp_path / "as_run.onnx")
    ort.InferenceSession(str(artifact.path), session, providers=["CPUExecutionProvider"])
    as_run = onnx.load(str(tmp_path / "as_run.onnx"))
    weight = next(n for n in as_run.graph.node if n.name == "node_Conv_55").input[1]
    assert weight in {i.name for i in as_run.graph.initializer if i.data_type == onnx.TensorProto.FLOAT}
