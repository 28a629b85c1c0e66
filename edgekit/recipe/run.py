"""`edgekit run`: a recipe's matrix of formats x precisions x targets, each cell converted (or taken from
the cache), validated, timed and gated; one failed cell does not stop the others."""

from __future__ import annotations

import logging
import re
from dataclasses import asdict
from pathlib import Path

from edgekit import registry
from edgekit.artifact import TensorSpec, parse_input_spec
from edgekit.isa import host_class, speedup_note
from edgekit.metrics.coverage import why_size_only
from edgekit.metrics.gate import check_row, failures, with_default_gates
from edgekit.pruning import PruneOptions
from edgekit.recipe.cache import cached_build, publish
from edgekit.recipe.cells import artifact_path, run_cell
from edgekit.recipe.schema import Recipe
from edgekit.report.schema import new_report
from edgekit.source import ModelSource, file_hash, fingerprint, open_source, source_fingerprint, zoo_model
from edgekit.zoo.names import TEXT, is_zoo, zoo_data

log = logging.getLogger("edgekit")
SCHEMA = "matrix"
ARTIFACTS = "artifacts"  # REPORT_DIR/artifacts/MODEL/FORMAT-PRECISION/: the run's artifacts, linked out of .cache


def run_recipe(recipe: Recipe, use_cache: bool = True, progress=None, ray=None) -> dict:
    """Run every cell; returns the matrix report (rows with gate results). `ray` (a
    distributed.RayOptions) runs the cells' host-side work as Ray tasks; timings stay alone on their machine."""
    workdir = Path(recipe.resolve(recipe.report.dir))
    workdir.mkdir(parents=True, exist_ok=True)
    source, inputs, layout = model_source(recipe)
    model_name = source.name
    validation = data_path(recipe.resolve(recipe.validation.path), workdir, layout)
    calibration = data_path(recipe.resolve(recipe.calibration.path), workdir, layout)
    source = apply_compression(recipe, source, inputs, validation, workdir / ".cache", progress)
    if ray is None:
        rows = run_cells_here(recipe, source, inputs, validation, calibration, workdir / ".cache", use_cache, progress)
    else:
        from edgekit.recipe.distributed import run_cells

        rows = run_cells(ray, recipe, source, inputs, validation, calibration, workdir / ".cache", use_cache, progress)
    cached = {cell: artifact_path(recipe, source, inputs, *cell, calibration, workdir / ".cache") for cell in recipe.matrix.cells()}
    rows = publish_artifacts(with_speedups(rows), cached, workdir / ARTIFACTS / model_name)
    gates = with_default_gates(recipe.gates)
    for row in rows:
        results = check_row(row, with_default_gates(recipe.gates, True, row)) if row["status"] == "ok" else []
        row["gates"] = [r.to_dict() for r in results]
        row["passed"] = row["status"] == "ok" and not failures(results)
    report = new_report(SCHEMA, ("torch", "onnxruntime", "openvino", "ai-edge-litert", "tensorflow-cpu"))
    report.update(
        recipe=_recipe_dict(recipe),
        model=recipe.model.path,
        data={"validation": validation, "calibration": calibration},
        thresholds=gates.to_dict(),
        requested_thresholds=recipe.gates.to_dict(),
        default_gates=True,
        rows=rows,
        passed=all(r["passed"] for r in rows),
        execution=ray.to_dict() if ray is not None else {"mode": "serial"},
    )
    return report


def publish_artifacts(rows: list[dict], cached: dict[tuple, Path | None], folder: Path) -> list[dict]:
    """Each built artifact out of the cache into FOLDER/FORMAT-PRECISION/ (-TARGET added where one format and
    precision has several artifacts, e.g. int8 for a CPU and for TensorRT); the row's `published` names it.

    The row's `artifact` stays the cache's content-addressed path: a baseline report keeps pointing at its own bytes.
    """
    built = {cell: path for cell, path in cached.items() if path is not None and path.exists()}
    variants = {(f, p): {path for (f2, p2, _), path in built.items() if (f2, p2) == (f, p)} for f, p, _ in built}
    names: dict[Path, str] = {}
    for (fmt, precision, target), path in built.items():
        suffix = "" if len(variants[(fmt, precision)]) == 1 else "-" + re.sub(r"[^A-Za-z0-9._=-]+", "-", target).strip("-")
        names.setdefault(path, f"{fmt}-{precision}{suffix}")
    published = {path: publish(path, folder / name) for path, name in names.items()}
    return [{**row, "published": str(published[p])} if (p := built.get(_cell(row))) else row for row in rows]


