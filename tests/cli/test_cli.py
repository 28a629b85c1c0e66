"""The CLI contract, through the real `edgekit` command in fresh interpreters."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import CliResult, assert_clean_error, run_cli

FACTORY = "edgekit.zoo.models:fashion_cnn"
FASHION_CLASSES = ("tshirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot")
IMAGE = "image:1x1x28x28"


FRAMEWORKS = ("torch", "tensorflow", "keras", "onnxruntime", "openvino", "jax", "ray")


def imported_packages(*args: str) -> tuple[CliResult, set[str]]:
    """Run `edgekit ARGS` under `python -X importtime`; the top-level packages it imported."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "edgekit", *map(str, args)], capture_output=True, text=True, timeout=300
    )
    timed = [ln.rpartition("|")[2].strip() for ln in proc.stderr.splitlines() if ln.startswith("import time:")]
    shown = "\n".join(ln for ln in proc.stderr.splitlines() if not ln.startswith("import time:"))
    return CliResult(proc.returncode, proc.stdout, shown), {name.split(".")[0] for name in timed}


def test_help_imports_no_framework():
    result, imported = imported_packages("--help")
    assert result.code == 0 and "convert" in result.stdout and "validate" in result.stdout
    assert imported.isdisjoint({*FRAMEWORKS, "onnx", "plotly"}), sorted(imported & {*FRAMEWORKS, "onnx", "plotly"})


def test_edgekit_alone_shows_its_help_without_an_empty_error():
    result = run_cli()
    assert result.code == 0 and "Usage: edgekit" in result.stdout and "error:" not in result.stderr, result.stderr


