"""`convert`: plan the steps, check inputs and calibration data before any work, write atomically."""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import shutil
from pathlib import Path

from edgekit import progress, registry
from edgekit.artifact import Artifact, TensorSpec
from edgekit.calibration import Samples, load_samples, random_samples
from edgekit.calibration.samples import warn_if_few
from edgekit.conversion import TEXT_GENERATION, ConversionData, ConvertOptions, load_for_conversion, needs_calibration, plan, run_steps
from edgekit.errors import EdgekitError
from edgekit.fileio import SIDECAR_SUFFIX, atomic_output, check_output_path, work_folder
from edgekit.imports import import_attr
from edgekit.machine import package_versions
from edgekit.native import third_party_quiet
from edgekit.provenance import describe, source_provenance
from edgekit.source import ModelSource
from edgekit.zoo.names import zoo_labels

HELD_BACK = 4  # accuracy control without --val validates on every 4th calibration sample (a quarter), calibrating on the rest
MIN_HELD_BACK = 8

log = logging.getLogger("edgekit")


def convert(source: ModelSource, to: str, out: Path, options: ConvertOptions) -> Artifact:
    """Convert `source` to format `to` at `options.precision`, written to `out`."""
    from edgekit.conversion import SUFFIXES

    check_output_path(Path(out), "-o", "model" + SUFFIXES.get(to, f".{to}"))
    _check_suffix(Path(out), to)
    steps = plan(source.family, to, options.precision)
    if registry.backend(to).int8_for:
        steps, options = _int8_for_target(source, to, steps, options)
    for converter, _ in steps:
        converter.require()  # a missing backend is reported before any work
    calibrate = needs_calibration(steps) and not _quantized_source(source, to, options.precision)
    if calibrate and not options.calibration.data and not options.calibration.allow_random:
        raise EdgekitError(
            f"--precision {options.precision} needs calibration data",
            hint="pass --calib DATA (.npz, image folder or module:function) with a few hundred real samples",
        )
    _check_task(options)
    _check_accuracy_control(steps, options)
    _check_honoured(steps, options)
    options = _with_calib_method(steps, options)
    _check_device(to, options)
    with progress.step(f"loading {source.spec} and its data"):
        model, specs = load_for_conversion(source, list(options.inputs))
        data = conversion_data(options, specs, calibrate)
    with atomic_output(Path(out)) as final, work_folder(Path(out)) as work:
        notes = run_steps(steps, model, specs, final, Path(work), options, data, source.name)
        if options.device:
            with progress.step(f"{source.name}: compiling for {options.device}"), third_party_quiet():
                notes["npu"] = _compile_for_npu(to, final, options.device, Path(work))
        notes["verified"] = _verified(source, final, to, options, specs, data)
        artifact = describe(final, to, options.precision)
        sidecar = _provenance(source, specs, options, steps, notes, data.calibration, artifact)
        sidecar["files"] = sorted(p.name for p in final.parent.iterdir() if p.name != final.name) + [final.name + SIDECAR_SUFFIX]
        final.with_name(final.name + SIDECAR_SUFFIX).write_text(json.dumps(sidecar, indent=2, default=str) + "\n")
    return describe(Path(out), to, options.precision, sidecar)


def _check_suffix(out: Path, to: str) -> None:
    """Refuse, before any work, an output named as another format's file, or an OpenVINO model not named .xml (its
    serializer writes the weights beside the .xml and takes no other name)."""
    backend = registry.backend(to)
    if backend is None:  # an unknown format: plan() names the ones there are
        return
    expected, suffix = backend.suffix, out.suffix.lower()
    owner = next((b.format for b in registry.backends().values() if suffix in b.suffixes), None)
    if suffix != expected and (owner not in (None, to) or expected == ".xml"):
        raise EdgekitError(f"-o {out} does not end in {expected}, the suffix of {to} models", hint=f"e.g. -o {out.with_suffix(expected)}")


def _verified(source: ModelSource, final: Path, to: str, options: ConvertOptions, specs: list[TensorSpec], data: ConversionData) -> dict:
    """The artifact checked against its source before it is moved into place (converters.verify), or why not."""
    from edgekit.converters.verify import verify_against_source

    if not options.verify:
        log.warning("not verified against %s (--no-verify)", source.spec)
        return {"result": "skipped", "why": "--no-verify"}
    with progress.step(f"{source.name}: running the {to} just written and the source on the same inputs"):
        return verify_against_source(source, final, options.precision, specs, data)


def _int8_for_target(source: ModelSource, to: str, steps, options: ConvertOptions):
    """A format whose int8 has one scheme (TensorRT: symmetric s8 Q/DQ) is quantized for it; a source that already
    holds Q/DQ nodes is built as it is."""
    options = dataclasses.replace(options, for_target=registry.backend(to).int8_for)
    if _quantized_source(source, to, options.precision):
        steps = steps[-1:]
    return steps, options


