"""`edgekit run`: a recipe's matrix of formats x precisions x targets, each cell converted (or taken from
the cache), validated, timed and gated; one failed cell does not stop the others."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

from edgekit import registry
from edgekit.artifact import TensorSpec, parse_input_spec
from edgekit.conversion import SUFFIXES, CalibrationOptions, ConvertOptions
from edgekit.errors import EdgekitError
from edgekit.isa import host_class, speedup_note
from edgekit.metrics.coverage import why_size_only
from edgekit.metrics.gate import check_row, failures, with_default_gates
from edgekit.recipe.cache import cached_build, publish
from edgekit.recipe.schema import SOURCE_FORMATS, Recipe
from edgekit.report.schema import new_report
from edgekit.source import ModelSource, open_source
from edgekit.validate.benchmark import BenchSettings

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
        _say(progress, f"{fmt} {precision} on {target}")
        rows.append(run_cell(recipe, source, inputs, fmt, precision, target, validation, calibration, cache, use_cache))
    return rows


def _say(progress, text: str) -> None:
    if progress is not None:
        progress(text)


def model_source(recipe: Recipe) -> tuple[ModelSource, tuple[TensorSpec, ...], str]:
    """The recipe's model (a zoo: name or a path/factory), its --input specs and input layout."""
    from edgekit.source import zoo_model
    from edgekit.zoo.names import is_zoo

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
    from edgekit.zoo.names import TEXT, is_zoo, zoo_data

    return str(zoo_data(path, workdir, layout)) if is_zoo(path) and path not in TEXT else path


def apply_compression(recipe: Recipe, source: ModelSource, inputs, validation: str | None, cache: Path, progress) -> ModelSource:
    """Run the recipe's compression stages in order; each result is cached like an artifact."""
    from edgekit.pruning import PruneOptions
    from edgekit.pruning.stages import prune

    for i, stage in enumerate(recipe.compress):
        options = PruneOptions.from_section(vars(stage))
        suffix = registry.backend(source.family).suffix  # the pruner writes its framework's own file: .pt2, .keras
        key = fingerprint({"source": source_fingerprint(source), "stage": stage.__dict__, "data": _file_hash(validation)})
        out = cache / key / f"{source.name}.compress{i}{suffix}"
        finetune = recipe.resolve(stage.finetune)
        build = lambda: (_say(progress, f"compress: {stage.method}"), prune(source, options, out, list(inputs), validation, finetune))  # noqa: E731,B023
        cached_build(out, build)
        source = open_source(str(out))
    return source


@dataclass
class PreparedCell:
    """A cell after its host-side work (conversion, accuracy), before its timing; or its failure."""

    base: dict  # format, precision, target
    cached: bool = False
    failure: str | None = None
    request: object = None  # the ValidationRequest
    report: dict | None = None  # the validation report so far (no latency)
    feeds: dict | None = None  # the inputs the latency run feeds
    host_work: dict = field(default_factory=dict)  # where the host-side work ran
    sizes: dict = field(default_factory=dict)  # gzip/coded sizes, where a size gate asks for them


def run_cell(recipe, source, inputs, fmt, precision, target, validation, calibration, cache: Path, use_cache: bool) -> dict:
    """Convert (or reuse), validate and time one cell; an EdgekitError becomes the row's status."""
    return time_cell(prepare_cell(recipe, source, inputs, fmt, precision, target, validation, calibration, cache, use_cache))


