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

import functools
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from inspect import Signature
from pathlib import Path
from types import SimpleNamespace

from edgekit import commands, registry
from edgekit.api.results import Bench, Converted, GateCheck, Matrix, Prune, Tuned, Validation
from edgekit.errors import EdgekitError
from edgekit.fileio import check_output_path
from edgekit.metrics.gate import SIZE_METRICS, Thresholds
from edgekit.pruning import PruneOptions, method_chain
from edgekit.recipe.cache import report_folder
from edgekit.recipe.gating import LatencyCheck, regate
from edgekit.recipe.schema import load_recipe, parse
from edgekit.recipe.write import emit, recipe_of_bench, recipe_of_conversion, recipe_of_pruning, recipe_of_validation, write_text
from edgekit.report.schema import load_json, new_report
from edgekit.source import open_source
from edgekit.zoo.names import is_zoo, zoo_entry

__all__ = ["bench", "convert", "gate", "prune", "quantize", "run", "tune", "validate"]
log = logging.getLogger("edgekit")
Strings = Sequence[str] | None


def _takes(command: commands.Command) -> Callable:
    """Decorator: the function takes `command`'s declared options (its signature shows each with its default) and
    its body gets them all, defaults filled in, as one namespace. An unknown keyword is a TypeError naming it."""

    def declared(body: Callable) -> Callable:
        signature = command.signature(returns=body.__annotations__.get("return", Signature.empty))

        @functools.wraps(body)
        def function(*args, **kwargs):
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as exc:
                raise TypeError(f"{body.__name__}() {exc}") from None
            bound.apply_defaults()
            return body(SimpleNamespace(**bound.arguments))

        function.__signature__ = signature
        function.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()} | {"return": signature.return_annotation}
        return function

    return declared


@_takes(commands.CONVERT)
def convert(args) -> Converted:
    """`edgekit convert`: MODEL (a file, module:factory or zoo: name) to format `to` at `precision`, written atomically.

    A zoo model needs no `calib` (its declared calibration set is used, and the provenance says so); a model
    that does not record its input shapes takes them from `calib`/`val` when `inputs` is not given."""
    from edgekit.api import guess
    from edgekit.conversion import TEXT_GENERATION

    source = open_source(args.model, args.weights, args.allow_pickle)
    if args.task is None and source.format in registry.lm_sources():
        log.warning("%s holds a causal language model (%s): converting it with --task %s", source.spec, source.format, TEXT_GENERATION)
        args.task = TEXT_GENERATION
    if args.task == TEXT_GENERATION:
        return _convert_language_model(source, args)
    default = guess.default_calibration(source, args.precision, args.calib)
    specs = guess.inputs_from_data(source, _specs(args.inputs), args.calib or default, args.val)
    options = _conversion_options(commands.CONVERT, args, specs, args.calib or default, source.zoo if default else None)
    _check_choices(options)
    if args.emit_recipe:
        emit(args.emit_recipe, **recipe_of_conversion(args.model, args.weights, args.inputs, args.to, options))
    output = Path(args.output) if args.output else _default_output(source, args.to, args.precision)
    return _convert(source, args.to, output, options)


def _convert_language_model(source, args) -> Converted:
    """convert --task text-generation: a causal LM with its KV cache (converters.causal_lm)."""
    from edgekit.converters.causal_lm import convert_lm

    options = _conversion_options(commands.CONVERT, args, (), args.calib)  # data-free unless --calib: as NNCF and optimum
    if args.emit_recipe:
        emit(args.emit_recipe, **recipe_of_conversion(args.model, args.weights, args.inputs, args.to, options))
    output = Path(args.output) if args.output else _default_output(source, args.to, args.precision)
    return Converted.from_artifact(convert_lm(source, args.to, output, options))


@_takes(commands.QUANTIZE)
def quantize(args) -> Converted:
    """`edgekit quantize`: an existing ONNX model to fp16, int8-dynamic, or static int8 (with `calib`)."""

    source = open_source(str(args.model))
    if not registry.backend(source.family).quantizes_in_place:
        raise EdgekitError(
            f"quantize takes an .onnx file, not {source.format}",
            hint="use `edgekit convert MODEL --to ... --precision ...` for other formats",
        )
    options = _conversion_options(commands.QUANTIZE, args, (), args.calib)
    _check_choices(options)
    if args.emit_recipe:
        emit(args.emit_recipe, **recipe_of_conversion(str(args.model), None, None, "onnx", options))
    return _convert(source, "onnx", Path(args.output), options)


