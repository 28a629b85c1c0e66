"""Recipes: validation errors with lines, the matrix run, caching, reports, gates and baselines."""

import html
import json
import textwrap
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
import pytest

from edgekit.recipe.schema import RecipeError, load_recipe
from tests.conftest import assert_clean_error, run_cli


def _write(tmp_path, text, name="edgekit.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("model: {path: m.onnx}\nmatrix:\n  formats: [onnx]\n  precison: [int8]\n", "line 4: unknown key 'precison' in 'matrix'"),
        ("model: {path: m.onnx}\nlatency:\n  runs: many\n", "line 3: 'latency.runs' has the wrong type"),
        ("matrix: {formats: [onnx]}\n", "missing required key 'model'"),
        ("model: {path: m.onnx}\nmatrix: {formats: [coreml]}\n", "'matrix.formats' has unknown value 'coreml'"),
        ("model: {path: m.onnx}\ngates:\n  max_dorp: 1\n", "line 3: unknown key 'max_dorp' in 'gates'"),
        ("model: [1, 2]\n", "line 1: 'model' must be a mapping"),
        ("model: {path: m.onnx\n", "not valid YAML"),
    ],
)
def test_bad_recipes_name_the_key_and_line(tmp_path, text, needle):
    with pytest.raises(RecipeError, match=None) as info:
        load_recipe(_write(tmp_path, text))
    assert needle in str(info.value)


def test_recipe_defaults_and_cells(tmp_path):
    recipe = load_recipe(_write(tmp_path, "model: {path: m.onnx}\nmatrix: {formats: [onnx, openvino], precisions: [fp32, int8]}\n"))
    assert recipe.matrix.cells() == [
        ("onnx", "fp32", "onnxruntime:cpu"),
        ("onnx", "int8", "onnxruntime:cpu"),
        ("openvino", "fp32", "openvino:cpu"),
        ("openvino", "int8", "openvino:cpu"),
    ]
    assert recipe.resolve("data.npz") == str(tmp_path / "data.npz") and recipe.resolve("pkg.mod:fn") == "pkg.mod:fn"


@pytest.fixture(scope="module")
def damaged_run(tmp_path_factory, demo_data, small_test_npz):
    """A recipe whose int8 is calibrated on garbage (ranges 100x too small): exactly that cell must fail the gate."""
    folder = tmp_path_factory.mktemp("recipe")
    with np.load(demo_data[1]) as npz:
        np.savez(folder / "garbage.npz", image=npz["image"][:200] * 0.01)
    recipe = _write(
        folder,
        f"""
        version: 1
        model: {{path: zoo:fashion-cnn}}
        calibration: {{path: garbage.npz, samples: 200}}
        validation: {{path: {small_test_npz}}}
        matrix: {{formats: [onnx], precisions: [fp32, fp16, int8]}}
        latency: {{threads: 1, runs: 20, warmup: 2}}
        gates: {{max_drop: 0.5, min_agreement: 98}}
        report: {{dir: out}}
        """,
    )
    first = run_cli("run", recipe, "-q")
    second = run_cli("run", recipe, "-q")
    return folder, first, second


def test_damaged_int8_fails_the_gate_and_junit_marks_exactly_it(damaged_run):
    folder, first, _ = damaged_run
    assert first.code == 2, first.stderr
    suite = ET.parse(folder / "out" / "junit.xml").getroot()
    failed = {(c.get("classname"), c.get("name")) for c in suite.iter("testcase") if c.find("failure") is not None}
    assert failed and {cls for cls, _ in failed} == {"onnx.int8.onnxruntime:cpu"}
    assert int(suite.get("tests")) == 9 and int(suite.get("failures")) == len(failed) == 2  # 3 cells x (2 gates + non-finite)
    report = json.loads((folder / "out" / "report.json").read_text())
    assert report["schema_version"] and report["kind"] == "matrix" and not report["passed"]
    rows = {(r["format"], r["precision"]): r for r in report["rows"]}
    assert rows[("onnx", "int8")]["drop_points"] > 0.5 and rows[("onnx", "fp32")]["passed"]
    markdown = (folder / "out" / "report.md").read_text()
    failed_lines = [line for line in markdown.split("Failed gates:")[1].splitlines() if line.startswith("- ")]
    assert [line.split(": ")[1].split()[0] for line in failed_lines] == ["accuracy_drop", "top1_agreement"], markdown
    assert all(line.startswith("- onnx int8 on onnxruntime:cpu: ") for line in failed_lines)
    # the agreement gate's reason says the calibration damage changed answers the reference was sure of, not near-ties
    margin = float(failed_lines[1].split("led its top-2 by at most ")[1].split()[0])
    assert margin > 0.5, failed_lines[1]
    # which answers changed is said once, in the failed gate's reason, not again in a note under the table
    flips = rows[("onnx", "int8")]["top1_flips"]
    assert flips > 0 and markdown.count(f"{flips} top-1 answers changed") == 1
    # the HTML page and the console list the same reasons
    page = (folder / "out" / "report.html").read_text()
    assert "Plotly.newPlot" in page and "Failed gates:" in page
    assert all(html.escape(line[2:]) in page for line in failed_lines)
    assert "FAIL onnx int8 on onnxruntime:cpu: accuracy_drop" in first.stdout