def test_demo_refuses_a_file_for_its_folder_and_zero_runs_before_any_work(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    assert_clean_error(run_cli("demo", "--workdir", afile), "--workdir", "is a file")
    assert afile.read_text() == "mine"
    assert_clean_error(run_cli("demo", "--runs", "0"), "--runs")


def test_targets_imports_no_framework():
    result, imported = imported_packages("targets")
    assert result.code == 0 and "onnxruntime:cpu" in result.stdout, result.stderr
    assert "typer" in imported and imported.isdisjoint(FRAMEWORKS), sorted(imported & set(FRAMEWORKS))


def test_info_on_onnx_imports_onnx_only(fashion_onnx):
    result, imported = imported_packages("info", fashion_onnx["int8"])
    assert result.code == 0 and "QuantizeLinear" in result.stdout, result.stderr
    assert "onnx" in imported and imported.isdisjoint(FRAMEWORKS), sorted(imported & set(FRAMEWORKS))


def test_targets_lists_found_and_missing_runtimes():
    result = run_cli("targets")
    assert result.code == 0
    lines = result.stdout.splitlines()
    assert any("onnxruntime:cpu" in ln and "available" in ln and "unavailable" not in ln for ln in lines)
    assert any("onnxruntime:cuda" in ln and "unavailable" in ln and "onnxruntime-gpu" in ln for ln in lines)


def test_targets_listed_from_files_agree_with_the_runtimes():
    from edgekit.summary import list_targets

    listed = {row["target"]: row["available"] for row in list_targets()}
    probed = {row["target"]: row["available"] for row in list_targets(probe=True)}
    assert listed == probed


def test_info_shows_signature_params_and_ops(fashion_onnx):
    result = run_cli("info", fashion_onnx["int8"], "--json")
    info = json.loads(result.stdout)
    assert info["format"] == "onnx" and info["precision"] == "int8"
    assert info["inputs"][0]["name"] == "image" and info["ops"]["QuantizeLinear"] > 0 and info["parameters"] > 100_000
    assert info["provenance"]["calibration"]["samples"] == 300
    table = run_cli("info", fashion_onnx["fp32"])
    assert "op histogram" in table.stdout and "Conv" in table.stdout


def test_info_prints_the_provenance(fashion_onnx):
    """Without --json too: where the model came from, the steps, the int8 scheme and why, the calibration, the tools."""
    prov = json.loads(run_cli("info", fashion_onnx["int8"], "--json").stdout)["provenance"]
    text = run_cli("info", fashion_onnx["int8"]).stdout
    calib = prov["calibration"]
    assert f"from: {prov['source']['spec']}" in text and f"steps: {' -> '.join(prov['steps'])}" in text
    assert f"why: {prov['quantization']['reason']}" in text
    assert (
        f"calibration: 300 samples from {calib['source']} ({calib['method']}, seed {calib['seed']}, sha256 {calib['sha256'][:12]})" in text
    )
    assert f"onnxruntime {prov['versions']['onnxruntime']}" in text.partition("tools: ")[2]


def test_convert_and_validate_with_labels(tmp_path, weights_path, small_test_npz):
    out = tmp_path / "m.onnx"
    converted = run_cli("convert", FACTORY, "--weights", weights_path, "--to", "onnx", "-i", IMAGE, "-o", out)
    assert converted.code == 0, converted.stderr
    assert "exporter: dynamo" in converted.stdout
    report = tmp_path / "r.json"
    result = run_cli(
        "validate",
        out,
        "--reference",
        FACTORY,
        "--weights",
        weights_path,
        "--data",
        small_test_npz,
        "--report",
        report,
        "--runs",
        "20",
        "--threads",
        "1",
        "--max-drop",
        "0.5",
        "--min-cosine",
        "0.999",
    )
    assert result.code == 0, result.stderr
    data = json.loads(report.read_text())
    assert data["schema_version"] and data["machine"]["cpu"] and data["threads"] == 1
    assert data["accuracy"]["drop_points"] == pytest.approx(0.0, abs=0.05) and data["accuracy"]["samples"] == 2000
    assert data["fidelity"][0]["cosine_min"] > 0.9999 and data["fidelity"][0]["top1_agreement"] > 99.9
    assert {"p50", "p90", "p99", "mean", "std", "min"} <= set(data["latency"]["latency"]) and data["latency"]["threads"] == 1
    assert data["data"]["random"] is False and data["gate"]["passed"] is True


def test_label_sets_score_the_samples_that_carry_one(tmp_path, fashion_onnx, small_test_npz):
    """ImageNet-ReaL-style labels ([N, classes] of 0/1): one class each on the first 500 samples, none on the next 500 (left
    out), scores exactly what plain labels of those 500 score; more right classes raise both sides."""
    with np.load(small_test_npz) as npz:
        image, labels = npz["image"][:1000], npz["labels"][:1000]
    sets = np.eye(10, dtype=np.uint8)[labels]
    sets[500:] = 0
    np.savez(tmp_path / "sets.npz", image=image, labels=sets)
    np.savez(tmp_path / "plain.npz", image=image[:500], labels=labels[:500])
    wider = sets.copy()
    wider[:500, [0, 2, 4, 6]] = 1  # any top (T-shirt, pullover, coat, shirt), where the model errs most
    np.savez(tmp_path / "wider.npz", image=image, labels=wider)
    accuracy = {}
    for name in ("sets", "plain", "wider"):
        report = tmp_path / f"{name}.json"
        args = ("validate", fashion_onnx["int8"], "-r", fashion_onnx["fp32"], "-d", tmp_path / f"{name}.npz", "--runs", "3")
        result = run_cli(*args, "--report", report)
        assert result.code == 0, result.stderr
        accuracy[name] = json.loads(report.read_text())["accuracy"]
        by_class = accuracy[name].pop("classes_lost")  # by class: with a class per sample only
        assert (by_class is None) == (name != "plain")
    assert accuracy["sets"] == accuracy["plain"] and accuracy["sets"]["samples"] == 500 and accuracy["sets"]["reference"] > 80
    assert accuracy["wider"]["reference"] > accuracy["sets"]["reference"] and accuracy["wider"]["artifact"] > accuracy["sets"]["artifact"]


def test_an_image_folder_takes_its_labels_from_labels_json(tmp_path, fashion_onnx, small_test_npz):
    """300 real test images as PNGs in a flat folder: a labels.json giving the first 150 their class and the rest none
    scores exactly what an .npz of those 150 with their labels scores."""
    with np.load(small_test_npz) as npz:
        image, labels = npz["image"][:300], npz["labels"][:300]
    folder = tmp_path / "shop"
    names = _png_folder(folder, image)
    sets = {name: [int(c)] if i < 150 else [] for i, (name, c) in enumerate(zip(names, labels, strict=True))}
    (folder / "labels.json").write_text(json.dumps(sets))
    np.savez(tmp_path / "plain.npz", image=image[:150], labels=labels[:150])
    accuracy = {}
    for name, data in (("folder", folder), ("plain", tmp_path / "plain.npz")):
        report = tmp_path / f"{name}.json"
        args = ("validate", fashion_onnx["int8"], "-r", fashion_onnx["fp32"], "-d", data, "--runs", "3", "--report", report)
        result = run_cli(*args)
        assert result.code == 0, result.stderr
        accuracy[name] = json.loads(report.read_text())["accuracy"]
        accuracy[name].pop("classes_lost")  # label sets (the folder's empty ones) are not by class; plain labels are
    assert accuracy["folder"] == accuracy["plain"] and accuracy["folder"]["samples"] == 150 and accuracy["folder"]["reference"] > 80


def _png_folder(folder: Path, images: np.ndarray, classes: list[str] | None = None) -> list[str]:
    """Fashion-MNIST images ([N, 1, 28, 28] in [0, 1]) as 8-bit PNGs, lossless, each in its class's subfolder where
    `classes` names one per image; their paths in the folder."""
    from PIL import Image

    names = [f"{classes[i] + '/' if classes else ''}item_{i:03d}.png" for i in range(len(images))]
    for name, pixels in zip(names, images, strict=True):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.rint(pixels[0] * 255).astype(np.uint8)).save(folder / name)
    return names