@_takes(commands.PRUNE)
def prune(args) -> Prune:
    """`edgekit prune`: compress a model, save it, compare original vs compressed (vs quantized) on `data`."""
    from edgekit.api import guess
    from edgekit.api.stages import compare_stages, fill_int8_accuracy, gate_compressed
    from edgekit.pruning.stages import STAGE_NAMES
    from edgekit.pruning.stages import prune as run_prune

    output, data, precision, calib, threads = Path(args.output), args.data, args.precision, args.calib, args.threads
    source = open_source(args.model, args.weights, args.allow_pickle)
    limits = _size_gate(args.max_size_mb, args.size_metric)
    options = _prune_options(args)
    specs = list(guess.inputs_from_data(source, _specs(args.inputs), data, args.finetune))
    if args.emit_recipe:
        emit(
            args.emit_recipe,
            **recipe_of_pruning(args.model, args.weights, args.inputs, options, data, args.finetune, precision, calib, threads, limits),
        )
    stage = run_prune(source, options, output, specs, data, args.finetune)
    result = new_report("prune", ("torch", "onnxruntime"))
    result.update(model=args.model, output=str(output), options=options.__dict__, stage=stage.to_dict(), stages=[])
    if data and registry.backend(source.family).compares_stages:
        workdir = output.parent / f"{output.stem}.stages"
        name = STAGE_NAMES[method_chain(args.method)[-1]]
        result["stages"] = compare_stages(source, output, specs, data, workdir, precision, calib, threads, name=name)
        fill_int8_accuracy(result["stage"]["storage"], result["stages"])
    if limits:
        result["gate"] = gate_compressed(result, output, limits)
    return _reported(Prune.from_dict(result), args.report)


@_takes(commands.VALIDATE)
def validate(args) -> Validation:
    """`edgekit validate`: compare an artifact with its reference on the same inputs, time it, gate the result.

    Without `reference`, the model the artifact's provenance names; without `data`, a zoo reference's
    declared validation set (the report's `data.default_of` says so). Gate failures are in `.gate`, not raised."""
    from edgekit.api import guess
    from edgekit.validation.validate import ValidationRequest
    from edgekit.validation.validate import validate as run_validation

    _check_destinations(args.report, args.emit_recipe)
    artifact, reference, weights, allow_pickle = args.artifact, args.reference, args.weights, args.allow_pickle
    # The reference itself on another target (torch:cuda, compile, fp16) takes the same weights.
    art = open_source(artifact, weights if artifact == reference else None, allow_pickle)
    ref, reference = (
        (open_source(reference, weights, allow_pickle), reference) if reference else guess.reference_of(art, weights, allow_pickle)
    )
    if args.task == "text-generation" or _is_language_model(art):
        return _validate_language_model(art, ref, args)
    default = None if args.data else guess.default_validation(ref)
    request = ValidationRequest(
        art,
        ref,
        args.target,
        args.data or default,
        args.limit,
        args.preprocess,
        _specs(args.inputs),
        latency=_bench_settings(args),
        thresholds=_thresholds(commands.VALIDATE, args),
        task=args.task,
        labels=args.labels,
        task_settings=task_settings(args),
        default_gates=not args.no_default_gates,
        ignore_label=args.ignore_label,
    )
    if args.emit_recipe:
        recorded = str(ref.weights) if ref.weights and not ref.zoo else None  # a reference found in the provenance brings its weights
        emit(args.emit_recipe, **recipe_of_validation(request, reference, weights or recorded, args.inputs))
    result = run_validation(request)
    if default:
        result["data"]["default_of"] = ref.zoo
    return _reported(Validation.from_dict(result), args.report)


def _is_language_model(source) -> bool:
    from edgekit.validation.text_generation import is_language_model

    return source.path is not None and is_language_model(source)


def _generation_settings(args):
    from edgekit.validation.text_generation import GenerationSettings

    runs = args.runs if args.runs != commands.RUNS.default else GenerationSettings.runs  # a generation is many runs: 5 by default
    warmup = args.warmup if args.warmup != commands.WARMUP.default else GenerationSettings.warmup
    return GenerationSettings(args.prompt_len, args.new_tokens, runs, warmup, args.threads, args.target)