def _cell(row: dict) -> tuple[str, str, str]:
    return row["format"], row["precision"], row["target"]


def run_cells_here(recipe, source, inputs, validation, calibration, cache: Path, use_cache: bool, progress) -> list[dict]:
    """Every cell in this process, one after the other."""
    rows = []
    for fmt, precision, target in recipe.matrix.cells():
        say(progress, f"{fmt} {precision} on {target}")
        rows.append(run_cell(recipe, source, inputs, fmt, precision, target, validation, calibration, cache, use_cache))
    return rows


def say(progress, text: str) -> None:
    if progress is not None:
        progress(text)


def model_source(recipe: Recipe) -> tuple[ModelSource, tuple[TensorSpec, ...], str]:
    """The recipe's model (a zoo: name or a path/factory), its --input specs and input layout."""

    if is_zoo(recipe.model.path):
        source, inputs, layout = zoo_model(recipe.model.path)
    else:
        source, inputs, layout = (
            open_source(recipe.resolve(recipe.model.path), recipe.resolve(recipe.model.weights), recipe.model.allow_pickle),
            recipe.model.inputs,
            "nchw",
        )
    return source, tuple(parse_input_spec(i) for i in (recipe.model.inputs or inputs)), layout


def data_path(path: str | None, workdir: Path, layout: str) -> str | None:
    """A data path, with zoo:fashion-mnist-test / zoo:fashion-mnist-calib written out on first use (a language model's
    zoo token data is read where it is committed)."""

    return str(zoo_data(path, workdir, layout)) if is_zoo(path) and path not in TEXT else path


def apply_compression(recipe: Recipe, source: ModelSource, inputs, validation: str | None, cache: Path, progress) -> ModelSource:
    """Run the recipe's compression stages in order; each result is cached like an artifact."""
    from edgekit.pruning.stages import prune

    for i, stage in enumerate(recipe.compress):
        options = PruneOptions.from_section(vars(stage))
        suffix = registry.backend(source.family).suffix  # the pruner writes its framework's own file: .pt2, .keras
        key = fingerprint({"source": source_fingerprint(source), "stage": stage.__dict__, "data": file_hash(validation)})
        out = cache / key / f"{source.name}.compress{i}{suffix}"
        finetune = recipe.resolve(stage.finetune)
        build = lambda: (say(progress, f"compress: {stage.method}"), prune(source, options, out, list(inputs), validation, finetune))  # noqa: E731,B023
        cached_build(out, build)
        source = open_source(str(out))
    return source


def with_speedups(rows: list[dict]) -> list[dict]:
    """Speed-up of each row vs the fp32 row of the same format and target without options (torch:cpu for
    torch:cpu[compile=default]); None where there is none."""
    base = {(r["format"], r["target"]): r["p50_ms"] for r in rows if r["status"] == "ok" and r["precision"] == "fp32"}

    def speedup(row: dict) -> float | None:
        reference = base.get((row["format"], row["target"].partition("[")[0]))
        return reference / row["p50_ms"] if row["status"] == "ok" and reference else None

    isa_class = host_class().name
    rows = [{**r, "speedup": speedup(r)} for r in rows]
    return [{**r, "speedup_note": _size_only(r, isa_class)} for r in rows]


def _size_only(row: dict, isa_class: str) -> str | None:
    """The note of an int8 row that is not faster, with what its int8 coverage says of why."""
    note = speedup_note(row["precision"], row["speedup"], isa_class)
    why = why_size_only(row.get("int8_coverage_detail"))
    return f"{note}; {why}" if note and why else note


def _recipe_dict(recipe: Recipe) -> dict:

    data = asdict(recipe)
    data["base_dir"] = str(recipe.base_dir)
    return data