def prepare_cell(recipe, source, inputs, fmt, precision, target, validation, calibration, cache: Path, use_cache: bool) -> PreparedCell:
    """The host-side work of a cell (convert or reuse, fidelity and accuracy): the part that may run anywhere."""
    from edgekit.metrics.task_metrics import TaskSettings
    from edgekit.validate.validation import ValidationRequest, evaluate
    from edgekit.zoo.names import zoo_labels

    cell = PreparedCell({"format": fmt, "precision": precision, "target": target}, host_work=where_this_runs())
    try:
        artifact, cell.cached = _artifact(recipe, source, inputs, fmt, precision, target, calibration, cache, use_cache)
        lat = recipe.latency
        if recipe.convert.task:
            return _prepare_language_model(cell, recipe, artifact, source, target, validation)
        cell.request = ValidationRequest(
            artifact,
            source,
            target,
            validation,
            recipe.validation.limit,
            recipe.validation.preprocess,
            inputs,
            latency=BenchSettings(target, lat.threads, lat.batch, lat.warmup, lat.runs),
            task=recipe.validation.task,
            labels=recipe.resolve(recipe.validation.labels) or zoo_labels(recipe.validation.path or ""),  # a zoo set's own boxes
            task_settings=TaskSettings(recipe.validation.postprocess, recipe.validation.mask_threshold),
            ignore_label=recipe.validation.ignore_label,
        )
        cell.report, cell.feeds = evaluate(cell.request)
        if recipe.gates.size_metric in ("gzip", "coded") and artifact.path:
            from edgekit.metrics.coding import size_metrics

            cell.sizes = size_metrics(artifact.path)
    except EdgekitError as exc:
        cell.failure = f"failed: {exc.one_line()}"
    return cell


def _prepare_language_model(
    cell: PreparedCell, recipe, artifact: ModelSource, source: ModelSource, target: str, validation
) -> PreparedCell:
    """A language model's cell: perplexity, KL, next-token agreement and greedy match against PyTorch (no timing)."""
    from edgekit.validate.text_generation import GenerationSettings, LMValidationRequest, evaluate_lm

    lat = recipe.latency
    settings = GenerationSettings(lat.prompt_len, lat.new_tokens, min(lat.runs, 5), min(lat.warmup, 1), lat.threads, target)
    cell.request = LMValidationRequest(artifact, source, validation, recipe.validation.limit, settings)
    cell.report, cell.feeds = evaluate_lm(cell.request)
    return cell


def time_cell(cell: PreparedCell) -> dict:
    """The cell's latency run (alone on its machine) and its row; a failure becomes the row's status."""
    from edgekit.validate.text_generation import LMValidationRequest, add_lm_latency
    from edgekit.validate.validation import add_latency, summary_row

    where = {"host_work": cell.host_work}
    if cell.failure:
        return {**cell.base, "status": cell.failure, "cached": False, **where}
    try:
        timed = add_lm_latency if isinstance(cell.request, LMValidationRequest) else add_latency
        report = timed(cell.report, cell.request, cell.feeds)
    except EdgekitError as exc:
        return {**cell.base, "status": f"failed: {exc.one_line()}", "cached": False, **where}
    timed_on = {**where_this_runs(), "machine": timing_machine(cell.base["target"])}
    row = {**summary_row(report), **cell.base, "cached": cell.cached, **where, "timed_on": timed_on, **cell.sizes}
    if row["random_data"]:
        row["warning"] = "validated on random inputs: no accuracy"
    return row


def timing_machine(target: str) -> str:
    """Where a cell is timed: a device's name (`RUNTIME:DEVICE@NAME`), or "host" for this machine."""
    name = target.rpartition("]")[2].rpartition("@")[2] if "@" in target.rpartition("]")[2] else ""
    return name or "host"


def where_this_runs() -> dict:
    """The machine and process doing the work now (a report says where each cell ran and was timed)."""
    import os
    import socket

    return {"host": socket.gethostname(), "pid": os.getpid()}


def _artifact(recipe, source, inputs, fmt, precision, target, calibration, cache: Path, use_cache: bool) -> tuple[ModelSource, bool]:
    """The cell's artifact and whether it came from the cache: converted (or reused), or the model itself."""
    from edgekit.converters.pipeline import convert
    from edgekit.provenance import describe

    if fmt in SOURCE_FORMATS:
        if source.family != fmt:
            raise EdgekitError(
                f"matrix format {fmt} is the model itself, but the model is {source.format}", hint=f"list {source.family} instead"
            )
        return source, False
    options = _convert_options(recipe, inputs, precision, target, calibration)
    out = artifact_path(recipe, source, inputs, fmt, precision, target, calibration, cache)
    if options.task:
        from edgekit.converters.causal_lm import convert_lm as convert
    cached = cached_build(out, lambda: convert(source, fmt, out, options), use_cache)
    artifact = describe(out, fmt, None)
    return ModelSource(str(artifact.path), fmt), cached


