"""Write recipes: `edgekit init`'s commented starter and every command's --emit-recipe."""

from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path

from edgekit.errors import EdgekitError
from edgekit.fileio import atomic_output
from edgekit.recipe.schema import TODO, VERSION, CalibrationSection, ConvertSection, LatencySection, ReportSection, parse, todo_fields
from edgekit.source import open_source

STARTER = """# edgekit recipe: `edgekit run {name}` converts, validates, times and gates every cell of the matrix.
version: {version}

model:
  path: {model}{weights}
{inputs}
# Calibration data for int8: .npz keyed by input name, a folder of images (class subfolders or a labels.json), module:function
# or a zoo: data name. A few hundred real samples; never the test set. Not needed without int8: delete the section.
calibration:
  path: {calib}
  samples: {samples}
  method: {method}              # auto (each backend's best) | minmax | entropy | percentile | histogram, where the backend has it

# Labelled validation data (.npz with a `labels` array): accuracy and drop vs the original model.
# Without it (delete the section) the matrix compares outputs on generated inputs and times them.
validation:
  path: {val}
  # task: classification    # classification | detection | embedding | regression | segmentation; inferred when absent

# Optional compression before conversion:
# compress:
#   - method: channels      # magnitude | cluster | channels | lowrank (magnitude,cluster: one after the other)
#     channels: 0.3

matrix:
  formats: [onnx, openvino, tflite]
  precisions: [fp32, fp16, int8]
  # targets: {{onnx: [onnxruntime:cpu], openvino: [openvino:cpu], tflite: [litert:cpu]}}

latency:
  threads: 2                # always set: numbers are comparable only at the same thread count
  batch: {batch}
  warmup: {warmup}
  runs: {runs}

gates:                      # exit 2 when any is missed
  max_drop: 0.5             # accuracy points vs the original
  min_agreement: 99.0       # top-1 agreement with the original, percent: classification only (remove it otherwise)
  # min_cosine: 0.99        # without fidelity gates of your own: non-finite outputs, cosine < 0.97 or SNR < 10 dB fail
  # max_p50_ms: 5.0
  # max_size_mb: 10
  # size_metric: stored     # max_size_mb on: stored | gzip | coded (entropy-coded weights, ONNX)
  # min_speedup: 1.5        # int8/fp16 vs fp32 on the same target

report:
  dir: {report_dir}
  formats: [{report_formats}]
"""


def starter(model: str, name: str, weights: str | None, inputs: list[str], calib: str | None, val: str | None) -> str:
    return STARTER.format(
        **_declared_defaults(),
        name=name,
        model=model,
        weights=f"\n  weights: {weights}" if weights else "",
        inputs=("  inputs: [" + ", ".join(inputs) + "]\n")
        if inputs
        else "  # inputs: [image:1x3x224x224:float32]   # needed when the model does not record its shapes\n",
        calib=calib or TODO,
        val=val or TODO,
    )


def _declared_defaults() -> dict:
    """The defaults the starter writes out, as the recipe schema declares them (edgekit.commands)."""
    calibration, latency, report = CalibrationSection(), LatencySection(), ReportSection()
    return {
        "version": VERSION,
        "samples": calibration.samples,
        "method": calibration.method,
        "batch": latency.batch,
        "warmup": latency.warmup,
        "runs": latency.runs,
        "report_dir": report.dir,
        "report_formats": ", ".join(report.formats),
    }


def write_starter(
    path: Path, model: str, weights: str | None, inputs: list[str], calib: str | None, val: str | None, force: bool
) -> list[str]:
    """Write `edgekit init`'s recipe, checked first as `edgekit run` will read it; returns the fields left TODO."""
    import yaml

    path = Path(path)
    text = starter(model, path.name, weights, inputs, calib, val)
    root = yaml.compose(text)
    todos = todo_fields(root)
    if not todos:
        parse(root, path.name, path.parent)  # a starter that would not run is refused before it is written
    write_text(path, text, force)
    return todos


def write_text(path: Path, text: str, force: bool = False) -> None:
    path = Path(path)
    if path.exists() and not force:
        raise EdgekitError(f"{path} exists", hint="choose another name, or pass --force to replace it")
    with atomic_output(path) as tmp:
        tmp.write_text(text)


def emit(
    path: Path,
    *,
    model: str,
    weights: str | None = None,
    inputs=(),
    formats=("onnx",),
    precisions=("fp32",),
    targets: dict | None = None,
    calibration: dict | None = None,
    validation: dict | None = None,
    convert: dict | None = None,
    latency: dict | None = None,
    gates: dict | None = None,
    compress: list[dict] | None = None,
) -> None:
    """Write the recipe that reproduces a CLI command (`--emit-recipe FILE`): every option the command was given,
    and every path relative to the recipe's folder (where `edgekit run` resolves it)."""
    import yaml

    folder = Path(path).parent
    here = lambda value: relative_to(value, folder)  # noqa: E731
    recipe = {
        "version": VERSION,
        "model": {"path": here(model), **({"weights": here(weights)} if weights else {}), **({"inputs": list(inputs)} if inputs else {})},
    }
    for key, value in (("calibration", calibration), ("validation", validation)):
        if value and (value.get("path") is not None or value.get("random")):
            recipe[key] = {k: here(v) if k == "path" else v for k, v in value.items() if v is not None}
    if compress:
        recipe["compress"] = [{k: here(v) if k == "finetune" else v for k, v in stage.items()} for stage in compress]
    if convert:
        recipe["convert"] = {
            k: here(v) if k == "val" else list(v) if isinstance(v, tuple) else v for k, v in convert.items() if v is not None
        }
    recipe["matrix"] = {"formats": list(formats), "precisions": list(precisions), **({"targets": targets} if targets else {})}
    if latency:
        recipe["latency"] = {k: v for k, v in latency.items() if v is not None}
    if gates:
        recipe["gates"] = gates
    header = "# Written by edgekit --emit-recipe: `edgekit run` on this file reproduces the command.\n"
    write_text(path, header + yaml.safe_dump(recipe, sort_keys=False), force=True)