def _quantized_source(source: ModelSource, to: str, precision: str) -> bool:
    """An ONNX that already holds Q/DQ, converted to int8 where its Q/DQ are taken as they are (OpenVINO, TensorRT):
    nothing is calibrated."""
    check = registry.backend(source.family).quantized_check
    if check is None or precision != "int8" or not registry.backend(to).takes_quantized:
        return False
    return import_attr(check)(source.path)


def _check_device(to: str, options: ConvertOptions) -> None:
    if options.device is None:
        return
    compiler = registry.backend(to).npu_compiler
    if compiler is None:
        npu_formats = [b for b in registry.backends().values() if b.npu_compiler]
        raise EdgekitError(
            f"--device {options.device} compiles {registry.titles(lambda b: b.npu_compiler)} models for an NPU, not {to}",
            hint=f"use --to {npu_formats[0].format} --precision int8",
        )
    compiler = importlib.import_module(compiler)
    compiler.check_device(options.device, options.precision)
    compiler.vela_command()


def _compile_for_npu(to: str, tflite: Path, device: str, work: Path) -> dict:
    """Vela next to the int8 model (in the same staging folder, so both land together)."""
    compiler = importlib.import_module(registry.backend(to).npu_compiler)
    report = compiler.compile_vela(tflite, device, work / "vela")
    compiled = next((work / "vela").glob("*_vela.tflite"))
    target = tflite.with_name(f"{tflite.stem}.{device}.tflite")
    shutil.copyfile(compiled, target)
    report["compiled_model"] = target.name
    return report


def _check_honoured(steps, options: ConvertOptions) -> None:
    """A quantization option the step would ignore is an error, never a silent line in the provenance."""
    from edgekit.conversion import CalibrationOptions

    asked = {
        "per_tensor": ("--per-tensor", options.per_tensor, ("int8", "int8-dynamic")),
        "calib_method": ("--calib-method", options.calibration.method != CalibrationOptions.method, ("int8",)),
    }
    for name, (flag, given, precisions) in asked.items():
        quantizing = [(c, p) for c, p in steps if p in precisions]
        if not given or (not quantizing and name == "calib_method"):
            continue
        if not quantizing:
            raise EdgekitError(f"{flag} applies to int8 quantization, not {options.precision}", hint=f"drop {flag}, or quantize to int8")
        converter, precision = quantizing[-1]
        if converter.honours is not None and name not in converter.honours:
            raise EdgekitError(
                f"{flag} is not applied by {converter.target_format}'s {precision} ({converter.__name__}): it uses its own scheme",
                hint=f"drop {flag}, or quantize through ONNX (--to onnx) where it applies",
            )
        methods = converter.calib_methods_for(options)
        if name == "calib_method" and options.calibration.method not in methods:
            raise EdgekitError(
                f"--calib-method {options.calibration.method} is not available in {converter.target_format}'s {precision} ({converter.__name__})",
                hint=f"use {' or '.join(methods)}, or quantize through ONNX (--to onnx) where it applies",
            )


def _with_calib_method(steps, options: ConvertOptions) -> ConvertOptions:
    """--calib-method auto (the default) made concrete: the int8 step's default_calib_method, the one measured best
    on its backend; the provenance and every step then see the method that ran."""
    if options.calibration.method != "auto":
        return options
    quantizing = [converter for converter, precision in steps if precision == "int8"]
    method = quantizing[-1].default_calib_method if quantizing else "minmax"
    return dataclasses.replace(options, calibration=dataclasses.replace(options.calibration, method=method))


def _check_task(options: ConvertOptions) -> None:
    """convert --task (a recipe's convert.task too) names a task whose metric accuracy control reads; text-generation
    never reaches this driver (converters.causal_lm converts a language model)."""
    from edgekit.quantization.accuracy import VISION_TASKS

    if options.task is not None and options.task not in VISION_TASKS:
        raise EdgekitError(
            f"convert --task takes {', '.join((*VISION_TASKS, TEXT_GENERATION))}, not '{options.task}'",
            hint="or leave it out: it is inferred",
        )


