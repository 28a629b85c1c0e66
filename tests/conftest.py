"""Shared fixtures: the committed, trained FashionCNN and real Fashion-MNIST data, converted once per session."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from edgekit.artifact import TensorSpec

INPUTS = (TensorSpec("image", ("batch", 1, 28, 28), "float32"),)

# OpenVINO's model converter sends usage telemetry from a background thread by forking a process; a fork while the main
# thread is inside a multi-threaded OpenBLAS call deadlocks in OpenBLAS's fork handler (a pytest worker hung for good in
# numpy's matmul, test_int8_rounding.py, 2026-11-30). The converter and NNCF send nothing in CI, their documented switch:
# the tests and the commands they run (which inherit this environment) are CI.
os.environ["CI"] = "true"


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str


def run_cli(*args: str, cwd: Path | None = None, fresh: bool = False) -> CliResult:
    """Run the real `edgekit` command in a process of its own: forked from a warm interpreter that has imported
    edgekit and the frameworks (tests/warm_cli.py), or with `fresh` a new interpreter, for tests of what happens
    while frameworks are imported."""
    env = {**os.environ, "COLUMNS": "200"}
    argv = [str(arg) for arg in args]
    if fresh:
        proc = subprocess.run([sys.executable, "-m", "edgekit", *argv], capture_output=True, text=True, cwd=cwd, env=env, timeout=600)
        return CliResult(proc.returncode, proc.stdout, proc.stderr)
    return _warm_cli().run(argv, Path(cwd or os.getcwd()), env, timeout=600)


class _WarmCli:
    """The client of tests/warm_cli.py's server, started on first use, one per pytest process."""

    def __init__(self) -> None:
        root = Path(__file__).resolve().parent.parent
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.warm_cli"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=root
        )

    def run(self, argv: list[str], cwd: Path, env: dict, timeout: int) -> CliResult:
        import json
        import tempfile

        with tempfile.TemporaryDirectory() as folder:
            out, err = Path(folder) / "stdout", Path(folder) / "stderr"
            out.touch()
            err.touch()
            request = {"args": argv, "cwd": str(cwd), "env": env, "stdout": str(out), "stderr": str(err), "timeout": timeout}
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            reply = self.proc.stdout.readline()
            if not reply:
                raise RuntimeError(f"tests/warm_cli.py stopped (exit {self.proc.wait()})")
            reply = json.loads(reply)
            if reply["timed_out"]:
                raise subprocess.TimeoutExpired(["edgekit", *argv], timeout, out.read_text(), err.read_text())
            return CliResult(reply["code"], out.read_text(), err.read_text())


@functools.cache
def _warm_cli() -> _WarmCli:
    return _WarmCli()


def assert_clean_error(result: CliResult, *needles: str) -> None:
    """Exit 1, no traceback, and on stderr one `error: WHAT` line followed by one `hint: WHAT TO DO` line.

    Each needle (the file or option at fault, the fix) must be in one of those two lines.
    """
    assert result.code == 1, (result.code, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    lines = result.stderr.splitlines()
    errors = [i for i, ln in enumerate(lines) if ln.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    assert not any(ln.lstrip().lower().startswith("error:") for i, ln in enumerate(lines) if i != errors[0]), result.stderr
    shown = lines[errors[0] : errors[0] + 2]
    assert len(shown) == 2 and shown[1].startswith("hint: "), result.stderr
    assert sum(ln.startswith("hint: ") for ln in lines) == 1, result.stderr
    for needle in needles:
        assert any(needle in ln for ln in shown), result.stderr


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory) -> tuple[Path, Path]:
    """(test .npz with all 10k labelled images, calibration .npz with 1,000 training images)."""
    from edgekit.zoo.fashion_mnist import write_demo_data

    return write_demo_data(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="session")
def small_test_npz(tmp_path_factory, demo_data) -> Path:
    """The first 2,000 test images, for faster checks."""
    with np.load(demo_data[0]) as npz:
        path = tmp_path_factory.mktemp("small") / "test2k.npz"
        np.savez(path, image=npz["image"][:2000], labels=npz["labels"][:2000])
    return path


@pytest.fixture(scope="session")
def fashion_source():
    from edgekit.demo import demo_source

    return demo_source()


@pytest.fixture(scope="session")
def fashion_onnx(tmp_path_factory, fashion_source, demo_data) -> dict[str, Path]:
    """The FashionCNN converted to ONNX fp32 and int8 (calibrated on 300 real training images)."""
    from edgekit.conversion import CalibrationOptions, ConvertOptions
    from edgekit.converters.pipeline import convert

    out = tmp_path_factory.mktemp("onnx")
    plans = {"fp32": CalibrationOptions(), "int8": CalibrationOptions(str(demo_data[1]), 300)}
    return {p: convert(fashion_source, "onnx", out / f"fashion.{p}.onnx", ConvertOptions(p, INPUTS, c)).path for p, c in plans.items()}


@pytest.fixture(scope="session")
def weights_path() -> Path:
    from edgekit.zoo.fashion_mnist import WEIGHTS

    return WEIGHTS


def pytest_configure(config):
    """Under `pytest -n N`, give each worker its own share of the cores.

    Every runtime sizes its thread pool from the cores it may use (`default_threads`, OpenMP, OpenVINO); with two
    workers on two cores each would start two spinning threads, and the suite ran 1.5x slower (the PyTorch demo
    test 222 s instead of 105 s on a 2-core Zen 3). Subprocesses, sshd and Ray inherit the share.
    """
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if worker and count > 1 and hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        index = int(worker.removeprefix("gw"))
        os.sched_setaffinity(0, set(cores[index % len(cores) :: count] or cores))


# Seconds each of the slowest test files took in a `make test` (one worker each, a 2-core AMD EPYC Zen 3, x86-avx2,
# 2026-11-29; `make test` prints the slowest tests). `make test` hands files to its two workers in collection order
# (--no-loadscope-reorder), so the longest go first and the short ones even out the end: with xdist's own order (most
# tests first) the longest files came last and one worker ran alone for minutes.
SLOW_FILES = {
    "tests/unit/test_text_generation.py": 343,
    "tests/unit/backends/openvino/test_openvino.py": 268,
    "tests/unit/backends/onnx/test_int8_rounding.py": 244,
    "tests/unit/backends/test_int8_detectors.py": 201,
    "tests/cli/test_cli.py": 178,
    "tests/cli/test_devices.py": 174,
    "tests/unit/backends/test_int8_families.py": 167,
    "tests/e2e/test_demo.py": 164,
    "tests/unit/backends/tflite/test_keras_tflite.py": 129,
    "tests/contract/test_backends.py": 110,
    "tests/unit/backends/test_int8_coverage.py": 101,
    "tests/unit/backends/torch/test_pt2e.py": 95,
    "tests/unit/recipe/test_recipe_ray.py": 93,
    "tests/unit/recipe/test_emit_recipe.py": 93,
    "tests/unit/test_isa_emulated.py": 91,
    "tests/unit/backends/test_executorch_routes.py": 83,
    "tests/unit/test_lm_large.py": 79,
    "tests/unit/backends/tflite/test_litert_accuracy.py": 77,
    "tests/unit/recipe/test_recipe.py": 69,
}


def pytest_collection_modifyitems(config, items):
    """The slowest files first (SLOW_FILES), the rest in their own order after them."""
    items.sort(key=lambda item: -SLOW_FILES.get(item.nodeid.split("::")[0], 0))
