"""Devices over SSH, end to end: a real sshd on 127.0.0.1 and a "device" Python with only numpy,
onnxruntime and ai-edge-litert. No mocks: every case goes through the system ssh to a real sshd."""

from __future__ import annotations

import ast
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from edgekit.devices.inventory import Device, device_facts, get_device, inventory_path
from edgekit.devices.remote import RUNNER_SCRIPT, content_key, split_target
from edgekit.targets import device_name
from tests.conftest import assert_clean_error, run_cli
from tests.sshd import bare_python, device_venv, sshd_unavailable, start_sshd, stop_sshd

WEIGHTS = Path(__file__).resolve().parents[2] / "edgekit" / "zoo" / "data" / "fashion_cnn.pt"
REFERENCE = ("-r", "edgekit.zoo.models:fashion_cnn", "--weights", str(WEIGHTS))


# ---------------------------------------------------------------- no SSH needed


def test_targets_on_a_device_are_parsed_apart():
    assert device_name("onnxruntime:cpu@pi5") == "pi5"
    assert device_name("onnxruntime:cpu") is None and device_name(None) is None
    assert device_name("torch:cuda[compile=default]") is None
    assert split_target("onnxruntime:cpu@pi5") == ("onnxruntime:cpu", "pi5")
    assert split_target("openvino:npu@nuc[x=y]") == ("openvino:npu[x=y]", "nuc")


def test_ssh_destinations():
    assert Device("a", "pi@pi5.local:2222").destination() == ("pi@pi5.local", 2222)
    assert Device("a", "pi5").destination() == ("pi5", None)  # an alias from ~/.ssh/config
    assert Device("a", "root@[::1]:22").destination() == ("root@::1", 22)