def test_unchanged_recipe_reuses_artifacts(damaged_run):
    _, first, second = damaged_run
    assert second.code == 2 and second.stdout.count("(cached)") == 3 and "(cached)" not in first.stdout


def test_artifacts_are_linked_out_of_the_cache_beside_the_reports(damaged_run):
    folder, first, second = damaged_run
    out = folder / "out"
    assert {p.name for p in out.iterdir()} >= {"report.json", "report.md", "report.html", "junit.xml", "artifacts"}
    rows = {r["precision"]: r for r in json.loads((out / "report.json").read_text())["rows"]}
    for precision in ("fp32", "fp16", "int8"):
        published = out / "artifacts" / "fashion_cnn" / f"onnx-{precision}" / f"fashion_cnn.{precision}.onnx"
        assert rows[precision]["published"] == str(published) and not published.is_symlink()
        assert published.samefile(rows[precision]["artifact"])  # a hard link: the cache's bytes, not a copy
        assert (published.parent / f"{published.name}.edgekit.json").is_file()
    assert "artifacts: " in first.stdout and "onnx-int8" in second.stdout


def test_one_format_and_precision_built_twice_gets_a_folder_per_target(tmp_path):
    from edgekit.recipe.run import publish_artifacts

    cached = {}
    for target, key in (("onnxruntime:cpu", "a"), ("onnxruntime:cuda", "a"), ("tensorrt:cuda", "b")):
        path = tmp_path / ".cache" / key / "m.int8.onnx"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(key.encode())
        cached[("onnx", "int8", target)] = path
    cached[("onnx", "fp32", "onnxruntime:cpu")] = tmp_path / ".cache" / "never-built" / "m.fp32.onnx"
    rows = [{"format": f, "precision": p, "target": t} for f, p, t in cached]
    published = [r.get("published") for r in publish_artifacts(rows, cached, tmp_path / "artifacts" / "m")]
    cpu, cuda, trt, fp32 = (Path(p) if p else None for p in published)
    assert cpu == cuda == tmp_path / "artifacts" / "m" / "onnx-int8-onnxruntime-cpu" / "m.int8.onnx" and cpu.read_bytes() == b"a"
    assert trt.parent.name == "onnx-int8-tensorrt-cuda" and trt.read_bytes() == b"b" and fp32 is None


def test_report_and_gate_commands(damaged_run, tmp_path):
    folder, _, _ = damaged_run
    saved = folder / "out" / "report.json"
    from edgekit.report.schema import schema_problem

    assert schema_problem(json.loads(saved.read_text())) is None  # the matrix report follows the published schema
    md = run_cli("report", saved, "--format", "md")
    assert md.code == 0 and md.stdout.startswith("### edgekit") and "onnxruntime:cpu" in md.stdout
    assert run_cli("report", saved, "--format", "junit", "-o", tmp_path / "j.xml").code == 0 and (tmp_path / "j.xml").exists()
    gate = run_cli("gate", saved, "--baseline", saved, "--reports-only")
    assert gate.code == 2 and "latency_vs_baseline" in gate.stdout and "accuracy_drop" in gate.stdout
    assert_clean_error(run_cli("report", saved, "--format", "pdf"), "unknown report format")