def _validate_language_model(art, ref, args) -> Validation:
    """validate --task text-generation: perplexity, KL, next-token agreement and greedy match against PyTorch."""
    from edgekit.api import guess
    from edgekit.validation.text_generation import LMValidationRequest, validate_lm

    default = None if args.data else guess.default_validation(ref)
    request = LMValidationRequest(
        art,
        ref,
        args.data or default,
        args.limit,
        _generation_settings(args),
        _thresholds(commands.VALIDATE, args),
        not args.no_default_gates,
    )
    result = validate_lm(request)
    if default:
        result["data"]["default_of"] = ref.zoo
    return _reported(Validation.from_dict(result), args.report)


@_takes(commands.BENCH)
def bench(args) -> Bench:
    """`edgekit bench`: load time, first inference, latency percentiles after warm-up, throughput, peak RSS, size.
    `artifacts`: one model file or several."""

    artifacts = [args.artifacts] if isinstance(args.artifacts, str | Path) else list(args.artifacts)
    _check_destinations(args.report, args.emit_recipe)
    settings = _bench_settings(args)
    if args.emit_recipe:
        emit(args.emit_recipe, **recipe_of_bench([str(a) for a in artifacts], settings, args.inputs, args.weights))
    specs = list(_specs(args.inputs)) or None
    sources = [open_source(str(a), args.weights, args.allow_pickle) for a in artifacts]
    results = [_bench_one(source, settings, specs, args) for source in sources]
    result = new_report("bench", tuple({r["target"].split(":")[0] for r in results}))
    result["results"] = results
    return _reported(Bench.from_dict(result), args.report)


def _bench_one(source, settings, specs, args) -> dict:
    """One artifact's bench: a language model's generation (TTFT, tokens/s), else the latency protocol."""
    from edgekit.validation.benchmark import bench as run_bench

    if args.task == "text-generation" or _is_language_model(source):
        from edgekit.validation.text_generation import bench_lm

        return bench_lm(source, _generation_settings(args)).to_dict()
    return run_bench(source, settings, specs).to_dict()


@_takes(commands.RUN)
def run(args) -> Matrix:
    """`edgekit run`: a recipe's matrix, its reports written to the recipe's report folder (`.written` lists them).
    `progress` (a callable taking a line of text) hears of each cell."""
    from edgekit.recipe.run import run_recipe
    from edgekit.report.write import write_reports

    parsed = load_recipe(Path(args.recipe))
    options = _ray_options(args, "the recipe")
    with report_folder(Path(parsed.resolve(parsed.report.dir))) as folder:
        result = run_recipe(parsed, use_cache=not args.no_cache, progress=args.progress, ray=options)
        written = write_reports(result, folder, parsed.report.formats)
    matrix = Matrix.from_dict(result)
    matrix.written = written
    return matrix


@_takes(commands.TUNE)
def tune(args) -> Tuned:
    """`edgekit tune`: the fastest artifact that passes the gates on the targets, found by measurement. The chosen artifact
    is written to WORKDIR/chosen/ with the recipe that rebuilds it (WORKDIR/chosen.yaml); `.exit_code` is 2 when nothing
    passes (`.closest` names the nearest candidate and what it missed)."""
    import yaml

    from edgekit.recipe.tune import RECIPE_NAME, chosen_recipe
    from edgekit.recipe.tune import tune as search
    from edgekit.report.write import write_reports

    recipe = _tune_recipe(args)
    parsed = parse(yaml.compose(yaml.safe_dump(recipe)), "tune", Path.cwd())
    threads = tuple(int(t) for t in _listed(args.thread_counts, "--threads")) or _thread_counts()
    with report_folder(Path(recipe["report"]["dir"])) as folder:
        ray = _ray_options(args, "the model")
        pruning = _tune_pruning(args)
        report = search(parsed, threads, _seconds(args.budget), not args.no_default_gates, not args.no_cache, args.progress, ray, pruning)
        written = write_reports(report, folder, ("json", "md", "html"))
        if report["choice"]:
            text = yaml.safe_dump(chosen_recipe(recipe, report["choice"]), sort_keys=False)
            write_text(
                folder / RECIPE_NAME,
                "# Written by edgekit tune: `edgekit run` on this file rebuilds and re-checks its choice.\n" + _pruned_note(report) + text,
                force=True,
            )
            written.append(folder / RECIPE_NAME)
    tuned = Tuned.from_dict(report)
    tuned.written = written
    return tuned