def _check_accuracy_control(steps, options: ConvertOptions) -> None:
    from edgekit.quantization.accuracy import Limit

    limits = Limit.of(options).count() > 0
    if options.validation_data is None and not limits:
        return
    last, precision = steps[-1]
    if not (last.accuracy_control and precision == "int8"):
        raise EdgekitError(
            f"accuracy-controlled quantization (a limit such as --max-drop or --min-map-kept) is not available for {precision} from {last.__name__}",
            hint="use --precision int8 with --to onnx, --to openvino, or --to tflite from PyTorch",
        )
    if not limits:
        raise EdgekitError(
            "--val is the data of accuracy control, which needs a limit: --max-drop POINTS (labels), --min-agreement PERCENT, "
            "--min-map-kept FRACTION or --min-cosine C",
            hint="pass a limit, or leave out --val",
        )
    if options.validation_data is None and options.max_drop is not None:
        raise EdgekitError(
            "--max-drop measures accuracy against labels, which calibration data does not hold",
            hint="pass labelled validation data with --val, or hold fp32's own results with --min-map-kept / --min-agreement",
        )
    if options.min_map_kept is not None and not 0 < options.min_map_kept <= 1:
        raise EdgekitError(
            f"--min-map-kept {options.min_map_kept:g} is not a fraction: the share of fp32's mAP@0.5 or F1 kept lies in (0, 1]",
            hint="e.g. --min-map-kept 0.97",
        )
    if options.min_agreement is not None and not 0 < options.min_agreement <= 100:
        raise EdgekitError(
            f"--min-agreement {options.min_agreement:g} is not a percentage: top-1 agreement with the fp32 model lies in (0, 100]",
            hint="e.g. --min-agreement 99",
        )
    if options.min_cosine is not None and not 0 < options.min_cosine <= 1:
        raise EdgekitError(
            f"--min-cosine {options.min_cosine:g} is not a cosine limit: the mean cosine with the fp32 outputs lies in (0, 1]",
            hint="e.g. --min-cosine 0.999",
        )
    if options.max_drop is not None and options.max_drop < 0:
        raise EdgekitError(
            f"--max-drop {options.max_drop:g} is negative: it is the top-1 accuracy (points) int8 may lose", hint="e.g. --max-drop 1"
        )


def conversion_data(options: ConvertOptions, specs: list[TensorSpec], calibrate: bool) -> ConversionData:
    """The calibration and validation samples; under a limit without --val, the validation samples are held back from
    the calibration samples (every HELD_BACK-th, never calibrated on)."""
    from edgekit.quantization.accuracy import Limit

    calibration = calibration_samples(options, specs) if calibrate else None
    validation = validation_samples(options, specs)
    if validation is None and calibration is not None and Limit.of(options).count():
        calibration, validation = held_back(calibration)
    return ConversionData(calibration, validation)


def held_back(samples: Samples) -> tuple[Samples, Samples]:
    """(the samples calibrated on, the samples held back to validate on): every HELD_BACK-th sample is held back."""
    import numpy as np

    held = np.arange(len(samples)) % HELD_BACK == HELD_BACK - 1
    if held.sum() < MIN_HELD_BACK:
        raise EdgekitError(
            f"accuracy control without --val holds back every {HELD_BACK}th calibration sample, and {len(samples)} samples "
            f"leave {int(held.sum())} (at least {MIN_HELD_BACK} are needed)",
            hint="pass more calibration samples (--calib-samples), or validation data with --val",
        )
    calibration, validation = samples.subset(~held), samples.subset(held)
    calibration.provenance = {**samples.provenance, "held_back_for_validation": int(held.sum())}
    validation.provenance = {**samples.provenance, "held_back_from": f"the calibration samples (every {HELD_BACK}th)"}
    return calibration, validation


def validation_samples(options: ConvertOptions, specs: list[TensorSpec]) -> Samples | None:
    """Labelled validation data for accuracy-controlled quantization, or None."""
    if options.validation_data is None:
        return None
    samples = load_samples(
        options.validation_data, options.validation_samples, options.calibration.seed, options.calibration.preprocess, specs
    )
    unlabelled = options.max_drop is not None and samples.labels is None
    if unlabelled and zoo_labels(samples.provenance.get("source", "")) is None:  # a zoo detection set keeps its boxes beside it
        raise EdgekitError(
            f"{options.validation_data} has no labels",
            hint="accuracy control measures top-1 accuracy (a detector's mAP on a zoo set with boxes): add a `labels` array",
        )
    return samples


def calibration_samples(options: ConvertOptions, specs: list[TensorSpec]) -> Samples:
    """The calibration set, checked against the model's inputs before any conversion work."""
    calib = options.calibration
    if calib.data:
        samples = load_samples(calib.data, calib.samples, calib.seed, calib.preprocess, specs)
        warn_if_few(samples)
    else:
        log.warning("calibrating on RANDOM data as asked: the int8 result is not meaningful for accuracy")
        samples = random_samples(specs, calib.samples, calib.seed)
    samples.provenance["method"] = calib.method
    if calib.default_of:
        samples.provenance["default_of"] = calib.default_of
    return samples


def _provenance(
    source: ModelSource, specs: list[TensorSpec], options: ConvertOptions, steps, notes: dict, samples: Samples | None, artifact: Artifact
) -> dict:

    return {
        "source": source_provenance(source),
        "precision": options.precision,
        "steps": [f"{conv.__name__}({precision})" for conv, precision in steps],
        "inputs": [s.to_dict() for s in artifact.inputs],
        "source_inputs": [s.to_dict() for s in specs],
        "calibration": samples.provenance if samples is not None else None,
        "options": {k: v for k, v in dataclasses.asdict(options).items() if k not in ("precision", "inputs", "calibration")},
        "versions": package_versions("torch", "onnx", "onnxruntime", "onnxscript", "onnxconverter-common"),
        **notes,
    }
