"""int8 numerics of other CPUs, checked on any x86 host. An AVX2-only CPU: the int8 models run in ONNX Runtime
under `qemu-x86_64 -cpu Haswell`, whose CPUID offers AVX2 and no AVX-512/VNNI, so ONNX Runtime takes
the same VPMADDUBSW kernels as on an AVX2 EPYC. Arm64 CPUs: ONNX Runtime's aarch64 wheel under qemu-aarch64
(edgekit.emulation, the sysroot of `make arm64-sysroot`). Latency under emulation means nothing; numerics do."""

import platform
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from edgekit.conversion import CalibrationOptions, ConvertOptions
from edgekit.converters.pipeline import convert
from edgekit.emulation import ARM_CPUS, SYSROOT, arm_python, run_json, sysroot_missing
from edgekit.source import open_source

pytestmark = pytest.mark.skipif(
    platform.machine() != "x86_64" or shutil.which("qemu-x86_64") is None,
    reason="needs an x86-64 host with qemu-user (apt-get install qemu-user; .ci/run installs it)",
)
ARM_MISSING = sysroot_missing()  # why the emulated Arm CPUs cannot run here, or None
SAMPLES = 1000
EMULATED = """
import json, sys
import numpy as np, onnxruntime as ort
from edgekit.isa import host_class
images = np.load(sys.argv[1])["image"][:{n}]
def run(path):
    options = ort.SessionOptions(); options.intra_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(None, {{"image": images[i:i + 250]}})[0] for i in range(0, len(images), 250)]).argmax(1).tolist()
print(json.dumps({{"class": host_class().name, "top1": {{p: run(p) for p in sys.argv[2:]}}}}))
"""


def _emulated(cpu: str, data: Path, *models: Path) -> dict:
    return _run(["qemu-x86_64", "-cpu", cpu, sys.executable], data, *models)


def _run(python: list, data: Path, *models: Path) -> dict:
    """EMULATED's answer from `python` (an emulated interpreter's argv)."""
    return run_json(python, EMULATED.format(n=SAMPLES), [data, *models], timeout=600)


@pytest.fixture(scope="module")
def int8_for(tmp_path_factory, fashion_onnx, demo_data):
    out = tmp_path_factory.mktemp("isa")

    def make(isa_class: str) -> Path:
        options = ConvertOptions("int8", (), CalibrationOptions(str(demo_data[1]), 300), for_target=isa_class)
        return convert(open_source(str(fashion_onnx["fp32"])), "onnx", out / f"{isa_class}.onnx", options).path

    return make


def test_the_avx2_scheme_keeps_accuracy_where_the_vnni_scheme_saturates(int8_for, fashion_onnx, small_test_npz):
    avx2, vnni = int8_for("x86-avx2"), int8_for("x86-vnni")
    result = _emulated("Haswell", small_test_npz, avx2, vnni)
    assert result["class"] == "x86-avx2"  # CPUID, not the host's /proc/cpuinfo, decides the class
    reference = _native_top1(fashion_onnx["fp32"], small_test_npz)
    agree = {p: 100 * float(np.mean(np.array(result["top1"][str(p)]) == reference)) for p in (avx2, vnni)}
    assert agree[avx2] >= 99.5, agree  # pair-safe u8 x s8, its channels reordered (backends.onnx.channel_order): no saturation
    assert agree[vnni] <= agree[avx2] - 1.0, agree  # u8 x s8 saturates without VNNI (97.55%): the emulation is real


@pytest.mark.skipif(ARM_MISSING is not None, reason=ARM_MISSING or "")
def test_the_arm_scheme_keeps_accuracy_on_onnx_runtimes_arm_kernels(int8_for, fashion_onnx, small_test_npz):
    """s8 x s8 on a Cortex-A72 (widening multiplies), an A76 (SDOT) and an I8MM core (SMMLA): each accumulates in
    int32, so the three agree with each other exactly, and with fp32 as on an x86 host with VNNI."""
    model = int8_for("arm64-dotprod")  # one scheme for the three classes (edgekit.isa)
    results = {}
    for isa_class in ARM_CPUS:
        results[isa_class] = _run([arm_python(SYSROOT, isa_class)], small_test_npz, model)
    assert {name: r["class"] for name, r in results.items()} == {name: name for name in ARM_CPUS}  # from /proc/cpuinfo
    top1 = {name: np.array(r["top1"][str(model)]) for name, r in results.items()}
    assert all(np.array_equal(top1["arm64"], other) for other in top1.values())
    reference = _native_top1(fashion_onnx["fp32"], small_test_npz)
    assert 100 * float(np.mean(top1["arm64"] == reference)) >= 99.5


def _native_top1(model: Path, data: Path) -> np.ndarray:
    from edgekit.targets import make_runner

    runner = make_runner(open_source(str(model)), threads=1)
    runner.load()
    images = np.load(data)["image"][:SAMPLES]
    return np.concatenate([runner.infer({"image": images[i : i + 250]})[0] for i in range(0, SAMPLES, 250)]).argmax(1)


PAIRS = """
import json, sys
import numpy as np, onnxruntime as ort
session = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
x = np.full((1, 8, 2, 2), 255, np.uint8)
print(json.dumps(session.run(None, {"x": x})[0][0, :, 0, 0].tolist()))
"""


def test_vpmaddubsw_pairs_adjacent_input_channels_and_128_is_the_safe_pair_sum(tmp_path):
    """What quantization.pair_safe rests on, on ONNX Runtime's own AVX2 kernel: a u8 x s8 1x1 QLinearConv sums
    a_k w_k + a_k+1 w_k+1 (k even) in int16, so a pair of codes 127 + 127 against activations of 255 clips,
    the same codes two channels apart do not, nor a pair that keeps |w| + |w'| <= 128."""
    from onnx import TensorProto, helper, numpy_helper

    rows = {  # output channel: weight codes over the 8 input channels, exact sum of 255 x codes
        "adjacent 127+127": [127, 127, 0, 0, 0, 0, 0, 0],
        "127, 127 two apart": [127, 0, 127, 0, 0, 0, 0, 0],
        "pairs of 64+64": [64, 64, 64, 64, 0, 0, 0, 0],
        "pairs of 100+28, negative": [-100, -28, -28, -100, 0, 0, 0, 0],
    }
    weights = np.array(list(rows.values()), np.int8).reshape(len(rows), 8, 1, 1)
    scalar = lambda name, value, dtype: numpy_helper.from_array(np.array(value, dtype), name)  # noqa: E731
    graph = helper.make_graph(
        [helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"])],
        "pairs",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 8, 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, len(rows), 2, 2])],
        [
            scalar("xs", 1.0, np.float32), scalar("xz", 0, np.uint8), numpy_helper.from_array(weights, "w"),
            numpy_helper.from_array(np.ones(len(rows), np.float32), "ws"), numpy_helper.from_array(np.zeros(len(rows), np.int8), "wz"),
            scalar("ys", 1024.0, np.float32), scalar("yz", 128, np.uint8),
        ],
    )  # fmt: skip
    path = tmp_path / "pairs.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
    sums = run_json(["qemu-x86_64", "-cpu", "Haswell", sys.executable], PAIRS, [path], timeout=300)
    got = dict(zip(rows, sums, strict=True))
    exact = {name: 128 + round(255 * sum(codes) / 1024) for name, codes in rows.items()}
    assert got["adjacent 127+127"] == 128 + round(32767 / 1024) != exact["adjacent 127+127"], got  # clipped at the int16 limit
    assert {k: v for k, v in got.items() if k != "adjacent 127+127"} == {k: v for k, v in exact.items() if k != "adjacent 127+127"}