def _pruned_note(report: dict) -> str:
    """chosen.yaml's word on a pruned choice: `run` judges it against the pruned model, tune did against the model."""
    if not report["choice"].get("compress"):
        return ""
    return (
        "# Its compress stage prunes the model first: `run` judges the rows against the pruned model, tune judged them against the model.\n"
    )


def _tune_pruning(args):
    """The pruned variants tune searches beside the model (--finetune, --prune-channels, --epochs), or None."""
    from edgekit.recipe.tune import PRUNE_CHANNELS, PRUNE_EPOCHS, Pruning

    listed = _listed(args.prune_channels, "--prune-channels")
    if not args.finetune:
        if listed:
            raise EdgekitError(
                "--prune-channels needs --finetune: each pruned model is fine-tuned", hint="pass --finetune DATA (labelled training data)"
            )
        return None
    try:
        fractions = tuple(float(x) for x in listed) or PRUNE_CHANNELS
    except ValueError:
        fractions = ()
    if not fractions or not all(0 < f < 1 for f in fractions):
        raise EdgekitError(
            f"--prune-channels {','.join(listed)} is not a list of fractions: the share of channels removed lies in (0, 1)",
            hint="e.g. --prune-channels 0.25,0.5",
        )
    return Pruning(_absolute(args.finetune), fractions, args.epochs or PRUNE_EPOCHS)


def _ray_options(args, after: str):
    """RayOptions for --ray [ADDRESS], or None; an address without --ray is refused."""
    if args.address and not args.ray:
        raise EdgekitError(f"'{args.address}' after {after} is a Ray address, but --ray is not given", hint="add --ray, or remove it")
    if not args.ray:
        return None
    from edgekit.recipe.distributed import RayOptions

    return RayOptions(address=args.address, num_cpus=args.ray_cpus)


DEFAULT_TUNE_TARGETS = ("onnxruntime:cpu", "openvino:cpu", "litert:cpu")
LM_LATENCY = ("prompt_len", "new_tokens")  # a language model's generation (latency section)
LM_PRECISIONS, PRECISIONS = ("fp32", "int8-weights", "int4-weights"), ("fp32", "fp16", "int8")


def _tune_recipe(args) -> dict:
    """The recipe tune searches: the command's values under their recipe keys, one format per target's runtime."""
    values = vars(args)
    by_format = _targets_by_format(_listed(args.targets, "--target") or list(DEFAULT_TUNE_TARGETS))
    language_model = args.task == "text-generation"
    precisions = _listed(args.precisions, "--precisions") or list(LM_PRECISIONS if language_model else PRECISIONS)
    recipe = {"version": 1, "model": {**_recipe_section(values, "model"), "path": _absolute(args.model)}}
    recipe |= {key: _recipe_section(values, key) for key in ("calibration", "validation")}
    recipe["matrix"] = {"formats": list(by_format), "precisions": precisions, "targets": by_format}
    recipe |= {key: _recipe_section(values, key) for key in ("latency", "gates")}
    recipe["report"] = {"dir": str(Path(args.workdir).resolve()), "formats": ["json", "md", "html"]}
    if language_model:  # its export's and generation's settings; a vision model has none
        recipe["convert"] = {**_recipe_section(values, "convert"), "task": "text-generation"}
    else:
        recipe["latency"] = {k: v for k, v in recipe["latency"].items() if k not in LM_LATENCY}
    if is_zoo(args.model):  # a zoo model's own data where none is given
        entry = zoo_entry(args.model)
        for key, default in (("calibration", entry.calibration), ("validation", entry.validation)):
            if default and "path" not in recipe[key]:
                recipe[key]["path"] = default
    return {key: value for key, value in recipe.items() if value != {}}


def _recipe_section(values: dict, section: str) -> dict:
    """tune's values a recipe keeps in `section`, those given (a path that exists here made absolute)."""
    given = commands.TUNE.recipe_values(section, values).items()
    return {key: _absolute(value) if key == "path" else value for key, value in given if value is not None}


def _targets_by_format(targets: list[str]) -> dict[str, list[str]]:
    formats = registry.runtime_formats()
    by_format: dict[str, list[str]] = {}
    for target in targets:
        runtime = target.partition(":")[0]
        if runtime not in formats:
            raise EdgekitError(
                f"unknown runtime '{runtime}' in --target {target}", hint=f"use one of: {', '.join(formats)} (see `edgekit targets`)"
            )
        by_format.setdefault(formats[runtime], []).append(target)
    return by_format


