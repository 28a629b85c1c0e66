"""`edgekit run --ray` on a real local Ray (2 CPUs): the same rows as a serial run, a worker that dies
mid-task retried, cached cells not recomputed, a failing cell alone in failing."""

import os
import textwrap

import pytest

from edgekit.fileio import sha256_of_file
from edgekit.recipe.distributed import RayOptions, init_arguments, loopback_only
from edgekit.recipe.run import run_recipe
from edgekit.recipe.schema import load_recipe
from tests.conftest import assert_clean_error, run_cli

loopback_only()  # before ray is imported: the local Ray listens on 127.0.0.1 only
ray = pytest.importorskip("ray")

SAME = (
    "format",
    "precision",
    "target",
    "status",
    "accuracy",
    "reference_accuracy",
    "drop_points",
    "top1_agreement",
    "cosine",
    "size_bytes",
)
# Dies on its first call in a process where the marker is missing: the worker is lost mid-conversion.
DYING_FACTORY = """
import os
from pathlib import Path

MARKER = Path(__file__).with_name("died-once")


def make():
    if not MARKER.exists():
        MARKER.write_text(str(os.getpid()))
        os._exit(1)
    from edgekit.zoo.models import fashion_cnn

    return fashion_cnn()
"""


@pytest.fixture(scope="module")
def local_ray():
    ray.init(**init_arguments(RayOptions(num_cpus=2)))
    yield ray
    ray.shutdown()