def test_validate_names_the_changed_answers_surest_first(tmp_path, fashion_onnx, small_test_npz):
    """An int8 calibrated on images 100x too dark changes many answers: the report lists them by file, the reference's
    surest first, and the CLI prints the first; and the classes that lost most, named where class subfolders name them."""
    with np.load(small_test_npz) as npz:
        image, labels = npz["image"][:200], npz["labels"][:200]
    np.savez(tmp_path / "dark.npz", image=image * 0.01)
    damaged = tmp_path / "damaged.onnx"
    assert run_cli("quantize", fashion_onnx["fp32"], "-o", damaged, "--calib", tmp_path / "dark.npz", "--calib-samples", "200").code == 0
    names = _png_folder(tmp_path / "shop", image)
    (tmp_path / "shop" / "labels.json").write_text(json.dumps(dict(zip(names, labels.tolist(), strict=True))))
    report = tmp_path / "r.json"
    result = run_cli("validate", damaged, "-r", fashion_onnx["fp32"], "-d", tmp_path / "shop", "--runs", "3", "--report", report)
    assert result.code == 2 and "GATE FAILED" in result.stdout, result.stderr  # the default SNR floor: a damaged model
    (fidelity,) = json.loads(report.read_text())["fidelity"]
    changes = fidelity["top1_changes"]
    assert fidelity["top1_flips"] > 20 and len(changes) == 20 and changes[0]["reference_margin"] == fidelity["flip_margin_max"]
    margins = [c["reference_margin"] for c in changes]
    assert margins == sorted(margins, reverse=True) and all(c["reference_top1"] != c["artifact_top1"] for c in changes)
    assert [c["id"] for c in changes] == [names[c["sample"]] for c in changes]
    assert f"surest changes: {changes[0]['id']} class {changes[0]['reference_top1']} -> {changes[0]['artifact_top1']}" in result.stdout
    accuracy = json.loads(report.read_text())["accuracy"]  # and by class, where it lost
    lost = accuracy["classes_lost"]
    assert accuracy["drop_points"] > 0 and 0 < len(lost) <= 5 and f"classes that lost most: {lost[0]['class']}: " in result.stdout
    nets = [r["lost"] - r["gained"] for r in lost]
    assert nets == sorted(nets, reverse=True) and nets[-1] > 0
    for r in lost:
        assert r["samples"] == int((labels == r["class"]).sum())
        assert (r["reference"] - r["artifact"]) * r["samples"] / 100 == pytest.approx(r["lost"] - r["gained"])
    folders = [f"{c}_{FASHION_CLASSES[c]}" for c in range(10)]  # sorted as the class indices are
    _png_folder(tmp_path / "by_class", image, [folders[c] for c in labels])
    named = run_cli("validate", damaged, "-r", fashion_onnx["fp32"], "-d", tmp_path / "by_class", "--runs", "3", "--report", report)
    data = json.loads(report.read_text())
    assert named.code == 2 and data["accuracy"]["classes_lost"] == [{**r, "name": folders[r["class"]]} for r in lost]
    change = data["fidelity"][0]["top1_changes"][0]
    assert change["reference_class"] == folders[change["reference_top1"]] and change["artifact_class"] == folders[change["artifact_top1"]]
    assert f"class {change['reference_top1']} ({change['reference_class']}) -> {change['artifact_top1']} (" in named.stdout