def test_gate_flags_a_real_latency_regression(damaged_run, tmp_path):
    folder, _, _ = damaged_run
    report = json.loads((folder / "out" / "report.json").read_text())
    for row in report["rows"]:
        row["gates"], report["thresholds"], report["requested_thresholds"], report["default_gates"] = [], {}, {}, False
    slower = json.loads(json.dumps(report))
    for row in slower["rows"]:
        if row["status"] == "ok":  # slower beyond the whole spread the report records: flagged even from reports alone
            factor = 1.2 * max(row["times_ms"]) / min(row["times_ms"])
            row["times_ms"] = [t * factor for t in row["times_ms"]]
    (tmp_path / "old.json").write_text(json.dumps(report))
    (tmp_path / "new.json").write_text(json.dumps(slower))
    assert run_cli("gate", tmp_path / "old.json", "--baseline", tmp_path / "old.json", "--reports-only").code == 0
    regressed = run_cli("gate", tmp_path / "new.json", "--baseline", tmp_path / "old.json", "--reports-only", "--junit", tmp_path / "g.xml")
    assert regressed.code == 2 and regressed.stdout.count("FAIL") == 3


def test_init_writes_a_recipe_that_validates(tmp_path, weights_path):
    out = tmp_path / "edgekit.yaml"
    result = run_cli(
        "init",
        "edgekit.zoo.models:fashion_cnn",
        "--weights",
        weights_path,
        "-i",
        "image:1x1x28x28",
        "-o",
        out,
        "--calib",
        "c.npz",
        "--val",
        "v.npz",
    )
    assert result.code == 0 and "TODO" not in result.stdout + out.read_text(), result.stdout  # no TODO claimed where none is
    recipe = load_recipe(out)
    assert recipe.model.inputs == ("image:1x1x28x28",) and recipe.gates.max_drop == 0.5
    assert_clean_error(run_cli("init", "edgekit.zoo.models:fashion_cnn", "-o", out), "exists")


def test_a_recipe_with_todo_fields_is_refused_before_any_work(tmp_path):
    out = tmp_path / "edgekit.yaml"
    written = run_cli("init", "zoo:fashion-cnn", "-o", out, "--val", "zoo:fashion-mnist-test")
    line = next(i for i, text in enumerate(out.read_text().splitlines(), 1) if "TODO" in text and "path:" in text)
    assert written.code == 0 and f"fill in calibration.path (line {line})" in written.stdout and "validation" not in written.stdout
    result = run_cli("run", out)
    assert_clean_error(result, f"1 field(s) still TODO: calibration.path (line {line})")
    assert not (tmp_path / "edgekit-report").exists()  # refused before the report folder (or any conversion) was made


def test_convert_emits_a_recipe_that_reproduces_it(tmp_path, weights_path, demo_data):
    recipe = tmp_path / "r.yaml"
    result = run_cli(
        "convert",
        "edgekit.zoo.models:fashion_cnn",
        "--weights",
        weights_path,
        "--to",
        "onnx",
        "-i",
        "image:1x1x28x28",
        "-p",
        "int8",
        "--calib",
        demo_data[1],
        "-o",
        tmp_path / "m.onnx",
        "--emit-recipe",
        recipe,
    )
    assert result.code == 0
    parsed = load_recipe(recipe)
    assert parsed.matrix.cells() == [("onnx", "int8", "onnxruntime:cpu")]
    # paths are written relative to the recipe, and resolved from its folder
    assert Path(parsed.resolve(parsed.calibration.path)).resolve() == Path(demo_data[1]).resolve()
    assert Path(parsed.resolve(parsed.model.weights)).resolve() == Path(weights_path).resolve()


def test_a_failed_cell_does_not_stop_the_others(tmp_path, small_test_npz):
    recipe = _write(
        tmp_path,
        f"""
        model: {{path: zoo:fashion-cnn}}
        validation: {{path: {small_test_npz}}}
        matrix: {{formats: [onnx], precisions: [fp32, int8], targets: {{onnx: [onnxruntime:cpu, onnxruntime:cuda]}}}}
        latency: {{threads: 1, runs: 5, warmup: 1}}
        report: {{dir: out, formats: [json]}}
        """,
    )
    result = run_cli("run", recipe, "-q")
    assert result.code == 1, result.stderr
    rows = json.loads((tmp_path / "out" / "report.json").read_text())["rows"]
    status = {(r["precision"], r["target"]): r["status"] for r in rows}
    assert status[("fp32", "onnxruntime:cpu")] == "ok"
    assert (
        "needs calibration data" in status[("int8", "onnxruntime:cpu")]
        and "onnxruntime:cuda is not available here; hint: pip install onnxruntime-gpu" in status[("fp32", "onnxruntime:cuda")]
    )