def _recipe(folder, model: str, validation, matrix: str):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "edgekit.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            model: {model}
            calibration: {{path: zoo:fashion-mnist-calib, samples: 100}}
            validation: {{path: {validation}, limit: 1000}}
            matrix: {matrix}
            latency: {{threads: 1, runs: 5, warmup: 1}}
            report: {{dir: out, formats: [json]}}
            """
        )
    )
    return load_recipe(path)


MATRIX = "{formats: [onnx], precisions: [fp32, int8], targets: {onnx: [onnxruntime:cpu, onnxruntime:cuda]}}"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("ray-recipe")


@pytest.fixture(scope="module")
def runs(local_ray, root, small_test_npz):
    """The same recipe serially and with --ray (each in its own folder), then --ray again."""
    serial = run_recipe(_recipe(root / "serial", "{path: zoo:fashion-cnn}", small_test_npz, MATRIX))
    recipe = _recipe(root / "ray", "{path: zoo:fashion-cnn}", small_test_npz, MATRIX)
    first = run_recipe(recipe, ray=RayOptions())
    files = _artifact_stats(first)
    again = run_recipe(recipe, ray=RayOptions())
    return serial, first, files, again


def _artifact_stats(report: dict) -> dict:
    return {
        r["artifact"]: (os.stat(r["artifact"]).st_ino, os.stat(r["artifact"]).st_mtime_ns) for r in report["rows"] if r["status"] == "ok"
    }


def test_ray_gives_the_rows_and_artifacts_of_a_serial_run(runs):
    serial, first, _, _ = runs
    assert [{k: r.get(k) for k in SAME} for r in first["rows"]] == [{k: r.get(k) for k in SAME} for r in serial["rows"]]
    assert [r["status"] for r in first["rows"]][::2] == ["ok", "ok"]  # the CPU cells ran
    for ray_row, serial_row in zip(first["rows"], serial["rows"], strict=True):
        if ray_row["status"] == "ok":  # ONNX export and ORT's quantization are deterministic: the same bytes
            assert sha256_of_file(ray_row["artifact"]) == sha256_of_file(serial_row["artifact"])
            assert ray_row["host_work"]["pid"] != os.getpid() and ray_row["host_work"]["node"]  # a Ray worker converted it
            assert ray_row["timed_on"] == {**ray_row["timed_on"], "pid": os.getpid(), "machine": "host"}  # timed here, after
    assert first["execution"]["mode"] == "ray" and serial["execution"] == {"mode": "serial"}


def test_a_failing_cell_leaves_the_others_intact(runs):
    _, first, _, _ = runs
    status = {(r["precision"], r["target"]): r["status"] for r in first["rows"]}
    assert status[("fp32", "onnxruntime:cpu")] == status[("int8", "onnxruntime:cpu")] == "ok"
    assert "onnxruntime-gpu" in status[("fp32", "onnxruntime:cuda")] and status[("int8", "onnxruntime:cuda")].startswith("failed")
    assert not first["passed"]


def test_a_cached_cell_is_not_recomputed(runs):
    _, first, files, again = runs
    assert not any(r["cached"] for r in first["rows"])
    assert [r["cached"] for r in again["rows"] if r["status"] == "ok"] == [True, True]
    assert _artifact_stats(again) == files  # same files, untouched: not converted again by any worker


def test_a_worker_lost_mid_task_is_retried_and_completes(local_ray, tmp_path, small_test_npz):
    from edgekit.zoo.fashion_mnist import WEIGHTS

    (tmp_path / "dying.py").write_text(DYING_FACTORY)
    model = f"{{path: {tmp_path / 'dying.py'}:make, weights: {WEIGHTS}, inputs: ['image:1x1x28x28']}}"
    recipe = _recipe(tmp_path, model, small_test_npz, "{formats: [onnx], precisions: [fp32]}")
    row = run_recipe(recipe, ray=RayOptions(max_retries=2))["rows"][0]
    assert row["status"] == "ok", row["status"]
    died = int((tmp_path / "died-once").read_text())
    assert died != row["host_work"]["pid"] and died != os.getpid()  # the first worker died; another one finished the cell


def test_a_worker_lost_on_every_attempt_fails_its_cell_with_the_reason(local_ray, tmp_path, small_test_npz):
    from edgekit.zoo.fashion_mnist import WEIGHTS

    (tmp_path / "dying.py").write_text(DYING_FACTORY)
    model = f"{{path: {tmp_path / 'dying.py'}:make, weights: {WEIGHTS}, inputs: ['image:1x1x28x28']}}"
    recipe = _recipe(tmp_path, model, small_test_npz, "{formats: [onnx], precisions: [fp32]}")
    row = run_recipe(recipe, ray=RayOptions(max_retries=0))["rows"][0]
    assert row["status"].startswith("failed: its worker died on each of 1 attempt(s)"), row["status"]
    written = [p for p in (tmp_path / "out" / ".cache").rglob("*.onnx") if not p.parent.name.startswith(".")]
    assert written == []  # no artifact in the cache (what the dead worker had staged stays in a dot-folder)


def test_an_address_without_ray_is_a_clean_error(tmp_path):
    recipe = tmp_path / "edgekit.yaml"
    recipe.write_text("model: {path: zoo:fashion-cnn}\n")
    assert_clean_error(run_cli("run", recipe, "auto"), "is a Ray address, but --ray is not given")


def test_tasks_ask_for_what_the_cluster_can_give():
    from edgekit.recipe.distributed import task_resources

    cpu_only, with_gpu = {"CPU": 2.0, "memory": 2**30}, {"CPU": 8.0, "GPU": 1.0, "memory": 2**34}
    assert task_resources("onnx", "fp32", "onnxruntime:cpu", RayOptions(), cpu_only) == {"num_cpus": 1.0}
    assert task_resources("onnx", "int8", "onnxruntime:cpu", RayOptions(calibration_memory_mb=4096), cpu_only)["memory"] == 2**30
    assert "num_gpus" not in task_resources("tensorrt", "int8", "tensorrt:cuda", RayOptions(), cpu_only)  # runs, fails as serially
    assert task_resources("tensorrt", "int8", "tensorrt:cuda", RayOptions(), with_gpu)["num_gpus"] == 1
    assert task_resources("torch", "fp32", "torch:cuda[dtype=fp16]", RayOptions(), with_gpu)["num_gpus"] == 1


def test_tune_does_its_host_work_on_ray_and_its_timings_here(runs, root, small_test_npz):
    """`edgekit tune --ray` on the --ray run's recipe (its cache: nothing converted again): the cells validated by Ray
    workers, the candidates timed in this process's machine after them, the CUDA cells failed alone."""
    from edgekit.recipe.tune import tune

    report = tune(_recipe(root / "ray", "{path: zoo:fashion-cnn}", small_test_npz, MATRIX), (1,), ray=RayOptions())
    timed = [r for r in report["rows"] if r["tune"]["rounds"]]
    assert {r["precision"] for r in timed} == {"fp32", "int8"} and all(r["cached"] for r in timed)
    assert all(r["host_work"]["pid"] != os.getpid() and r["timed_on"]["pid"] == os.getpid() for r in timed)
    assert [r["tune"]["stage"] for r in report["rows"] if r["target"] == "onnxruntime:cuda"] == ["failed", "failed"]
    assert report["choice"]["target"] == "onnxruntime:cpu"
