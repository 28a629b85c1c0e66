"""`--emit-recipe` reproduces the command: every option kept, paths relative to the recipe; `edgekit run` on the
recipe (from another folder) makes the same artifact, byte for byte, and the same accuracy and fidelity."""

from __future__ import annotations

import hashlib
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from edgekit.recipe.schema import load_recipe
from tests.conftest import run_cli


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def run_recipe(recipe: Path, elsewhere: Path) -> tuple[dict, Path]:
    """Run the recipe from another folder; its matrix row and the artifact it made (or reused)."""
    result = run_cli("run", recipe, "-q", cwd=elsewhere)
    assert result.code == 0, result.stdout + result.stderr
    folder = recipe.parent / "edgekit-report"
    rows = json.loads((folder / "report.json").read_text())["rows"]
    assert len(rows) == 1
    made = sorted(p for p in (folder / ".cache").glob("*/*") if p.suffix in (".onnx", ".pt2") and "compress" not in p.name)
    return rows[0], made[-1] if made else None


@pytest.fixture
def workspace(tmp_path, weights_path):
    """The command runs in `work/` with its files there; the recipe goes to `work/recipes/`; the run starts in `elsewhere/`."""
    (tmp_path / "work" / "recipes").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    shutil.copy(weights_path, tmp_path / "work" / "w.pt")
    return tmp_path / "work", tmp_path / "elsewhere"


def test_convert_recipe_makes_the_same_artifact(workspace):
    work, elsewhere = workspace
    args = ["edgekit.zoo.models:fashion_cnn", "--weights", "w.pt", "--to", "onnx", "-p", "int8", "--calib", "zoo:fashion-mnist-calib"]
    options = ["--calib-samples", "200", "--per-tensor", "--for-target", "x86-avx2", "--no-keep-sensitive"]
    result = run_cli("convert", *args, *options, "-o", "m.onnx", "--emit-recipe", "recipes/r.yaml", cwd=work)
    assert result.code == 0, result.stderr
    recipe = load_recipe(work / "recipes" / "r.yaml")
    assert recipe.model.weights == "../w.pt"  # relative to the recipe, which `run` resolves from the recipe's folder
    assert (recipe.convert.for_target, recipe.convert.per_tensor, recipe.convert.keep_sensitive) == ("x86-avx2", True, False)
    assert recipe.calibration.samples == 200 and recipe.model.inputs == ("image:batchx1x28x28:float32",)
    _, made = run_recipe(work / "recipes" / "r.yaml", elsewhere)
    assert sha256(made) == sha256(work / "m.onnx")


def test_quantize_recipe_makes_the_same_artifact(workspace):
    work, elsewhere = workspace
    assert run_cli("convert", "zoo:fashion-cnn", "--to", "onnx", "-o", "f32.onnx", cwd=work).code == 0
    options = ["--calib", "zoo:fashion-mnist-calib", "--calib-method", "entropy", "--calib-samples", "100", "--exclude", "node_linear_1"]
    result = run_cli("quantize", "f32.onnx", *options, "-o", "q.onnx", "--emit-recipe", "recipes/q.yaml", cwd=work)
    assert result.code == 0, result.stderr
    assert load_recipe(work / "recipes" / "q.yaml").convert.exclude == ("node_linear_1",)
    _, made = run_recipe(work / "recipes" / "q.yaml", elsewhere)
    assert sha256(made) == sha256(work / "q.onnx")