def test_device_runner_imports_only_stdlib_numpy_and_runtimes():
    allowed = set(sys.stdlib_module_names) | {"numpy", "onnxruntime", "ai_edge_litert", "tflite_runtime", "tensorflow", "openvino"}
    tree = ast.parse(RUNNER_SCRIPT.read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported - {"__future__"} <= allowed, imported - allowed
    assert "edgekit" not in imported and "torch" not in imported


def test_inventory_add_preset_remove(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_DEVICES", str(tmp_path / "devices.yaml"))
    added = run_cli("devices", "add", "pi5", "--ssh", "pi@pi5.local", "--preset", "raspberry-pi-5")
    assert added.code == 0, added.stderr
    assert "litert:cpu@pi5" in added.stdout
    device = get_device("pi5")
    assert (device.preset, device.cooldown_s, device.python) == ("raspberry-pi-5", 10.0, "python3")
    assert inventory_path() == tmp_path / "devices.yaml" and device_facts("pi5") == {}
    assert_clean_error(run_cli("devices", "add", "pi5", "--ssh", "other"), "exists already")
    assert_clean_error(run_cli("devices", "add", "x", "--ssh", "h", "--preset", "nope"), "no preset 'nope'")
    assert "pi5" in run_cli("devices", "list").stdout
    assert run_cli("devices", "remove", "pi5").code == 0
    assert_clean_error(run_cli("devices", "check", "pi5"), "no device 'pi5'")


# ---------------------------------------------------------------- over a real sshd


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    reason = sshd_unavailable()
    if reason:
        pytest.skip(reason)
    try:
        server = start_sshd(tmp_path_factory.mktemp("sshd"))
    except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"sshd cannot be started here: {exc}")
    yield server
    stop_sshd(server)


@pytest.fixture(scope="module")
def device_python(sshd) -> Path:
    return device_venv()


@pytest.fixture(scope="module")
def inventory(tmp_path_factory):
    """A fresh inventory for this module's devices (the CLI subprocesses inherit the variable)."""
    path = tmp_path_factory.mktemp("inventory") / "devices.yaml"
    old = os.environ.get("EDGEKIT_DEVICES")
    os.environ["EDGEKIT_DEVICES"] = str(path)
    yield path
    if old is None:
        del os.environ["EDGEKIT_DEVICES"]
    else:
        os.environ["EDGEKIT_DEVICES"] = old


def add_device(name: str, server, python: Path, workdir: Path, key: Path | None = None, *extra: str) -> None:
    result = run_cli(
        "devices", "add", name, "--ssh", server.destination, "--identity", key or server.key, "--python", python,
        "--workdir", workdir, *server.ssh_options(), *extra,
    )  # fmt: skip
    assert result.code == 0, result.stderr


@pytest.fixture(scope="module")
def loop(sshd, device_python, inventory, tmp_path_factory) -> str:
    add_device("loop", sshd, device_python, tmp_path_factory.mktemp("device-cache"))
    return "loop"


def test_check_probes_and_records_the_device(loop, device_python):
    result = run_cli("devices", "check", loop)
    assert result.code == 0, result.stderr
    facts = device_facts(loop)
    assert facts["arch"] == platform.machine()
    assert facts["python_path"] == str(device_python)
    assert facts["runtimes"]["onnxruntime"] == "1.32.0" and facts["runtimes"]["litert"] == "2.3.0"
    assert facts["runtimes"]["openvino"] is None  # the device has only what it was given
    assert facts["emulated"] is None  # a real CPU (the emulated Pi 5 below says it is one)
    assert "CPUExecutionProvider" in facts["accelerators"]["onnxruntime_providers"]
    assert get_device(loop).checked
    assert "onnxruntime: 1.32.0" in result.stdout


def test_validate_on_the_device_reports_its_facts(loop, fashion_onnx, small_test_npz, tmp_path):
    report = tmp_path / "r.json"
    args = ("-d", small_test_npz, "--limit", "500", "-t", f"onnxruntime:cpu@{loop}", "--runs", "20", "--report", report)
    result = run_cli("validate", fashion_onnx["int8"], *REFERENCE, *args, "--max-drop", "2")
    assert result.code == 0, result.stderr
    assert "measured on device loop" in result.stdout
    data = json.loads(report.read_text())
    assert data["target"] == "onnxruntime:cpu@loop" and data["latency"]["target"] == "onnxruntime:cpu@loop"
    assert data["device"]["name"] == "loop" and data["device"]["facts"]["arch"] == platform.machine()
    assert data["device"]["facts"]["runtimes"]["onnxruntime"] == "1.32.0"
    assert set(data["device"]["thermal"]) == {"before", "after"}
    assert data["accuracy"]["samples"] == 500 and data["gate"]["passed"]
    assert len(data["latency"]["times_ms"]) == 20 and data["latency"]["latency"]["runs"] == 20


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_device_outputs_equal_a_local_run_bit_for_bit(loop, fashion_onnx, small_test_npz, precision):
    from edgekit.source import ModelSource
    from edgekit.targets import make_runner

    source = ModelSource(str(fashion_onnx[precision]), "onnx")
    with np.load(small_test_npz) as npz:
        images = npz["image"][:256]
    remote, local = make_runner(source, f"onnxruntime:cpu@{loop}", 2), make_runner(source, "onnxruntime:cpu", 2)
    try:
        for start in range(0, 256, 64):
            feeds = {"image": images[start : start + 64]}
            (on_device,), (here,) = remote.infer(feeds), local.infer(feeds)
            assert on_device.dtype == here.dtype and np.array_equal(on_device, here)
    finally:
        remote.close()
    assert remote.threads == 2 and remote.target == "onnxruntime:cpu@loop"


def test_bench_on_the_device_and_a_rerun_copies_nothing(loop, fashion_onnx, tmp_path):
    from edgekit.devices import ssh
    from edgekit.devices.remote import artifact_files
    from edgekit.source import ModelSource

    report = tmp_path / "b.json"
    result = run_cli("bench", fashion_onnx["fp32"], "-t", f"onnxruntime:cpu@{loop}", "--threads", "1", "--runs", "30", "--report", report)
    assert result.code == 0, result.stderr
    (row,) = json.loads(report.read_text())["results"]
    assert row["target"] == "onnxruntime:cpu@loop" and row["threads"] == 1 and row["runtime_version"] == "1.32.0"
    assert len(row["times_ms"]) == 30 and row["latency"]["p50"] == pytest.approx(float(np.percentile(row["times_ms"], 50)), rel=1e-3)
    assert row["peak_rss_mb"] > 0 and row["load_ms"] > 0 and row["device"]["name"] == "loop"
    files = artifact_files(ModelSource(str(fashion_onnx["fp32"]), "onnx"))
    assert ssh.sync(get_device(loop), [ssh.Upload(content_key("artifacts", files), files)]) == 0  # already there


def test_taskset_pins_the_timed_runs(sshd, device_python, inventory, fashion_onnx, tmp_path):
    add_device("pinned", sshd, device_python, tmp_path / "cache", None, "--taskset", "0")
    report = tmp_path / "b.json"
    assert run_cli("bench", fashion_onnx["fp32"], "-t", "onnxruntime:cpu@pinned", "--runs", "5", "--report", report).code == 0
    (row,) = json.loads(report.read_text())["results"]
    assert row["device"]["taskset"] == "0" and row["device"]["facts"]["usable_cores"] == 1 and row["threads"] == 1


@pytest.mark.parametrize("fixture", ["loop", "pi5"])
def test_a_recipe_runs_its_cells_on_the_device(fixture, request, small_test_npz, tmp_path):
    """On the loopback device and on the emulated Pi 5, whose row the Markdown report flags: its latency is not a Pi's.
    100 samples (300 cost the emulated Pi 5 a third more, about 0.13 s a sample under qemu): the fp32 answers equal
    PyTorch's on every one. Accuracy on a device is measured on 500 (the loopback's validate, the Pi 5's int8)."""
    device = request.getfixturevalue(fixture)
    recipe = tmp_path / "edgekit.yaml"
    recipe.write_text(
        f"version: 1\nmodel:\n  path: edgekit.zoo.models:fashion_cnn\n  weights: {WEIGHTS}\n  inputs: ['image:batchx1x28x28']\n"
        f"validation:\n  path: {small_test_npz}\n  limit: 100\nmatrix:\n  formats: [onnx]\n  precisions: [fp32]\n"
        f"  targets:\n    onnx: [onnxruntime:cpu@{device}]\nlatency:\n  threads: 1\n  runs: 10\n  warmup: 2\n"
        f"gates:\n  max_drop: 1.0\nreport:\n  dir: {tmp_path / 'out'}\n  formats: [json, md]\n"
    )
    result = run_cli("run", recipe, "-q")
    assert result.code == 0, result.stdout + result.stderr
    (row,) = json.loads((tmp_path / "out" / "report.json").read_text())["rows"]
    assert row["status"] == "ok" and row["target"] == f"onnxruntime:cpu@{device}" and row["passed"]
    assert row["drop_points"] == 0 and len(row["times_ms"]) == 10
    emulated = "qemu-aarch64 -cpu cortex-a76" if device == "pi5" else None
    assert row["emulated"] == emulated
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert (f"timed on an EMULATED CPU ({emulated})" in markdown) == (emulated is not None), markdown


def test_tune_times_its_candidates_on_the_device(loop, small_test_npz, tmp_path):
    """`edgekit tune -t onnxruntime:cpu@loop`: fp32 and fp16 at 1 and 2 threads (fp16 is tried on a board: its CPU is not
    this one), a round of short timings and the finalists' full ones, every one run on the device over SSH."""
    result = run_cli(
        "tune", "edgekit.zoo.models:fashion_cnn", "--weights", WEIGHTS, "--input", "image:batchx1x28x28", "-d", small_test_npz,
        "--limit", "100", "-t", f"onnxruntime:cpu@{loop}", "--precisions", "fp32,fp16", "--threads", "1,2", "--runs", "20",
        "--warmup", "2", "--max-drop", "1", "--workdir", tmp_path / "tune", "-q",
    )  # fmt: skip
    assert result.code == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "tune" / "report.json").read_text())
    timed = [r for r in report["rows"] if r["tune"]["rounds"]]
    assert len(timed) == 4 and all(r["timed_on"]["machine"] == loop and r["target"] == f"onnxruntime:cpu@{loop}" for r in timed)
    again = [r.get("processes") == 2 for r in timed if len(r["tune"]["rounds"]) > 1]  # close finalists: A B B A
    finals = [2, 2] if not any(again) else [3, 3]
    assert sorted(len(r["tune"]["rounds"]) for r in timed) == [1, 1, *finals] and len(set(again)) == 1  # two halved after 10 runs
    assert report["choice"]["target"] == f"onnxruntime:cpu@{loop}" and report["choice"]["threads"] in (1, 2)


