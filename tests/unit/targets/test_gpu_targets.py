"""Issue 8: TensorRT acceptance checks (everywhere), the TensorRT path (where TensorRT and a GPU are), and the
torch target's options (CPU here; CUDA where present)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from edgekit.backends.tensorrt.checks import check_for_tensorrt, errors_of
from edgekit.backends.tensorrt.loader import check_engine_identity
from edgekit.calibration import load_samples
from edgekit.conversion import CalibrationOptions, ConvertOptions, plan
from edgekit.converters.pipeline import convert
from edgekit.errors import EdgekitError, ModelLoadError
from edgekit.metrics.compare import accuracy_percent, run_batches
from edgekit.source import open_source
from edgekit.targets import make_runner, parse_target
from tests.conftest import INPUTS, assert_clean_error, run_cli


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


HAS_CUDA = _cuda()
HAS_TENSORRT = HAS_CUDA and importlib.util.find_spec("tensorrt") is not None
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="GPU test: no CUDA device on this machine")
needs_tensorrt = pytest.mark.skipif(not HAS_TENSORRT, reason="GPU test: TensorRT and a CUDA device are not on this machine")


@pytest.fixture(scope="module")
def trt_int8(tmp_path_factory, fashion_onnx, demo_data):
    """The FashionCNN ONNX quantized the TensorRT way (symmetric s8, float biases), on real calibration images."""
    out = tmp_path_factory.mktemp("trt") / "fashion.trt-int8.onnx"
    options = ConvertOptions("int8", (), CalibrationOptions(str(demo_data[1]), 300), for_target="tensorrt:cuda")
    return convert(open_source(str(fashion_onnx["fp32"])), "onnx", out, options)


@pytest.fixture(scope="module")
def test2k(small_test_npz):
    return load_samples(str(small_test_npz), specs=list(INPUTS))


def test_tensorrt_scheme_passes_the_checks_and_keeps_accuracy(trt_int8, fashion_onnx, test2k):
    import onnx
    from onnx import numpy_helper

    assert check_for_tensorrt(trt_int8.path) == []
    assert trt_int8.meta["provenance"]["tensorrt_checks"] == []
    model = onnx.load(str(trt_int8.path))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    qdq = [n for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    zero_points = [inits[n.input[2]] for n in qdq]
    assert qdq and all(z.dtype == np.int8 and not z.any() for z in zero_points)
    assert not any(inits[n.input[0]].dtype == np.int32 for n in qdq if n.input[0] in inits), "biases must stay float for TensorRT"
    # The symmetric scheme still classifies real images like fp32. Run on ONNX Runtime with the Q/DQ
    # nodes as written: TensorRT accumulates in int32, while x86 CPUs without VNNI run s8 x s8 through
    # saturating int16 sums (92.45% -> 89.10% on an AVX2 EPYC), which says nothing about TensorRT.
    fp32 = accuracy_percent(run_batches(make_runner(open_source(str(fashion_onnx["fp32"]))), test2k, 500)[0], test2k.labels)
    exact = make_runner(open_source(str(trt_int8.path)), "onnxruntime:cpu[optimization=disable]")
    int8 = accuracy_percent(run_batches(exact, test2k, 500)[0], test2k.labels)
    assert fp32 - int8 <= 0.5, (fp32, int8)


def test_onnxruntime_scheme_is_reported_as_rejected(fashion_onnx):
    findings = check_for_tensorrt(fashion_onnx["int8"])
    errors = errors_of(findings)
    assert {f.check for f in errors} == {"zero-point"}
    assert any("uint8" in f.message for f in errors) and any("int32" in f.message for f in errors)
    assert any("--for-target tensorrt:cuda" in f.message for f in findings)


def test_per_tensor_weights_and_unsupported_ops_are_reported(tmp_path, fashion_onnx, demo_data):
    import onnx
    from onnx import TensorProto, helper

    options = ConvertOptions("int8", (), CalibrationOptions(str(demo_data[1]), 100), per_tensor=True, for_target="tensorrt:cuda")
    per_tensor = convert(open_source(str(fashion_onnx["fp32"])), "onnx", tmp_path / "pt.onnx", options).path
    findings = check_for_tensorrt(per_tensor)
    assert not errors_of(findings) and [f.check for f in findings] == ["per-channel"]

    graph = helper.make_graph(
        [helper.make_node("Unique", ["x"], ["y"]), helper.make_node("Gelu", ["y"], ["z"], domain="com.microsoft")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [None])],
    )
    path = tmp_path / "ops.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]), path)
    findings = check_for_tensorrt(path)
    messages = " | ".join(f.message for f in findings)
    assert "no Unique" in messages and "com.microsoft::Gelu needs a TensorRT plugin" in messages and "opset 21" in messages
    assert [f.level for f in findings] == ["error", "error", "warning"]


def test_info_for_tensorrt_gates_with_exit_2(fashion_onnx, trt_int8):
    rejected = run_cli("info", fashion_onnx["int8"], "--for-target", "tensorrt:cuda")
    assert rejected.code == 2 and "TensorRT would reject it" in rejected.stdout and "uint8" in rejected.stdout
    accepted = run_cli("info", trt_int8.path, "--for-target", "tensorrt:cuda")
    assert accepted.code == 0 and "TensorRT checks: pass" in accepted.stdout
    assert_clean_error(
        run_cli("info", trt_int8.path, "--for-target", "litert:cpu"), "litert runs tflite models"
    )  # coverage needs its format


def test_tensorrt_plan_goes_through_edgekit_onnx():
    names = [(c.__name__, p) for c, p in plan("torch", "tensorrt", "int8")]
    assert names == [("TorchToOnnx", "fp32"), ("OnnxQuantizer", "int8"), ("OnnxToTensorrt", "int8")]
    assert [(c.__name__, p) for c, p in plan("keras", "tensorrt", "fp16")] == [
        ("KerasToOnnx", "fp32"),
        ("OnnxQuantizer", "fp16"),
        ("OnnxToTensorrt", "fp16"),
    ]
    with pytest.raises(EdgekitError, match="int8-dynamic"):
        plan("onnx", "tensorrt", "int8-dynamic")


@pytest.mark.skipif(HAS_TENSORRT, reason="checks the message shown where TensorRT is missing")
def test_convert_to_tensorrt_without_tensorrt_is_one_clear_line(tmp_path, fashion_onnx):
    out = tmp_path / "f.engine"
    result = run_cli("convert", fashion_onnx["fp32"], "--to", "tensorrt", "-o", out)
    assert_clean_error(result, "needs tensorrt", "pip install tensorrt")
    assert not out.exists()


def test_engine_identity_mismatch_is_a_clear_error(tmp_path):
    here = {"version": "10.13.0", "gpu": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}
    check_engine_identity(tmp_path / "m.engine", dict(here), here)
    check_engine_identity(tmp_path / "m.engine", None, here)  # an engine edgekit did not build: TensorRT itself decides
    with pytest.raises(ModelLoadError, match=r"built with TensorRT 10\.8\.0 .* this machine has TensorRT 10\.13\.0") as err:
        check_engine_identity(tmp_path / "m.engine", {**here, "version": "10.8.0"}, here)
    assert "rebuild it here" in err.value.hint
    with pytest.raises(ModelLoadError, match="compute capability 8.7"):
        check_engine_identity(tmp_path / "m.engine", {**here, "gpu": "Orin", "compute_capability": "8.7"}, here)


def test_target_options_parse_and_are_checked(fashion_source):
    assert parse_target("torch:cuda[compile=reduce-overhead, dtype=fp16]") == (
        "torch",
        "cuda",
        {"compile": "reduce-overhead", "dtype": "fp16"},
    )
    assert parse_target("onnxruntime") == ("onnxruntime", "cpu", {})
    runner = make_runner(fashion_source, "torch:cpu[dtype=bf16]", 1, list(INPUTS))
    assert runner.target == "torch:cpu[dtype=bf16]" and runner.settings == {"compile": "eager", "dtype": "bf16", "channels_last": "0"}
    assert make_runner(fashion_source, "torch:cpu[dtype=fp32]", 1, list(INPUTS)).target == "torch:cpu"
    with pytest.raises(EdgekitError, match="take no option 'threads'"):
        make_runner(fashion_source, "torch:cpu[threads=2]")
    with pytest.raises(EdgekitError, match="not one of"):
        make_runner(fashion_source, "torch:cpu[compile=fast]")
    with pytest.raises(EdgekitError, match="not key=value"):
        parse_target("torch:cpu[bf16]")


def test_torch_bf16_on_real_images_stays_close_to_fp32(fashion_source, test2k):
    fp32 = run_batches(make_runner(fashion_source, "torch:cpu", 2, list(INPUTS)), test2k, 500)[0]
    bf16 = run_batches(make_runner(fashion_source, "torch:cpu[dtype=bf16]", 2, list(INPUTS)), test2k, 500)[0]
    assert bf16.dtype == np.float32
    assert abs(accuracy_percent(fp32, test2k.labels) - accuracy_percent(bf16, test2k.labels)) <= 0.5
    assert (fp32.argmax(1) == bf16.argmax(1)).mean() >= 0.99
    assert not np.array_equal(fp32, bf16)  # bf16 really ran


def test_torch_channels_last_gives_the_same_outputs_on_real_images(fashion_source, test2k):
    import torch

    plain = make_runner(fashion_source, "torch:cpu", 1, list(INPUTS))
    nhwc = make_runner(fashion_source, "torch:cpu[channels_last=1]", 1, list(INPUTS))
    expected, got = run_batches(plain, test2k, 500)[0], run_batches(nhwc, test2k, 500)[0]
    assert nhwc.target == "torch:cpu[channels_last=1]"
    convs = [m.weight for m in nhwc.module.modules() if isinstance(m, torch.nn.Conv2d) and m.in_channels > 1]
    assert convs and all(w.is_contiguous(memory_format=torch.channels_last) and not w.is_contiguous() for w in convs)
    assert (expected.argmax(1) == got.argmax(1)).all()
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4 * np.abs(expected).max())


def test_torch_compile_time_is_reported_apart_from_run_time(fashion_source):
    from edgekit.validation.benchmark import BenchSettings, bench_in_process

    result = bench_in_process(fashion_source, BenchSettings("torch:cpu[compile=default]", 1, 1, 3, 20), list(INPUTS))
    assert result.target == "torch:cpu[compile=default]" and result.runtime_config["compile"] == "default"
    assert result.compile_ms is not None and result.compile_ms > 10 * result.latency.p50
    assert result.first_inference_ms < result.compile_ms
    eager = bench_in_process(fashion_source, BenchSettings("torch:cpu", 1, 1, 3, 20), list(INPUTS))
    assert eager.compile_ms is None
    assert eager.peak_gpu_memory_mb is None and "peak_gpu_memory_mb" in eager.to_dict()  # null off a GPU


@needs_cuda
@pytest.mark.parametrize(
    "target",
    [
        "torch:cuda",
        "torch:cuda[dtype=fp16]",
        "torch:cuda[compile=reduce-overhead,dtype=fp16]",
        "torch:cuda[compile=reduce-overhead,dtype=fp16,channels_last=1]",
    ],
)
def test_torch_cuda_validates_and_times_with_cuda_events(target, fashion_source, small_test_npz):
    from edgekit.validation.benchmark import BenchSettings
    from edgekit.validation.validate import ValidationRequest, validate

    request = ValidationRequest(
        fashion_source, fashion_source, target, str(small_test_npz), inputs=INPUTS, latency=BenchSettings(target, None, 1, 10, 50)
    )
    report = validate(request)
    assert abs(report["accuracy"]["drop_points"]) <= 0.5
    assert report["latency"]["runtime_latency"] is not None and report["latency"]["runtime_config"]["timing"] == "CUDA events"
    assert report["latency"]["peak_gpu_memory_mb"] > 0


@needs_tensorrt
@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_tensorrt_engine_builds_runs_and_keeps_accuracy(precision, tmp_path, fashion_source, demo_data, test2k):
    calib = CalibrationOptions(str(demo_data[1]), 300) if precision == "int8" else CalibrationOptions()
    engine = convert(fashion_source, "tensorrt", tmp_path / f"f.{precision}.engine", ConvertOptions(precision, INPUTS, calib))
    assert engine.meta["provenance"]["tensorrt"]["compute_capability"]
    reference = accuracy_percent(run_batches(make_runner(fashion_source, inputs=list(INPUTS)), test2k, 64)[0], test2k.labels)
    runner = make_runner(open_source(str(engine.path)), "tensorrt:cuda")
    assert reference - accuracy_percent(run_batches(runner, test2k, 64)[0], test2k.labels) <= 0.5
    assert runner.runtime_ms() > 0


def test_cli_validates_the_reference_on_another_torch_target(small_test_npz, weights_path, tmp_path):
    report = tmp_path / "r.json"
    args = ["validate", "edgekit.zoo.models:fashion_cnn", "-r", "edgekit.zoo.models:fashion_cnn", "--weights", weights_path]
    result = run_cli(
        *args,
        "-i",
        "image:1x1x28x28",
        "-d",
        small_test_npz,
        "-t",
        "torch:cpu[dtype=bf16]",
        "--runs",
        "10",
        "--max-drop",
        "0.5",
        "--report",
        report,
    )
    assert result.code == 0, result.stdout + result.stderr
    assert "torch:cpu[dtype=bf16]" in result.stdout
    import json

    saved = json.loads(report.read_text())
    assert saved["target"] == "torch:cpu[dtype=bf16]" and saved["latency"]["runtime_config"]["dtype"] == "bf16"
    assert abs(saved["accuracy"]["drop_points"]) <= 0.5