def test_validate_without_data_says_so_loudly(tmp_path, fashion_onnx, weights_path):
    report = tmp_path / "r.json"
    result = run_cli("validate", fashion_onnx["fp32"], "-r", FACTORY, "--weights", weights_path, "--runs", "5", "--report", report)
    assert result.code == 0, result.stderr
    assert "NO DATA GIVEN" in result.stdout
    data = json.loads(report.read_text())
    assert data["data"]["random"] is True and any("NO DATA" in w for w in data["warnings"]) and data["accuracy"] is None


def test_gate_fails_with_exit_2_on_a_damaged_int8_model(tmp_path, fashion_onnx, small_test_npz):
    garbage = tmp_path / "garbage.npz"  # ranges 100x too small: real inputs saturate
    with np.load(small_test_npz) as npz:
        np.savez(garbage, image=npz["image"][:200] * 0.01)
    damaged = tmp_path / "damaged.onnx"
    assert run_cli("quantize", fashion_onnx["fp32"], "-o", damaged, "--calib", garbage, "--calib-samples", "200").code == 0
    result = run_cli("validate", damaged, "-r", fashion_onnx["fp32"], "-d", small_test_npz, "--max-drop", "0.5", "--runs", "5")
    assert result.code == 2, result.stderr
    assert "GATE FAILED" in result.stdout and "accuracy_drop" in result.stdout


def test_bench_reports_every_artifact_and_what_an_int8_one_runs_in_int8(tmp_path, fashion_onnx):
    """An int8 artifact's row carries its int8 coverage read from the runtime, as validate's does; so does an int8 model
    without edgekit's provenance (a copy without its sidecar); a float model has none."""
    report, foreign = tmp_path / "b.json", tmp_path / "foreign-int8.onnx"
    foreign.write_bytes(fashion_onnx["int8"].read_bytes())
    result = run_cli(
        "bench", fashion_onnx["fp32"], fashion_onnx["int8"], foreign, "--threads", "1", "--runs", "10", "--warmup", "2",
        "--report", report,
    )  # fmt: skip
    assert result.code == 0, result.stderr
    rows = json.loads(report.read_text())["results"]
    assert [r["threads"] for r in rows] == [1, 1, 1] and rows[1]["size_bytes"] < rows[0]["size_bytes"] / 2
    assert all(r["load_ms"] > 0 and r["first_inference_ms"] > 0 and r["peak_rss_mb"] > 0 for r in rows)
    assert rows[0]["int8_coverage"] is None and "int8 coverage" in result.stdout
    for row in rows[1:]:
        coverage = row["int8_coverage"]
        assert coverage["int8_layers"] == coverage["layers"] > 0 and coverage["read_from"].startswith("ONNX Runtime")
    from edgekit.report.schema import load_json

    load_json(report)  # against report.schema.json


# --- bad input: one line, a hint, exit 1, no traceback, nothing written ---


def test_missing_model_file():
    assert_clean_error(run_cli("info", "nope.onnx"), "model not found")


def test_text_file_named_onnx(tmp_path):
    fake = tmp_path / "fake.onnx"
    fake.write_text("hello, I am text\n" * 10)
    assert_clean_error(run_cli("info", fake), "not a valid ONNX file")