def test_a_wrong_key_is_refused(sshd, device_python, inventory, tmp_path):
    from tests.sshd import keygen

    add_device("wrongkey", sshd, device_python, tmp_path, key=keygen(tmp_path / "not_authorized"))
    assert_clean_error(run_cli("devices", "check", "wrongkey"), "refused the SSH key")
    assert device_facts("wrongkey") == {}  # nothing recorded


def test_an_unreachable_host(device_python, inventory, tmp_path):
    from tests.sshd import free_port

    assert run_cli("devices", "add", "gone", "--ssh", f"root@127.0.0.1:{free_port()}", "--timeout", "3").code == 0
    assert_clean_error(run_cli("devices", "check", "gone"), "unreachable", "Connection refused")


def test_a_runtime_missing_on_the_device_names_its_package(loop, fashion_onnx):
    result = run_cli("bench", fashion_onnx["fp32"], "-t", f"openvino:cpu@{loop}", "--runs", "5")
    assert_clean_error(result, "openvino is not installed on device 'loop'", f"({platform.machine()}", "pip install openvino")


def test_a_device_without_numpy(sshd, inventory, fashion_onnx, tmp_path):
    add_device("nonumpy", sshd, bare_python(tmp_path / "bare"), tmp_path / "cache")
    assert_clean_error(run_cli("devices", "check", "nonumpy"), "numpy is not installed", "pip install numpy")
    assert_clean_error(run_cli("bench", fashion_onnx["fp32"], "-t", "onnxruntime:cpu@nonumpy"), "numpy is not installed")


