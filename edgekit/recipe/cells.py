"""One cell of a recipe's matrix (a format, a precision, a target): its artifact converted or taken from the cache
(content-addressed by cache_key), validated on the host (prepare_cell), then timed alone (time_cell)."""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass, field, replace
from pathlib import Path

from edgekit.conversion import SUFFIXES, TEXT_GENERATION, CalibrationOptions, ConvertOptions
from edgekit.errors import EdgekitError
from edgekit.machine import package_versions
from edgekit.quantization.scheme import choose_scheme
from edgekit.recipe.cache import cached_build
from edgekit.recipe.schema import SOURCE_FORMATS
from edgekit.source import ModelSource, file_hash, fingerprint, source_fingerprint
from edgekit.validation.benchmark import BenchSettings
from edgekit.zoo.names import zoo_labels

log = logging.getLogger("edgekit")
STATIC_INT8_ONLY = ("val", "max_drop", "min_agreement", "min_cosine", "min_map_kept")  # accuracy control's convert keys


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
    """The host-side work of a cell (convert or reuse, fidelity and accuracy): the part that may run anywhere. The
    artifact is judged against the model it is converted from, or a pruned variant's original (ModelSource.original)."""
    from edgekit.metrics.task_metrics import TaskSettings
    from edgekit.validation.validate import ValidationRequest, evaluate

    cell = PreparedCell({"format": fmt, "precision": precision, "target": target}, host_work=where_this_runs())
    try:
        artifact, cell.cached = _artifact(recipe, source, inputs, fmt, precision, target, calibration, cache, use_cache)
        lat = recipe.latency
        if recipe.convert.task == TEXT_GENERATION:
            return _prepare_language_model(cell, recipe, artifact, source.original or source, target, validation)
        cell.request = ValidationRequest(
            artifact,
            source.original or source,
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
    from edgekit.validation.text_generation import GenerationSettings, LMValidationRequest, evaluate_lm

    lat = recipe.latency
    settings = GenerationSettings(lat.prompt_len, lat.new_tokens, min(lat.runs, 5), min(lat.warmup, 1), lat.threads, target)
    cell.request = LMValidationRequest(artifact, source, validation, recipe.validation.limit, settings)
    cell.report, cell.feeds = evaluate_lm(cell.request)
    return cell


def time_cell(cell: PreparedCell, measured=None) -> dict:
    """The cell's latency run (alone on its machine; `measured`: a BenchResult of it timed already) and its row; a
    failure becomes the row's status."""
    from edgekit.validation.text_generation import LMValidationRequest, add_lm_latency
    from edgekit.validation.validate import add_latency, summary_row

    where = {"host_work": cell.host_work}
    if cell.failure:
        return {**cell.base, "status": cell.failure, "cached": False, **where}
    try:
        if isinstance(measured, EdgekitError):
            raise measured
        if isinstance(cell.request, LMValidationRequest):
            report = add_lm_latency(cell.report, cell.request, cell.feeds)
        else:
            report = add_latency(cell.report, cell.request, cell.feeds, measured)
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
    options = cell_options(recipe, inputs, precision, target, calibration)
    out = artifact_path(recipe, source, inputs, fmt, precision, target, calibration, cache)
    if options.language_model:
        from edgekit.converters.causal_lm import convert_lm as convert
    cached = cached_build(out, lambda: convert(source, fmt, out, options), use_cache)
    artifact = describe(out, fmt, None)
    return ModelSource(str(artifact.path), fmt), cached


def artifact_path(recipe, source, inputs, fmt, precision, target, calibration, cache: Path) -> Path | None:
    """Where a cell's artifact lives in the content-addressed cache (None: the cell runs the model itself)."""
    if fmt in SOURCE_FORMATS:
        return None
    options = cell_options(recipe, inputs, precision, target, calibration)
    return cache / cache_key(source, fmt, options) / f"{source.name}.{precision}{SUFFIXES[fmt]}"


def cell_options(recipe, inputs, precision, target, calibration) -> ConvertOptions:
    """The cell's options: the recipe's calibration and `convert:` section (quantization options on int8 cells only)."""
    calibration_options = CalibrationOptions.from_section(vars(recipe.calibration) | {"path": calibration})
    section = vars(recipe.convert) | {"for_target": recipe.convert.for_target or target, "val": recipe.resolve(recipe.convert.val)}
    if not precision.startswith("int8"):
        section["per_tensor"] = False
    if precision != "int8":  # accuracy control: static int8 only
        section |= dict.fromkeys(STATIC_INT8_ONLY)
    options = ConvertOptions.from_section(precision, inputs, calibration_options, section)
    return replace(options, max_ppl_ratio=recipe.gates.max_ppl_ratio)  # a language model's convert holds the recipe's gate


def cache_key(source: ModelSource, fmt: str, options: ConvertOptions) -> str:
    """Hash of the source model's content, the conversion options (with the data's content) and tool versions."""

    opts = {
        "format": fmt,
        "precision": options.precision,
        "inputs": [s.to_dict() for s in options.inputs],
        "calibration": {
            **options.calibration.__dict__,
            # the data's content wherever it may shape the artifact: int8's ranges, a language model's AWQ, int4 share and check
            "data": file_hash(options.calibration.data) if options.precision not in ("fp32", "fp16") else None,
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

    scheme = choose_scheme(for_target).to_dict()
    scheme.pop("isa_from")  # how the class was named (this host, --for-target) does not change the artifact
    return scheme