def artifact_path(recipe, source, inputs, fmt, precision, target, calibration, cache: Path) -> Path | None:
    """Where a cell's artifact lives in the content-addressed cache (None: the cell runs the model itself)."""
    if fmt in SOURCE_FORMATS:
        return None
    options = _convert_options(recipe, inputs, precision, target, calibration)
    return cache / cache_key(source, fmt, options) / f"{source.name}.{precision}{SUFFIXES[fmt]}"


def _convert_options(recipe, inputs, precision, target, calibration) -> ConvertOptions:
    """The cell's options: the recipe's calibration and `convert:` section (quantization options on int8 cells only)."""
    calibration_options = CalibrationOptions.from_section(vars(recipe.calibration) | {"path": calibration})
    section = vars(recipe.convert) | {"for_target": recipe.convert.for_target or target, "val": recipe.resolve(recipe.convert.val)}
    if not precision.startswith("int8"):
        section["per_tensor"] = False
    if precision != "int8":  # accuracy control: static int8 only
        section |= dict.fromkeys(("val", "max_drop", "min_agreement", "min_cosine"))
    return ConvertOptions.from_section(precision, inputs, calibration_options, section)


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


def cache_key(source: ModelSource, fmt: str, options: ConvertOptions) -> str:
    """Hash of the source model's content, the conversion options (with the data's content) and tool versions."""
    from edgekit.machine import package_versions

    opts = {
        "format": fmt,
        "precision": options.precision,
        "inputs": [s.to_dict() for s in options.inputs],
        "calibration": {
            **options.calibration.__dict__,
            "data": _file_hash(options.calibration.data) if options.precision == "int8" else None,
        },
        "options": {k: v for k, v in options.__dict__.items() if k not in ("precision", "inputs", "calibration", "for_target")},
        # the int8 scheme depends on where the cell runs: a cache made on a VNNI host is not an AVX2 host's
        "int8_for": _int8_for(options.for_target) if options.precision == "int8" else None,
    }
    tools = package_versions(
        "torch", "onnx", "onnxruntime", "onnxscript", "openvino", "nncf", "tensorflow-cpu", "litert-torch", "ai-edge-litert"
    )
    return fingerprint({"source": source_fingerprint(source), "options": opts, "tools": tools})


def _int8_for(for_target: str) -> dict:
    """The int8 scheme of the target (TensorRT's, or its CPU class's): a cache made with another scheme for the
    same class (an older edgekit's) is not reused."""
    from edgekit.quantize.scheme import choose_scheme

    scheme = choose_scheme(for_target).to_dict()
    scheme.pop("isa_from")  # how the class was named (this host, --for-target) does not change the artifact
    return scheme


def fingerprint(data: dict) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:20]


def source_fingerprint(source: ModelSource) -> dict:
    """What identifies a model's content: file hashes (a factory: its module file and the weights)."""
    if source.format == "torch-factory":
        import importlib.util

        module = source.spec.rpartition(":")[0]
        origin = module if module.endswith(".py") else getattr(importlib.util.find_spec(module), "origin", None)
        return {"factory": source.spec, "code": _file_hash(origin), "weights": _file_hash(str(source.weights) if source.weights else None)}
    return {"format": source.format, "content": _file_hash(source.spec)}


def _file_hash(path: str | None) -> str | None:
    from edgekit.fileio import sha256_of_file

    if path is None or ":" in path and not Path(path).exists():
        return path
    p = Path(path)
    if p.is_dir():
        return fingerprint({str(f.relative_to(p)): sha256_of_file(f) for f in sorted(p.rglob("*")) if f.is_file()})
    return sha256_of_file(p) if p.exists() else None


def _recipe_dict(recipe: Recipe) -> dict:
    from dataclasses import asdict

    data = asdict(recipe)
    data["base_dir"] = str(recipe.base_dir)
    return data