def test_truncated_onnx(tmp_path, fashion_onnx, small_test_npz):
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(fashion_onnx["fp32"].read_bytes()[:5000])
    assert_clean_error(run_cli("validate", cut, "-r", fashion_onnx["fp32"], "-d", small_test_npz), "cut.onnx")


def test_factory_that_does_not_exist(tmp_path):
    assert_clean_error(
        run_cli("convert", "edgekit.zoo.models:no_such", "--to", "onnx", "-i", IMAGE, "-o", tmp_path / "x.onnx"), "'no_such' not found"
    )
    assert not (tmp_path / "x.onnx").exists()


def test_input_shape_that_does_not_fit(tmp_path, weights_path):
    result = run_cli("convert", FACTORY, "--weights", weights_path, "--to", "onnx", "-i", "image:1x3x28x28", "-o", tmp_path / "x.onnx")
    assert_clean_error(result, "does not accept inputs image:1x3x28x28")


def test_data_that_does_not_match_the_inputs(tmp_path, fashion_onnx):
    bad = tmp_path / "bad.npz"
    np.savez(bad, image=np.zeros((8, 28, 28), np.float32))
    assert_clean_error(run_cli("validate", fashion_onnx["fp32"], "-r", fashion_onnx["fp32"], "-d", bad), "input 'image'")


def test_target_whose_runtime_is_missing(fashion_onnx):
    assert_clean_error(
        run_cli("bench", fashion_onnx["fp32"], "--target", "onnxruntime:cuda"),
        "onnxruntime:cuda is not available here",
        "pip install onnxruntime-gpu",
    )


def test_int8_without_calibration_and_bad_calibration_write_nothing(tmp_path, fashion_onnx):
    out = tmp_path / "q.onnx"
    out.write_text("a good artifact from before")
    assert_clean_error(run_cli("quantize", fashion_onnx["fp32"], "-o", out), "needs calibration data", "--calib")
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, image=np.zeros((10, 1, 32, 32), np.float32))
    assert_clean_error(run_cli("quantize", fashion_onnx["fp32"], "-o", out, "--calib", wrong), "input 'image'")
    (tmp_path / "empty").mkdir()
    assert_clean_error(run_cli("quantize", fashion_onnx["fp32"], "-o", out, "--calib", tmp_path / "empty"), "no images")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "x.png").write_bytes(b"\x89PNG garbage")
    assert_clean_error(run_cli("quantize", fashion_onnx["fp32"], "-o", out, "--calib", tmp_path / "broken"), "cannot read image")
    assert out.read_text() == "a good artifact from before"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken", "empty", "q.onnx", "wrong.npz"]


def test_state_dict_without_factory_and_pickle_warning(weights_path, tmp_path):
    assert_clean_error(run_cli("convert", weights_path, "--to", "onnx", "-o", tmp_path / "x.onnx"), "--allow-pickle")


def test_prune_writes_a_loadable_model_and_a_stage_table(tmp_path, weights_path, small_test_npz, demo_data):
    report = tmp_path / "p.json"
    result = run_cli(
        "prune",
        FACTORY,
        "--weights",
        weights_path,
        "-i",
        IMAGE,
        "-m",
        "magnitude",
        "--sparsity",
        "0.5",
        "-o",
        tmp_path / "m.pt2",
        "-d",
        small_test_npz,
        "-p",
        "int8",
        "--calib",
        demo_data[1],
        "--report",
        report,
        "--threads",
        "1",
    )
    assert result.code == 0, result.stderr
    assert "stages" in result.stdout and "gzip size" in result.stdout
    stages = json.loads(report.read_text())["stages"]
    assert [s["stage"] for s in stages] == ["original", "pruned", "pruned + int8"]
    assert stages[1]["gzip_bytes"] < stages[0]["gzip_bytes"] and stages[2]["size_bytes"] < stages[0]["size_bytes"] / 3
    assert "MAC ratio" in result.stdout and stages[0]["macs"] == stages[1]["macs"] == 5_719_808  # zeros are still multiplied
    assert stages[1]["mac_ratio"] == 1.0 and stages[1]["p50_ratio"] == pytest.approx(1 / stages[1]["speedup"])
    assert all(s["accuracy"] is not None and s["p50_ms"] > 0 for s in stages)
    assert run_cli("info", tmp_path / "m.pt2").code == 0
    assert_clean_error(
        run_cli("prune", FACTORY, "--weights", weights_path, "-i", IMAGE, "-m", "magnitude", "--epochs", "2", "-o", tmp_path / "x.pt2"),
        "--finetune",
    )


