"""The Python API: one function per command, the same arguments, typed results.

    import edgekit
    artifact = edgekit.convert("zoo:fashion-cnn", to="onnx", precision="int8")
    result = edgekit.validate(artifact.path)          # reference and data from the artifact's provenance
    result.gate.passed, result.accuracy["drop_points"], result.to_json()

Each function is what its command runs; the command only parses, calls it, renders and sets the exit code.
Bad input raises `edgekit.errors.EdgekitError` (the CLI prints it as `error: ...`). Frameworks are imported
only inside the functions that need them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from edgekit.api.results import Bench, Converted, GateCheck, Matrix, Prune, Validation

__all__ = ["bench", "convert", "gate", "prune", "quantize", "run", "validate"]
log = logging.getLogger("edgekit")
Strings = Sequence[str] | None


def convert(
    model: str,
    to: str,
    output: str | Path | None = None,
    *,
    inputs: Strings = None,
    weights: str | None = None,
    allow_pickle: bool = False,
    precision: str = "fp32",
    calib: str | None = None,
    calib_samples: int = 300,
    calib_method: str = "auto",
    preprocess: str | None = None,
    per_tensor: bool = False,
    exclude: Strings = None,
    keep_sensitive: bool = True,
    for_target: str = "onnxruntime:cpu",
    seed: int = 0,
    random_calibration: bool = False,
    val: str | None = None,
    val_samples: int = 1000,
    max_drop: float | None = None,
    min_agreement: float | None = None,
    min_cosine: float | None = None,
    model_type: str | None = None,
    io_dtype: str | None = None,
    layout: str = "nchw",
    device: str | None = None,
    max_batch: int = 64,
    opt_batch: int = 1,
    emit_recipe: str | Path | None = None,
) -> Converted:
    """`edgekit convert`: MODEL (a file, module:factory or zoo: name) to format `to` at `precision`, written atomically.

    A zoo model needs no `calib` (its declared calibration set is used, and the provenance says so); a model
    that does not record its input shapes takes them from `calib`/`val` when `inputs` is not given."""
    from edgekit.api import guess
    from edgekit.conversion import CalibrationOptions, ConvertOptions
    from edgekit.source import open_source

    source = open_source(model, weights, allow_pickle)
    default = guess.default_calibration(source, precision, calib)
    specs = guess.inputs_from_data(source, _specs(inputs), calib or default, val)
    calibration = CalibrationOptions(
        calib or default, calib_samples, calib_method, seed, preprocess, random_calibration, source.zoo if default else None
    )
    options = ConvertOptions(
        precision,
        specs,
        calibration,
        per_tensor,
        tuple(exclude or ()),
        for_target,
        model_type=model_type,
        validation_data=val,
        validation_samples=val_samples,
        max_drop=max_drop,
        min_agreement=min_agreement,
        min_cosine=min_cosine,
        io_dtype=io_dtype or ("int8" if device else "float32"),
        layout=layout,
        device=device,
        max_batch=max_batch,
        opt_batch=opt_batch,
        keep_sensitive=keep_sensitive,
    )
    _check_choices(options)
    if emit_recipe:
        from edgekit.recipe.write import emit, recipe_of_conversion

        emit(emit_recipe, **recipe_of_conversion(model, weights, inputs, to, options))
    return _convert(source, to, Path(output) if output else _default_output(source, to, precision), options)


def quantize(
    model: str,
    output: str | Path,
    *,
    precision: str = "int8",
    calib: str | None = None,
    calib_samples: int = 300,
    calib_method: str = "auto",
    preprocess: str | None = None,
    per_tensor: bool = False,
    exclude: Strings = None,
    keep_sensitive: bool = True,
    for_target: str = "onnxruntime:cpu",
    seed: int = 0,
    random_calibration: bool = False,
    emit_recipe: str | Path | None = None,
) -> Converted:
    """`edgekit quantize`: an existing ONNX model to fp16, int8-dynamic, or static int8 (with `calib`)."""
    from edgekit import registry
    from edgekit.conversion import CalibrationOptions, ConvertOptions
    from edgekit.errors import EdgekitError
    from edgekit.source import open_source

    source = open_source(str(model))
    if not registry.backend(source.family).quantizes_in_place:
        raise EdgekitError(
            f"quantize takes an .onnx file, not {source.format}",
            hint="use `edgekit convert MODEL --to ... --precision ...` for other formats",
        )
    calibration = CalibrationOptions(calib, calib_samples, calib_method, seed, preprocess, random_calibration)
    options = ConvertOptions(precision, (), calibration, per_tensor, tuple(exclude or ()), for_target, keep_sensitive=keep_sensitive)
    _check_choices(options)
    if emit_recipe:
        from edgekit.recipe.write import emit, recipe_of_conversion

        emit(emit_recipe, **recipe_of_conversion(str(model), None, None, "onnx", options))
    return _convert(source, "onnx", Path(output), options)


def prune(
    model: str,
    method: str,
    output: str | Path,
    *,
    inputs: Strings = None,
    weights: str | None = None,
    allow_pickle: bool = False,
    sparsity: float = 0.5,
    scope: str = "global",
    channels: float = 0.3,
    energy: float | None = None,
    keep: float = 0.5,
    clusters: int = 16,
    init: str = "linear",
    surgery: bool = False,
    data: str | None = None,
    finetune: str | None = None,
    epochs: int = 0,
    lr: float = 1e-3,
    precision: str | None = None,
    calib: str | None = None,
    threads: int | None = None,
    max_size_mb: float | None = None,
    size_metric: str = "stored",
    report: str | Path | None = None,
    emit_recipe: str | Path | None = None,
) -> Prune:
    """`edgekit prune`: compress a model, save it, compare original vs compressed (vs quantized) on `data`."""
    from edgekit import registry
    from edgekit.api import guess
    from edgekit.compress import PruneOptions, method_chain
    from edgekit.pruning import STAGE_NAMES, compare_stages, fill_int8_accuracy, gate_compressed
    from edgekit.pruning import prune as run_prune
    from edgekit.source import open_source
    from edgekit.report.schema import new_report

    output = Path(output)
    source = open_source(model, weights, allow_pickle)
    limits = _size_gate(max_size_mb, size_metric)
    options = PruneOptions(
        method, sparsity, scope, channels, energy, None if energy else keep, epochs, lr, clusters=clusters, init=init, surgery=surgery
    )
    specs = list(guess.inputs_from_data(source, _specs(inputs), data, finetune))
    if emit_recipe:
        from edgekit.recipe.write import emit, recipe_of_pruning

        emit(emit_recipe, **recipe_of_pruning(model, weights, inputs, options, data, finetune, precision, calib, threads, limits))
    stage = run_prune(source, options, output, specs, data, finetune)
    result = new_report("prune", ("torch", "onnxruntime"))
    result.update(model=model, output=str(output), options=options.__dict__, stage=stage.to_dict(), stages=[])
    if data and registry.backend(source.family).compares_stages:
        workdir = output.parent / f"{output.stem}.stages"
        name = STAGE_NAMES[method_chain(method)[-1]]
        result["stages"] = compare_stages(source, output, specs, data, workdir, precision, calib, threads, name=name)
        fill_int8_accuracy(result["stage"]["storage"], result["stages"])
    if limits:
        result["gate"] = gate_compressed(result, output, limits)
    return _reported(Prune.from_dict(result), report)


def validate(
    artifact: str,
    reference: str | None = None,
    data: str | None = None,
    *,
    target: str | None = None,
    report: str | Path | None = None,
    emit_recipe: str | Path | None = None,
    inputs: Strings = None,
    weights: str | None = None,
    allow_pickle: bool = False,
    limit: int | None = None,
    preprocess: str | None = None,
    threads: int | None = None,
    warmup: int = 10,
    runs: int = 100,
    batch: int = 1,
    task: str | None = None,
    max_drop: float | None = None,
    min_cosine: float | None = None,
    min_agreement: float | None = None,
    min_snr: float | None = None,
    max_npu_fallback: float | None = None,
    no_default_gates: bool = False,
) -> Validation:
    """`edgekit validate`: compare an artifact with its reference on the same inputs, time it, gate the result.

    Without `reference`, the model the artifact's provenance names; without `data`, a zoo reference's
    declared validation set (the report's `data.default_of` says so). Gate failures are in `.gate`, not raised."""
    from edgekit.api import guess
    from edgekit.source import open_source
    from edgekit.validate.benchmark import BenchSettings
    from edgekit.validate.validation import ValidationRequest
    from edgekit.validate.validation import validate as run_validation

    _check_destinations(report, emit_recipe)
    # The reference itself on another target (torch:cuda, compile, fp16) takes the same weights.
    art = open_source(artifact, weights if artifact == reference else None, allow_pickle)
    ref, reference = (
        (open_source(reference, weights, allow_pickle), reference) if reference else guess.reference_of(art, weights, allow_pickle)
    )
    default = None if data else guess.default_validation(ref)
    request = ValidationRequest(
        art,
        ref,
        target,
        data or default,
        limit,
        preprocess,
        _specs(inputs),
        latency=BenchSettings(target, threads, batch, warmup, runs),
        thresholds=_thresholds(max_drop, min_cosine, min_agreement, min_snr, max_npu_fallback),
        task=task,
        default_gates=not no_default_gates,
    )
    if emit_recipe:
        from edgekit.recipe.write import emit, recipe_of_validation

        recorded = str(ref.weights) if ref.weights and not ref.zoo else None  # a reference found in the provenance brings its weights
        emit(emit_recipe, **recipe_of_validation(request, reference, weights or recorded, inputs))
    result = run_validation(request)
    if default:
        result["data"]["default_of"] = ref.zoo
    return _reported(Validation.from_dict(result), report)


def bench(
    artifacts: str | Sequence[str],
    *,
    target: str | None = None,
    threads: int | None = None,
    batch: int = 1,
    warmup: int = 10,
    runs: int = 100,
    inputs: Strings = None,
    weights: str | None = None,
    allow_pickle: bool = False,
    report: str | Path | None = None,
    emit_recipe: str | Path | None = None,
) -> Bench:
    """`edgekit bench`: load time, first inference, latency percentiles after warm-up, throughput, peak RSS, size."""
    from edgekit.source import open_source
    from edgekit.validate.benchmark import BenchSettings
    from edgekit.validate.benchmark import bench as run_bench
    from edgekit.report.schema import new_report

    artifacts = [artifacts] if isinstance(artifacts, str | Path) else list(artifacts)
    _check_destinations(report, emit_recipe)
    settings = BenchSettings(target, threads, batch, warmup, runs)
    if emit_recipe:
        from edgekit.recipe.write import emit, recipe_of_bench

        emit(emit_recipe, **recipe_of_bench([str(a) for a in artifacts], settings, inputs, weights))
    specs = list(_specs(inputs)) or None
    results = [run_bench(open_source(str(a), weights, allow_pickle), settings, specs).to_dict() for a in artifacts]
    result = new_report("bench", tuple({r["target"].split(":")[0] for r in results}))
    result["results"] = results
    return _reported(Bench.from_dict(result), report)


def run(
    recipe: str | Path,
    *,
    no_cache: bool = False,
    ray: bool = False,
    address: str | None = None,
    ray_cpus: int | None = None,
    progress: Callable | None = None,
) -> Matrix:
    """`edgekit run`: a recipe's matrix, its reports written to the recipe's report folder (`.written` lists them).
    `progress` (a callable taking a line of text) hears of each cell."""
    from edgekit.errors import EdgekitError
    from edgekit.recipe.cache import report_folder
    from edgekit.report.write import write_reports
    from edgekit.recipe.run import run_recipe
    from edgekit.recipe.schema import load_recipe

    parsed = load_recipe(Path(recipe))
    if address and not ray:
        raise EdgekitError(f"'{address}' after the recipe is a Ray address, but --ray is not given", hint="add --ray, or remove it")
    options = None
    if ray:
        from edgekit.recipe.distributed import RayOptions

        options = RayOptions(address=address, num_cpus=ray_cpus)
    with report_folder(Path(parsed.resolve(parsed.report.dir))) as folder:
        result = run_recipe(parsed, use_cache=not no_cache, progress=progress, ray=options)
        written = write_reports(result, folder, parsed.report.formats)
    matrix = Matrix.from_dict(result)
    matrix.written = written
    return matrix


def gate(
    saved: str | Path,
    *,
    baseline: str | Path | None = None,
    baseline_artifact: str | None = None,
    tolerance: float = 0.10,
    max_rounds: int = 8,
    reports_only: bool = False,
    junit: str | Path | None = None,
    max_drop: float | None = None,
    min_cosine: float | None = None,
    min_agreement: float | None = None,
    min_snr: float | None = None,
    max_npu_fallback: float | None = None,
    no_default_gates: bool = False,
    progress: Callable | None = None,
) -> GateCheck:
    """`edgekit gate`: re-check a saved report's gates (the thresholds given replace its own) and its latency
    against a baseline report. `.passed` and `.exit_code` give the verdict."""
    from edgekit.recipe.gating import LatencyCheck, regate
    from edgekit.report.write import to_junit
    from edgekit.recipe.write import write_text
    from edgekit.report.schema import load_json

    overrides = _thresholds(max_drop, min_cosine, min_agreement, min_snr, max_npu_fallback)
    latency = LatencyCheck(tolerance, baseline_artifact, max_rounds, not reports_only, progress)
    if baseline is None and baseline_artifact:
        baseline = saved  # the same report's rows, its artifact replaced by the one given
    result = regate(
        load_json(Path(saved)), load_json(Path(baseline)) if baseline else None, latency, overrides, False if no_default_gates else None
    )
    if junit:
        write_text(Path(junit), to_junit(result), force=True)
    return GateCheck.from_dict(result)


# --- shared steps -------------------------------------------------------------------------------------------------


def _specs(inputs: Strings):
    from edgekit.artifact import parse_input_spec

    return tuple(parse_input_spec(v) for v in inputs or [])


def _thresholds(max_drop=None, min_cosine=None, min_agreement=None, min_snr=None, max_npu_fallback=None):
    from edgekit.metrics.gate import Thresholds

    return Thresholds(
        max_drop=max_drop, min_cosine=min_cosine, min_agreement=min_agreement, min_snr_db=min_snr, max_npu_fallback=max_npu_fallback
    )


def _reported(result, report: str | Path | None):
    """The result, written to `report` first when one is asked for."""
    if report:
        result.write(report)
    return result


def _convert(source, to: str, output: Path, options) -> Converted:
    from edgekit.converters.pipeline import convert as run_conversion

    return Converted.from_artifact(run_conversion(source, to, output, options))


def _check_choices(options) -> None:
    """Choices the command line cannot check for us, against the lists the library declares."""
    from edgekit.conversion import CALIB_METHODS, PRECISIONS
    from edgekit.errors import EdgekitError

    choices = {
        "precision": (options.precision, PRECISIONS),
        "calibration method": (options.calibration.method, CALIB_METHODS),
        "I/O dtype": (options.io_dtype, ("float32", "int8", "uint8")),
        "layout": (options.layout, ("nchw", "nhwc")),
    }
    for what, (value, allowed) in choices.items():
        if value not in allowed:
            raise EdgekitError(f"unknown {what} '{value}'", hint=f"choose one of: {', '.join(allowed)}")


def _default_output(source, to: str, precision: str) -> Path:
    """Next to a model file (in the current folder for a factory or zoo name), named by precision."""
    from edgekit.conversion import SUFFIXES

    base = Path(source.spec).parent if source.path and not source.zoo else Path.cwd()
    name = source.zoo.removeprefix("zoo:") if source.zoo else source.name
    return base / f"{name}.{precision}{SUFFIXES.get(to, '.' + to)}"


def _size_gate(max_size_mb: float | None, size_metric: str):
    from edgekit.errors import EdgekitError
    from edgekit.metrics.gate import SIZE_METRICS, Thresholds

    if size_metric not in SIZE_METRICS:
        raise EdgekitError(f"unknown size metric '{size_metric}'", hint=f"choose one of: {', '.join(SIZE_METRICS)}")
    return Thresholds(max_size_mb=max_size_mb, size_metric=size_metric) if max_size_mb is not None else None


def _check_destinations(report, recipe) -> None:
    """A report or recipe path that cannot be written fails before the run, not after it."""
    from edgekit.fileio import check_output_path

    if report is not None:
        check_output_path(Path(report), "--report", "report.json")
    if recipe is not None:
        check_output_path(Path(recipe), "--emit-recipe", "recipe.yaml")