def relative_to(value: str | None, folder: Path) -> str | None:
    """A path as the recipe in `folder` must write it; zoo: names, factories and callables stay as they are."""

    if value is None or str(value).startswith("zoo:") or not Path(value).exists():
        return value
    return os.path.relpath(Path(value).resolve(), Path(folder).resolve())


def convert_section(options) -> dict:
    """The recipe's `convert:` section for ConvertOptions: every key of ConvertSection, in its order (the fields a
    command option fills, edgekit.commands: every option besides precision, inputs and calibration)."""
    values = options.section()
    return {f.name: values[f.name] for f in fields(ConvertSection)}


def convert_section_of(recorded: dict | None) -> dict | None:
    """The `convert:` section for the options an artifact's provenance records (ConvertOptions' names)."""
    from edgekit.conversion import ConvertOptions

    if not recorded:
        return None
    keys = ConvertOptions.recipe_keys
    return {keys[name]: value for name, value in recorded.items() if name in keys}


def calibration_section(calibration) -> dict:
    return calibration.section() | {"random": calibration.allow_random or None}  # random: false is left out


def recipe_of_conversion(model: str, weights: str | None, inputs, to: str, options) -> dict:
    """`convert` / `quantize`: the model, the format and precision, its calibration and every conversion option."""
    from edgekit.targets import DEFAULT_TARGET

    target = DEFAULT_TARGET.get(to)
    return {
        "model": model,
        "weights": weights,
        "inputs": list(inputs or [f"{s.name}:{s.shape_text()}:{s.dtype}" for s in options.inputs]),
        "formats": [to],
        "precisions": [options.precision],
        **({"targets": {to: [target]}} if target else {}),
        "calibration": calibration_section(options.calibration),
        "convert": convert_section(options),
    }


def recipe_of_validation(request, reference: str, weights: str | None, inputs) -> dict:
    """`validate`: the reference as the model, converted as the artifact's provenance records, validated and gated as asked."""
    from edgekit.provenance import read_provenance
    from edgekit.targets import DEFAULT_TARGET

    fmt = request.artifact.family  # onnx, openvino, ...; torch or keras: the model itself as the matrix row
    provenance = (read_provenance(request.artifact.path) if request.artifact.path else None) or {}
    calibration = provenance.get("calibration") or {}
    options = convert_section_of(provenance.get("options"))
    lat = request.latency
    return {
        "model": reference,
        "weights": weights,
        "inputs": list(inputs or []),
        "formats": [fmt],
        "precisions": [provenance.get("precision", "fp32")],
        "targets": {fmt: [request.target or DEFAULT_TARGET[fmt]]},
        "calibration": {k: calibration.get(k) for k in ("samples", "method", "seed", "preprocess")}
        | ({"path": None, "random": True} if calibration.get("random") else {"path": calibration.get("source")}),
        "validation": {
            "path": request.data,
            "limit": request.data_limit,
            "preprocess": request.preprocess,
            "task": request.task,
            "labels": request.labels,
            "postprocess": request.task_settings.postprocess,
            "mask_threshold": request.task_settings.mask_threshold,
        },
        "convert": options or None,
        "latency": {"threads": lat.threads, "batch": lat.batch, "warmup": lat.warmup, "runs": lat.runs},
        "gates": request.thresholds.to_dict(),
    }


def recipe_of_bench(artifacts: list[str], settings, inputs, weights: str | None = None) -> dict:
    """`bench`: the artifact as the model, run as it is (fp32 = no precision pass; a PyTorch or Keras model is its
    own matrix format), with these latency settings."""

    if len(artifacts) != 1:
        raise EdgekitError("--emit-recipe writes one recipe per artifact", hint="bench one artifact at a time to emit its recipe")
    fmt = open_source(artifacts[0], weights).family
    return {
        "model": artifacts[0],
        "weights": weights,
        "inputs": list(inputs or []),
        "formats": [fmt],
        "precisions": ["fp32"],
        "targets": {fmt: [settings.target]} if settings.target else None,
        "latency": {"threads": settings.threads, "batch": settings.batch, "warmup": settings.warmup, "runs": settings.runs},
    }


def recipe_of_pruning(model, weights, inputs, options, data, finetune, precision, calib, threads, limits) -> dict:
    """`prune`: one compression stage with every option, then the ONNX the stage table compares."""
    stage = list(options.section().items())
    at = [key for key, _ in stage].index("lr") + 1  # finetune (not one of PruneOptions) after lr, where recipes have had it
    stage = dict(stage[:at] + [("finetune", finetune)] + stage[at:])
    return {
        "model": model,
        "weights": weights,
        "inputs": list(inputs or []),
        "formats": ["onnx"],
        "precisions": ["fp32", *([precision] if precision else [])],
        "calibration": {"path": calib},
        "validation": {"path": data},
        "latency": {"threads": threads},
        "compress": [{k: v for k, v in stage.items() if v is not None}],
        "gates": limits.to_dict() if limits else None,
    }
