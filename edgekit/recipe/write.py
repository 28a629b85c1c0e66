"""Write recipes: `edgekit init`'s commented starter and every command's --emit-recipe."""

from __future__ import annotations

from pathlib import Path

from edgekit.errors import EdgekitError
from edgekit.fileio import atomic_output
from edgekit.recipe.schema import TODO

STARTER = """# edgekit recipe: `edgekit run {name}` converts, validates, times and gates every cell of the matrix.
version: 1

model:
  path: {model}{weights}
{inputs}
# Calibration data for int8: .npz keyed by input name, a folder of images (class subfolders), module:function
# or a zoo: data name. A few hundred real samples; never the test set. Not needed without int8: delete the section.
calibration:
  path: {calib}
  samples: 300
  method: minmax            # minmax | entropy | percentile (ONNX int8; OpenVINO and TFLite use their own: set only with onnx)

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
  batch: 1
  warmup: 20
  runs: 100

gates:                      # exit 2 when any is missed
  max_drop: 0.5             # accuracy points vs the original
  min_agreement: 99.0       # top-1 agreement with the original, percent: classification only (remove it otherwise)
  # min_cosine: 0.99        # without fidelity gates of your own: non-finite outputs, cosine < 0.97 or SNR < 10 dB fail
  # max_p50_ms: 5.0
  # max_size_mb: 10
  # size_metric: stored     # max_size_mb on: stored | gzip | coded (entropy-coded weights, ONNX)
  # min_speedup: 1.5        # int8/fp16 vs fp32 on the same target

report:
  dir: edgekit-report
  formats: [json, md, html, junit]
"""


def starter(model: str, name: str, weights: str | None, inputs: list[str], calib: str | None, val: str | None) -> str:
    return STARTER.format(
        name=name,
        model=model,
        weights=f"\n  weights: {weights}" if weights else "",
        inputs=("  inputs: [" + ", ".join(inputs) + "]\n")
        if inputs
        else "  # inputs: [image:1x3x224x224:float32]   # needed when the model does not record its shapes\n",
        calib=calib or TODO,
        val=val or TODO,
    )


def write_starter(
    path: Path, model: str, weights: str | None, inputs: list[str], calib: str | None, val: str | None, force: bool
) -> list[str]:
    """Write `edgekit init`'s recipe, checked first as `edgekit run` will read it; returns the fields left TODO."""
    import yaml

    from edgekit.recipe.schema import parse, todo_fields

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
    latency: dict | None = None,
    gates: dict | None = None,
    compress: list[dict] | None = None,
) -> None:
    """Write the recipe that reproduces a CLI command (`--emit-recipe FILE`)."""
    import yaml

    recipe = {
        "version": 1,
        "model": {"path": model, **({"weights": weights} if weights else {}), **({"inputs": list(inputs)} if inputs else {})},
    }
    for key, value in (("calibration", calibration), ("validation", validation)):
        if value and any(v is not None for v in value.values()):
            recipe[key] = {k: v for k, v in value.items() if v is not None}
    if compress:
        recipe["compress"] = compress
    recipe["matrix"] = {"formats": list(formats), "precisions": list(precisions), **({"targets": targets} if targets else {})}
    if latency:
        recipe["latency"] = {k: v for k, v in latency.items() if v is not None}
    if gates:
        recipe["gates"] = gates
    header = "# Written by edgekit --emit-recipe: `edgekit run` on this file reproduces the command.\n"
    write_text(path, header + yaml.safe_dump(recipe, sort_keys=False), force=True)