def test_an_artifact_the_device_cannot_load(loop, tmp_path):
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("Mystery", ["x"], ["y"], domain="com.example")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    onnx.save(model, tmp_path / "mystery.onnx")
    result = run_cli("bench", tmp_path / "mystery.onnx", "-t", f"onnxruntime:cpu@{loop}", "--runs", "5")
    assert_clean_error(result, "device 'loop'", "cannot load the artifact", "Mystery")


def test_sshd_killed_mid_run(device_python, inventory, fashion_onnx, tmp_path):
    """The board goes away during the timed runs: one clean error, no result, and no orphaned runner left there."""
    if sshd_unavailable():
        pytest.skip(sshd_unavailable())
    server = start_sshd(tmp_path / "sshd")
    workdir = tmp_path / "cache"
    try:
        add_device("dies", server, device_python, workdir)
        report = tmp_path / "b.json"
        args = [sys.executable, "-m", "edgekit", "bench", str(fashion_onnx["fp32"]), "-t", "onnxruntime:cpu@dies", "--runs", "100000000"]
        cli = subprocess.Popen([*args, "--report", str(report)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        runner = _wait_for_device_runner(workdir, cli)
        server.kill()
        stdout, stderr = cli.communicate(timeout=120)
    finally:
        stop_sshd(server)
    from tests.conftest import CliResult

    assert_clean_error(CliResult(cli.returncode, stdout, stderr), "connection to device 'dies' was lost")
    assert not report.exists()
    assert _gone(runner), "the runner on the device outlived its connection"


def _wait_for_device_runner(workdir: Path, cli: subprocess.Popen) -> int:
    """The pid of the runner timing on the device: `... device_runner.py bench ...` running in this test's cache folder."""
    for _ in range(600):
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
                cwd = os.readlink(proc / "cwd")
            except OSError:
                continue
            if b"bench" in argv and any(a.endswith(b"device_runner.py") for a in argv) and cwd == str(workdir):
                return int(proc.name)
        assert cli.poll() is None, cli.communicate()
        time.sleep(0.1)
    raise AssertionError("the runner never started on the device")


def _gone(pid: int) -> bool:
    for _ in range(100):  # it notices its parent is gone within a second
        if not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]:
            return True
        time.sleep(0.1)
    return False


def test_a_full_disk_on_the_device(sshd, device_python, inventory, fashion_onnx, tmp_path):
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(tiny)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tiny tmpfs as the device's disk here: {mounted.stderr.strip()}")
    try:
        add_device("full", sshd, device_python, tiny)
        assert_clean_error(
            run_cli("bench", fashion_onnx["fp32"], "-t", "onnxruntime:cpu@full"), "disk of device 'full' is full", "MiB needed"
        )
        assert not list(tiny.glob("artifacts/*"))  # nothing half-copied
    finally:
        subprocess.run(["umount", str(tiny)], check=True)


@pytest.fixture(scope="module")
def keras_int8_tflite(demo_data, tmp_path_factory) -> Path:
    """The Keras FashionCNN as int8 TFLite with int8 I/O (quantized on the device by its runner)."""
    pytest.importorskip("tensorflow")
    from edgekit.conversion import CalibrationOptions, ConvertOptions
    from edgekit.converters.pipeline import convert
    from edgekit.source import open_source
    from edgekit.zoo.fashion_mnist import KERAS_MODEL

    out = tmp_path_factory.mktemp("keras-tflite")
    with np.load(demo_data[1]) as npz:  # the Keras model takes NHWC
        np.savez(out / "calib.npz", image=npz["image"][:100].transpose(0, 2, 3, 1))
    options = ConvertOptions("int8", (), CalibrationOptions(str(out / "calib.npz"), 100), io_dtype="int8")
    return convert(open_source(str(KERAS_MODEL)), "tflite", out / "k.int8.tflite", options).path


def _assert_litert_equals_local(device: str, model: Path, data: Path, count: int) -> None:
    """The first `count` images (NHWC) through LiteRT on the device and through edgekit's local runner: equal to the bit,
    batch by batch, and the device ran ai_edge_litert."""
    from edgekit.source import ModelSource
    from edgekit.targets import make_runner

    with np.load(data) as npz:
        images = np.ascontiguousarray(npz["image"][:count].transpose(0, 2, 3, 1))
    source = ModelSource(str(model), "tflite")
    remote, local = make_runner(source, f"litert:cpu@{device}", 2), make_runner(source, "litert:cpu", 2)
    remote.load()
    local.load()
    assert remote.inputs == local.inputs and remote.output_names == local.output_names
    name = local.inputs[0].name
    try:
        for start in range(0, count, 32):
            (on_device,), (here,) = remote.infer({name: images[start : start + 32]}), local.infer({name: images[start : start + 32]})
            assert on_device.dtype == here.dtype and np.array_equal(on_device, here)
    finally:
        remote.close()
    assert remote.config()["interpreter"] == "ai_edge_litert"


def test_litert_int8_on_the_device_equals_a_local_run(loop, keras_int8_tflite, small_test_npz):
    """The device runner's own LiteRT code (int8 I/O quantized there) against edgekit's local runner."""
    _assert_litert_equals_local(loop, keras_int8_tflite, small_test_npz, 128)


# ---------------------------------------------------------------- an emulated Raspberry Pi 5 over the real sshd


@pytest.fixture(scope="module")
def pi5(sshd, inventory, tmp_path_factory) -> str:
    """A board whose Python is Debian's arm64 Python on a qemu Cortex-A76 (edgekit.emulation): the SSH path to
    an Arm64 CPU end to end, without an Arm board."""
    from edgekit.emulation import SYSROOT, arm_python, sysroot_missing

    if reason := sysroot_missing():
        pytest.skip(reason)
    add_device("pi5", sshd, arm_python(SYSROOT, "arm64-dotprod"), tmp_path_factory.mktemp("pi5-cache"), None, "--preset", "raspberry-pi-5")
    return "pi5"


def test_an_emulated_pi5_gets_the_arm_scheme_and_keeps_its_accuracy(pi5, fashion_onnx, demo_data, small_test_npz, tmp_path):
    """check probes an Arm64 CPU with SDOT; a build --for-target the device takes its class's s8 x s8 scheme; that
    int8 model, run by ONNX Runtime's Arm kernels on the device, keeps FashionCNN's accuracy."""
    from edgekit.quantization.scheme import choose_scheme

    check = run_cli("devices", "check", pi5)
    assert check.code == 0 and "emulated: qemu-aarch64 -cpu cortex-a76" in check.stdout, check.stdout + check.stderr
    facts = device_facts(pi5)
    assert facts["arch"] == "aarch64" and "asimddp" in facts["isa"] and facts["runtimes"]["onnxruntime"] == "1.32.0"
    assert facts["emulated"] == "qemu-aarch64 -cpu cortex-a76"
    assert choose_scheme(pi5).isa_class == "arm64-dotprod"
    out = tmp_path / "pi5.int8.onnx"
    built = run_cli("convert", fashion_onnx["fp32"], "--to", "onnx", "-p", "int8", "--calib", demo_data[1], "--for-target", pi5, "-o", out)
    assert built.code == 0, built.stderr
    quantization = json.loads(Path(f"{out}.edgekit.json").read_text())["quantization"]
    assert (quantization["isa_class"], quantization["activations"], quantization["weights"]) == ("arm64-dotprod", "int8", "int8")
    report = tmp_path / "r.json"
    args = ("-d", small_test_npz, "--limit", "500", "-t", f"onnxruntime:cpu@{pi5}", "--runs", "3", "--report", report)
    result = run_cli("validate", out, *REFERENCE, *args, "--max-drop", "0.5")
    assert result.code == 0, result.stdout + result.stderr
    assert "EMULATED (qemu-aarch64 -cpu cortex-a76)" in " ".join(result.stdout.split())  # the latency is not a Pi's
    data = json.loads(report.read_text())
    assert data["device"]["facts"]["arch"] == "aarch64" and data["gate"]["passed"] and data["accuracy"]["samples"] == 500


def test_litert_int8_on_an_emulated_pi5_equals_x86(pi5, keras_int8_tflite, small_test_npz):
    """ai-edge-litert 1.4.0 (the newest with an aarch64 wheel) on the A76 runs XNNPACK's Arm int8 kernels, which
    give x86's answers to the bit (EfficientNet-Lite0 too: docs/int8-schemes.md)."""
    _assert_litert_equals_local(pi5, keras_int8_tflite, small_test_npz, 256)