def test_the_model_itself_is_a_matrix_row_on_its_own_targets(tmp_path, small_test_npz):
    recipe = _write(
        tmp_path,
        f"""
        model: {{path: zoo:fashion-cnn}}
        validation: {{path: {small_test_npz}, limit: 1000}}
        matrix: {{formats: [torch], precisions: [fp32, int8], targets: {{torch: ["torch:cpu", "torch:cpu[dtype=bf16]"]}}}}
        latency: {{threads: 1, runs: 5, warmup: 1}}
        gates: {{max_drop: 0.5}}
        report: {{dir: out, formats: [json]}}
        """,
    )
    assert load_recipe(recipe).matrix.cells() == [("torch", "fp32", "torch:cpu"), ("torch", "fp32", "torch:cpu[dtype=bf16]")]
    result = run_cli("run", recipe, "-q")
    assert result.code == 0, result.stdout + result.stderr
    rows = json.loads((tmp_path / "out" / "report.json").read_text())["rows"]
    assert [(r["target"], r["status"]) for r in rows] == [("torch:cpu", "ok"), ("torch:cpu[dtype=bf16]", "ok")]
    assert rows[0]["drop_points"] == 0 and abs(rows[1]["drop_points"]) <= 0.5
    assert rows[0]["speedup"] == 1.0 and rows[1]["speedup"] == rows[0]["p50_ms"] / rows[1]["p50_ms"]  # vs plain torch:cpu


def test_demo_variants_write_to_their_own_folders(tmp_path, monkeypatch):
    from edgekit.demo import demo_recipe

    monkeypatch.chdir(tmp_path)
    folders = {Path(demo_recipe(None, variant=variant).report.dir) for variant in ("pytorch", "keras", "detector")}
    assert folders == {tmp_path / "edgekit-demo", tmp_path / "edgekit-demo-keras", tmp_path / "edgekit-demo-detector"}
    assert Path(demo_recipe(tmp_path / "mine", variant="keras").report.dir) == tmp_path / "mine"


def test_demo_limit_validates_on_a_subset_and_the_default_on_all_of_it():
    """`demo --limit N` (the e2e demo tests run on 2,000 images) sets the recipe's validation limit, the seeded subset
    `validate --limit` takes; without it the demo validates on the whole set, as before."""
    from edgekit.demo import RECIPES, demo_recipe
    from edgekit.recipe.schema import load_recipe

    for variant in RECIPES:
        assert demo_recipe(None, variant=variant).validation == load_recipe(RECIPES[variant]).validation
        assert demo_recipe(None, variant=variant, limit=50).validation.limit == 50


def test_the_cache_key_follows_the_int8_scheme_not_how_the_class_was_named(tmp_path, monkeypatch):
    import dataclasses

    from edgekit import isa
    from edgekit.conversion import CalibrationOptions, ConvertOptions
    from edgekit.recipe.cells import cache_key
    from edgekit.source import ModelSource

    model, data = tmp_path / "m.onnx", tmp_path / "calib.npz"
    model.write_bytes(b"model")
    data.write_bytes(b"data")
    source = ModelSource(str(model), "onnx")

    def key(precision: str, for_target: str) -> str:
        calibration = CalibrationOptions(str(data), 100) if precision == "int8" else CalibrationOptions()
        return cache_key(source, "onnx", ConvertOptions(precision, (), calibration, for_target=for_target))

    host = isa.host_class().name
    assert key("int8", "onnxruntime:cpu") == key("int8", host)  # this host's class, named or not: one artifact
    assert key("int8", "x86-avx2") != key("int8", "x86-vnni") and key("fp32", "x86-avx2") == key("fp32", "x86-vnni")
    before = key("int8", "x86-avx2")
    monkeypatch.setitem(isa.CLASSES, "x86-avx2", dataclasses.replace(isa.CLASSES["x86-avx2"], weights="uint8"))
    assert key("int8", "x86-avx2") != before  # the same class with another scheme (an older edgekit's): rebuilt