def test_the_example_ci_recipe_runs_and_passes(tmp_path):
    import shutil

    recipe = tmp_path / "ci-gate.yaml"
    shutil.copy(Path(__file__).parents[2] / "examples" / "ci-gate.yaml", recipe)
    result = run_cli("run", recipe, "--quiet")
    assert result.code == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "edgekit-report" / "report.json").read_text())
    assert report["passed"] and [(r["format"], r["precision"]) for r in report["rows"]] == [("onnx", "fp32"), ("onnx", "int8")]
    assert all(g["passed"] for r in report["rows"] for g in r["gates"])
    assert [g["metric"] for g in report["rows"][1]["gates"]] == ["accuracy_drop", "top1_agreement", "nonfinite_values", "size_mb"]


def test_zoo_names_work_for_models_and_data_with_no_extra_flags(tmp_path, monkeypatch):
    """The first hour: the repo's trained model to int8 and validated on its real test set, one command each."""
    monkeypatch.setenv("EDGEKIT_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "fashion.int8.onnx"
    converted = run_cli("convert", "zoo:fashion-cnn", "--to", "onnx", "-p", "int8", "--calib", "zoo:fashion-mnist-calib", "-o", out)
    assert converted.code == 0, converted.stderr
    assert (tmp_path / "cache" / "zoo" / "fashion_mnist_calib.npz").exists()  # written out where EDGEKIT_CACHE says
    report = tmp_path / "r.json"
    result = run_cli("validate", out, "-r", "zoo:fashion-cnn", "-d", "zoo:fashion-mnist-test", "--runs", "20", "--report", report)
    assert result.code == 0, result.stderr
    data = json.loads(report.read_text())
    assert data["accuracy"]["samples"] == 10000 and data["accuracy"]["reference"] > 91.0  # the trained weights came with the name
    assert data["accuracy"]["drop_points"] <= 0.5
    unknown = run_cli("info", "zoo:no-such-model")
    assert_clean_error(unknown, "unknown zoo model 'zoo:no-such-model'")


def test_frameworks_are_quiet_unless_verbose(tmp_path):
    """By default only edgekit's own lines are printed; with -v the frameworks' too: NNCF's progress bars while it
    calibrates (x86-avx512 quantizes with NNCF), and ONNX Runtime's quantizer's "Axis 1 is out-of-range for weight" on
    the root logger (x86-avx2 quantizes through ONNX Runtime; a model with a rank-1 weight)."""
    np.savez(tmp_path / "c.npz", x=np.random.default_rng(0).standard_normal((100, 16)).astype(np.float32))
    runs = {
        "x86-avx512": ("zoo:fashion-cnn", "--calib", "zoo:fashion-mnist-calib", "--calib-samples", "100"),
        "x86-avx2": (f"{Path(__file__).with_name('rank1_weight.py')}:scorer", "--calib", tmp_path / "c.npz"),
    }
    loud_lines = {"x86-avx512": "Statistics collection", "x86-avx2": "Axis 1 is out-of-range for weight 'w'"}
    for target, (model, *calib) in runs.items():
        convert = ("convert", model, "--to", "openvino", "-p", "int8", *calib, "--for-target", target)
        quiet = run_cli(*convert, "-o", tmp_path / f"quiet-{target}.xml", fresh=True)  # what imports print too
        assert quiet.code == 0, quiet.stderr
        assert quiet.stderr == "", quiet.stderr
        lines = quiet.stdout.splitlines()
        assert lines[0].startswith("wrote ") and all(ln.startswith("  ") for ln in lines[1:]), quiet.stdout
        loud = run_cli("--verbose", *convert, "-o", tmp_path / f"loud-{target}.xml")  # printed while converting: forked will do
        assert loud.code == 0 and loud_lines[target] in loud.stdout + loud.stderr, loud.stdout + loud.stderr