def test_validate_recipe_gives_the_same_metrics(workspace):
    work, elsewhere = workspace
    assert run_cli("convert", "zoo:fashion-cnn", "--to", "onnx", "-p", "int8", "--calib-samples", "100", "-o", "z.onnx", cwd=work).code == 0
    result = run_cli(
        "validate",
        "z.onnx",
        "--limit",
        "1000",
        "--runs",
        "5",
        "--max-drop",
        "1",
        "--report",
        "v.json",
        "--emit-recipe",
        "recipes/v.yaml",
        cwd=work,
    )
    assert result.code == 0, result.stderr
    validated = json.loads((work / "v.json").read_text())
    row, made = run_recipe(work / "recipes" / "v.yaml", elsewhere)
    assert sha256(made) == sha256(work / "z.onnx")
    assert row["samples"] == validated["accuracy"]["samples"] == 1000
    assert (row["accuracy"], row["drop_points"]) == (validated["accuracy"]["artifact"], validated["accuracy"]["drop_points"])
    assert row["cosine"] == validated["fidelity"][0]["cosine_mean"] and row["top1_agreement"] == validated["fidelity"][0]["top1_agreement"]
    assert "accuracy_drop" in [g["metric"] for g in row["gates"]]  # the --max-drop gate


def test_bench_recipe_runs_the_same_artifact(workspace):
    work, elsewhere = workspace
    assert run_cli("convert", "zoo:fashion-cnn", "--to", "onnx", "-o", "f32.onnx", cwd=work).code == 0
    result = run_cli("bench", "f32.onnx", "--runs", "3", "--warmup", "1", "--threads", "1", "--emit-recipe", "recipes/b.yaml", cwd=work)
    assert result.code == 0, result.stderr
    recipe = load_recipe(work / "recipes" / "b.yaml")
    assert recipe.model.path == "../f32.onnx" and recipe.latency.threads == 1 and recipe.latency.runs == 3
    row, made = run_recipe(work / "recipes" / "b.yaml", elsewhere)
    assert sha256(made) == sha256(work / "f32.onnx") and row["threads"] == 1


def pt2_content(path: Path) -> dict:
    """A .pt2's members without the archive's top folder (torch.export.save names it after the file)."""
    with zipfile.ZipFile(path) as z:
        return {name.split("/", 1)[1]: z.read(name) for name in z.namelist() if "/" in name}


def test_prune_recipe_gives_the_same_model_and_accuracy(workspace, small_test_npz):
    work, elsewhere = workspace
    shutil.copy(small_test_npz, work / "test.npz")
    args = [
        "zoo:fashion-cnn",
        "-m",
        "magnitude",
        "--sparsity",
        "0.6",
        "--scope",
        "layer",
        "-o",
        "p.pt2",
        "--data",
        "test.npz",
        "--threads",
        "1",
    ]
    result = run_cli("prune", *args, "--report", "p.json", "--emit-recipe", "recipes/p.yaml", cwd=work)
    assert result.code == 0, result.stderr
    pruned = next(s for s in json.loads((work / "p.json").read_text())["stages"] if s["stage"] != "original")
    recipe = load_recipe(work / "recipes" / "p.yaml")
    assert (recipe.compress[0].sparsity, recipe.compress[0].scope) == (0.6, "layer")
    row, _ = run_recipe(work / "recipes" / "p.yaml", elsewhere)
    compressed = next((work / "recipes" / "edgekit-report" / ".cache").glob("*/*.compress0.pt2"))
    assert pt2_content(compressed) == pt2_content(work / "p.pt2")
    assert row["accuracy"] == pruned["accuracy"] and row["samples"] == 2000


def test_a_torch_model_benched_is_its_own_matrix_row(tmp_path):
    from edgekit.recipe.write import emit, recipe_of_bench
    from edgekit.validation.benchmark import BenchSettings

    emit(tmp_path / "b.yaml", **recipe_of_bench(["zoo:fashion-cnn"], BenchSettings("torch:cpu[dtype=bf16]", 1, 1, 2, 7), None))
    recipe = load_recipe(tmp_path / "b.yaml")
    assert recipe.matrix.cells() == [("torch", "fp32", "torch:cpu[dtype=bf16]")] and recipe.model.path == "zoo:fashion-cnn"
    assert (recipe.latency.threads, recipe.latency.warmup, recipe.latency.runs) == (1, 2, 7)