def _listed(values: Strings, flag: str) -> list[str]:
    """Repeated and comma-separated values as one list."""
    items = [item.strip() for value in values or [] for item in str(value).split(",")]
    if any(not item for item in items):
        raise EdgekitError(f"{flag} has an empty item", hint=f"separate the values of {flag} by single commas")
    return items


def _thread_counts() -> tuple[int, ...]:
    """1, the powers of two below the usable cores, and their count."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return tuple(sorted({1, cores, *(2**i for i in range(cores.bit_length()) if 2**i < cores)}))


def _seconds(budget: str | None) -> float | None:
    """'90s', '20m', '1h' or a number of seconds."""
    if budget is None:
        return None
    text = str(budget).strip().lower()
    unit = {"s": 1, "m": 60, "h": 3600}.get(text[-1:], None)
    try:
        value = float(text[:-1] if unit else text) * (unit or 1)
    except ValueError:
        value = -1
    if value <= 0:
        raise EdgekitError(f"--budget {budget} is not a duration", hint="give one like 90s, 20m or 1h")
    return value


def _absolute(value):
    """A path that exists here, absolute (the tune's recipe is written elsewhere); anything else as it is."""
    return str(Path(value).resolve()) if isinstance(value, str | Path) and Path(value).exists() else value


@_takes(commands.GATE)
def gate(args) -> GateCheck:
    """`edgekit gate`: re-check a saved report's gates (the thresholds given replace its own) and its latency
    against a baseline report. `.passed` and `.exit_code` give the verdict."""
    from edgekit.report.write import to_junit

    latency = LatencyCheck(args.tolerance, args.baseline_artifact, args.max_rounds, not args.reports_only, args.progress)
    baseline = args.baseline
    if baseline is None and args.baseline_artifact:
        baseline = args.saved  # the same report's rows, its artifact replaced by the one given
    result = regate(
        load_json(Path(args.saved)),
        load_json(Path(baseline)) if baseline else None,
        latency,
        _thresholds(commands.GATE, args),
        False if args.no_default_gates else None,
    )
    if args.junit:
        write_text(Path(args.junit), to_junit(result), force=True)
    return GateCheck.from_dict(result)


# --- shared steps -------------------------------------------------------------------------------------------------


def _specs(inputs: Strings):
    from edgekit.artifact import parse_input_spec

    return tuple(parse_input_spec(v) for v in inputs or [])


def task_settings(args):
    """How the task's outputs are read (--postprocess, --mask-threshold)."""
    from edgekit.metrics.task_metrics import TaskSettings

    return TaskSettings(postprocess=args.postprocess, mask_threshold=args.mask_threshold)


def _thresholds(command: commands.Command, args):
    """The Thresholds the command's gate options ask for (each under its recipe key in `gates:`)."""

    return Thresholds(**command.recipe_values("gates", vars(args)))


def _bench_settings(args):
    """The latency runs the target, threads, batch, warmup and runs options ask for."""
    from edgekit.validation.benchmark import BenchSettings

    return BenchSettings(args.target, args.threads, args.batch, args.warmup, args.runs)


def _conversion_options(command: commands.Command, args, specs, calib: str | None, default_of: str | None = None):
    """ConvertOptions from a command's values: the options a recipe keeps under `calibration:` and `convert:`, by
    their keys there (`calib` the calibration data in use: the one given, or the zoo model's own of `default_of`)."""
    from edgekit.conversion import CalibrationOptions, ConvertOptions

    values = vars(args)
    calibration = CalibrationOptions.from_section(command.recipe_values("calibration", values) | {"path": calib}, default_of)
    options = ConvertOptions.from_section(args.precision, specs, calibration, command.recipe_values("convert", values))
    return replace(options, max_ppl_ratio=values.get("max_ppl_ratio"))  # a recipe keeps it under gates: (one limit)


def _prune_options(args):

    return PruneOptions.from_section(commands.PRUNE.recipe_values("compress", vars(args)))


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

    if size_metric not in SIZE_METRICS:
        raise EdgekitError(f"unknown size metric '{size_metric}'", hint=f"choose one of: {', '.join(SIZE_METRICS)}")
    return Thresholds(max_size_mb=max_size_mb, size_metric=size_metric) if max_size_mb is not None else None


def _check_destinations(report, recipe) -> None:
    """A report or recipe path that cannot be written fails before the run, not after it."""

    if report is not None:
        check_output_path(Path(report), "--report", "report.json")
    if recipe is not None:
        check_output_path(Path(recipe), "--emit-recipe", "recipe.yaml")
