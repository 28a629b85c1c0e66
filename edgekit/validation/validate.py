"""`validate`: run the reference and the artifact on the same inputs, compare, time, report."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

import numpy as np

from edgekit import progress
from edgekit.artifact import TensorSpec
from edgekit.calibration import Samples, load_samples, random_samples
from edgekit.errors import InputMismatchError
from edgekit.memo import Kept
from edgekit.metrics.compare import CHANGES_SHOWN, compare, is_classifier_output, paired_accuracy, run_batches
from edgekit.metrics.coverage import share as coverage_share
from edgekit.metrics.gate import Thresholds, check_row, failures, with_default_gates
from edgekit.metrics.latency import BenchResult, median_interval
from edgekit.metrics.task import pair_outputs, resolve_task
from edgekit.metrics.task_metrics import TaskSettings
from edgekit.provenance import report_entry
from edgekit.report.schema import new_report
from edgekit.source import ModelSource, fingerprint, source_fingerprint
from edgekit.targets import make_runner
from edgekit.validation.benchmark import BenchSettings, bench, int8_coverage

log = logging.getLogger("edgekit")
# A process's reference outputs by what makes them (edgekit.memo): every cell of a matrix compares against the same
# reference on the same samples. Outputs over REFERENCE_KEPT_BYTES (a detector's on thousands of images) are not kept.
REFERENCE_KEPT_BYTES = 256 << 20  # four kept: at most 1 GB held
_reference_outputs: Kept[tuple[list[np.ndarray], list[str]]] = Kept(entries=4)  # (outputs, the names the runner gave them)
RANDOM_WARNING = "NO DATA GIVEN: inputs are uniform random. Fidelity on random inputs says little about real inputs, and there is no accuracy. Pass --data."


@dataclass(frozen=True)
class ValidationRequest:
    """What to validate against what, on which data, and how to time it."""

    artifact: ModelSource
    reference: ModelSource
    target: str | None = None
    data: str | None = None
    data_limit: int | None = None
    preprocess: str | None = None
    inputs: tuple[TensorSpec, ...] = ()
    batch: int = 64  # batch size of the accuracy pass
    random_count: int = 64
    latency: BenchSettings = field(default_factory=BenchSettings)
    thresholds: Thresholds = field(default_factory=Thresholds)
    task: str | None = None  # classification, detection, embedding, regression, segmentation; None: inferred
    labels: str | None = None  # a task's labels: COCO JSON or YOLO folder (boxes), PNG folder (masks); None: the data's own
    task_settings: TaskSettings = field(default_factory=TaskSettings)
    default_gates: bool = True  # non-finite outputs fail, and a fidelity floor applies without fidelity thresholds
    ignore_label: int | None = None  # a class label marking unlabelled samples (--ignore-label): left out of the accuracy


def validate(request: ValidationRequest) -> dict:
    """The validation report (see docs/report-schema.md); gate failures are listed, not raised."""
    report, feeds = evaluate(request)
    return add_latency(report, request, feeds)


def evaluate(request: ValidationRequest) -> tuple[dict, dict[str, np.ndarray] | None]:
    """The host-side part of a validation: fidelity and accuracy, no timing. Returns the report so far
    and the inputs the latency run will feed (None: random inputs of the artifact's shape)."""
    with progress.step(f"{request.artifact.name}: loading it and the reference {request.reference.name}"):
        artifact = make_runner(request.artifact, request.target, request.latency.threads, list(request.inputs))
        artifact.load()
        reference = make_runner(
            request.reference, None, artifact.threads, list(request.inputs) or _source_inputs(request.artifact) or artifact.inputs
        )
        reference.load()
        samples = _samples(request, artifact.inputs)
    ref_samples, alignment = align_inputs(samples, artifact.inputs, reference.inputs)
    with progress.step(f"{request.artifact.name}: {len(samples)} samples through it and the reference"):
        # both in the artifact's batch (a runner fixed at another is fed its own: run_batches); the same batch on both
        # sides keeps a reference's float results those of the artifact's batch
        batch = _accuracy_batch(artifact.inputs, request.batch)
        ref_out = reference_outputs(request.reference, reference, ref_samples, batch)
        if _same_run(request, artifact, reference) and not alignment:
            art_out, artifact.output_names = [out.copy() for out in ref_out], artifact.output_names or list(reference.output_names)
        else:
            art_out = run_batches(artifact, samples, batch)
    described = report_entry(request.artifact, artifact.target)
    coverage = int8_coverage(artifact, described.get("precision"))
    if hasattr(artifact, "close"):  # a board's session ends before its timed runs start
        artifact.close()
    ref_out, pairing = paired_reference(ref_out, artifact.output_names, reference.output_names)
    task = resolve_task(request.task, ref_out, artifact.output_names, samples.labels, reference.output_names)
    classification = task.name == "classification"
    fidelity = compare(ref_out, art_out, artifact.output_names, classification)
    judged = judge_task(task, request, samples, artifact.output_names, ref_out, art_out)
    report = new_report("validate", (artifact.package, reference.package))
    report.update(
        artifact=described,
        reference=report_entry(request.reference, reference.target),
        target=artifact.target,
        threads=artifact.threads,
        data=samples.provenance,
        task=task.to_dict(),
        output_pairing=pairing,
        fidelity=[_named(f.to_dict(), samples) | {"reference_name": p["reference"]} for f, p in zip(fidelity, pairing, strict=True)],
        accuracy=_accuracy(ref_out[0], art_out[0], samples, request.ignore_label) if classification else labelled_accuracy(judged),
        task_metrics=judged,
    )
    report["input_alignment"] = alignment
    if coverage is not None:
        report["int8_coverage"] = coverage
    if samples.provenance.get("random"):
        report["warnings"].append(RANDOM_WARNING)
    if task.name not in ("classification", "regression") and judged is None:
        report["warnings"].append(f"no {task.name} metric: {task.why}")
    if samples.provenance.get("nonfinite_values"):
        report["warnings"].append(f"the data holds {samples.provenance['nonfinite_values']} non-finite values (NaN/Inf), used as asked")
    feeds = next(samples.batches(request.latency.batch)) if len(samples) >= request.latency.batch else None
    return report, feeds


def reference_outputs(source: ModelSource, reference, samples: Samples, batch: int) -> list[np.ndarray]:
    """The reference's outputs over `samples` (run_batches), computed once per process for the same model content,
    target, threads, batch and sample bytes: a matrix's cells all compare against one reference pass."""

    def run() -> tuple[list[np.ndarray], list[str]]:
        return run_batches(reference, samples, batch), list(reference.output_names)

    key = _reference_key(source, reference, samples, batch)
    outputs, names = _reference_outputs.get_or_make(key, run, lambda made: sum(o.nbytes for o in made[0]) <= REFERENCE_KEPT_BYTES)
    reference.output_names = reference.output_names or list(names)  # a runner that names its outputs as it runs them
    return [out.copy() for out in outputs]  # the kept ones stay as they were, whatever the caller does with these


def _same_run(request: ValidationRequest, artifact, reference) -> bool:
    """The artifact is the reference model itself on the same runtime, device and threads (a matrix's row for the
    source format): its outputs are the reference's, not computed twice."""
    return request.artifact == request.reference and (artifact.target, artifact.threads) == (reference.target, reference.threads)


def _reference_key(source: ModelSource, reference, samples: Samples, batch: int) -> str:
    return fingerprint(
        {
            "source": source_fingerprint(source),
            "target": reference.target,
            "threads": reference.threads,
            "batch": batch,
            "fixed_batch": reference.fixed_batch(),
            "samples": samples.digest(),
        }
    )


def add_latency(report: dict, request: ValidationRequest, feeds: dict[str, np.ndarray] | None, measured: BenchResult | None = None) -> dict:
    """The timing part of a validation (a fresh process on this machine, unless `measured` already timed it), then the gate."""
    report["latency"] = (measured or bench(*timing_job(report, request, feeds))).to_dict()
    if report["latency"].get("device"):
        report["device"] = report["latency"]["device"]
    report["gate"] = gate_section(report, request.thresholds, request.default_gates)
    return report


def judge_task(task, request: ValidationRequest, samples: Samples, names: list[str], ref_out: list, art_out: list) -> dict | None:
    """The task's own metrics (metrics.task_metrics) with each changed sample named; None for classification, and for an
    inferred detection whose outputs no decoder reads (raw heads: the report's warning names --postprocess)."""
    from edgekit.metrics.detection import detector_layout
    from edgekit.metrics.task_metrics import task_metrics

    if task.name == "detection" and task.inferred and not request.task_settings.postprocess:
        if detector_layout(dict(zip(names, ref_out, strict=True))) is None:
            return None
    from edgekit.calibration.task_labels import image_size, task_labels
    from edgekit.metrics.maps import is_map

    size = image_size(samples)
    maps = [o for o in ref_out if is_map(o)]  # masks are scored against the first map, sized to it
    labels = task_labels(task.name, samples, request.labels, maps[0].shape[-2:] if maps else None)
    judged = task_metrics(task.name, names, ref_out, art_out, labels, request.task_settings, size)
    for change in (judged or {}).get("changes", []):
        change["id"] = samples.ids[change["sample"]] if samples.ids else None
    return judged


def labelled_accuracy(judged: dict | None) -> dict | None:
    """A task metric against labels as the report's `accuracy` section holds accuracy: both sides and the drop, in percent
    (mAP points for a detector), so tables, `--max-drop` and the HTML plot read every task alike."""
    labelled = (judged or {}).get("vs_labels")
    if not labelled:
        return None
    return {**labelled, "reference": 100 * labelled["reference"], "artifact": 100 * labelled["artifact"]}


def paired_reference(
    ref_out: list[np.ndarray], artifact_names: list[str], reference_names: list[str]
) -> tuple[list[np.ndarray], list[dict]]:
    """The reference's outputs in the artifact's order (by name where both sides name the same outputs) and the pairing."""
    if len(ref_out) != len(artifact_names):
        return ref_out, []  # compare() reports the different output counts
    order, pairing = pair_outputs(artifact_names, reference_names or [f"output_{i}" for i in range(len(ref_out))])
    return [ref_out[i] for i in order], pairing


def align_inputs(samples: Samples, artifact_specs: list[TensorSpec], reference_specs: list[TensorSpec]) -> tuple[Samples, list[str]]:
    """Feed the reference what the artifact gets: matched by position, NHWC data transposed for an NCHW reference."""
    if [s.name for s in artifact_specs] == [s.name for s in reference_specs] and all(
        _same_layout(a, r) for a, r in zip(artifact_specs, reference_specs, strict=True)
    ):
        return samples, []
    if len(artifact_specs) != len(reference_specs):
        raise InputMismatchError(
            f"the artifact has {len(artifact_specs)} inputs, the reference {len(reference_specs)}",
            hint="check the artifact was converted from this reference",
        )
    arrays, notes = {}, []
    for art, ref in zip(artifact_specs, reference_specs, strict=True):
        array = samples.arrays[art.name]
        if not _same_layout(art, ref) and array.ndim == 4 and tuple(array.shape[1:]) == _nhwc(ref.shape)[1:]:
            array = np.ascontiguousarray(array.transpose(0, 3, 1, 2))
            notes.append(f"{art.name}: NHWC data transposed to NCHW for the reference's '{ref.name}'")
        elif art.name != ref.name:
            notes.append(f"{art.name} -> reference input '{ref.name}' (matched by position)")
        arrays[ref.name] = array
    return Samples(arrays, samples.labels, samples.provenance, {r.name: r for r in reference_specs if r.name in arrays}), notes


def _same_layout(a: TensorSpec, b: TensorSpec) -> bool:
    return len(a.shape) != 4 or all(
        not isinstance(x, int) or not isinstance(y, int) or x == y for x, y in zip(a.shape[1:], b.shape[1:], strict=True)
    )


def _nhwc(shape: tuple) -> tuple:
    return (shape[0], shape[2], shape[3], shape[1])


def _source_inputs(source: ModelSource) -> list[TensorSpec]:
    """The inputs of the model an artifact was converted from, as its provenance recorded them."""
    from edgekit.provenance import read_provenance

    provenance = read_provenance(source.path) if source.path else None
    return [TensorSpec.from_dict(d) for d in (provenance or {}).get("source_inputs", [])]


def gate_section(report: dict, requested: Thresholds, default_gates: bool = True) -> dict:
    """The gates checked on a validation: the user's thresholds (`requested`) plus, unless turned off, the default gates."""
    row = summary_row(report)
    thresholds = with_default_gates(requested, default_gates, row)
    if thresholds.size_metric in ("gzip", "coded") and report.get("artifact"):
        from edgekit.metrics.coding import size_metrics

        row.update(size_metrics(report["artifact"]["path"]))
    results = check_row(row, thresholds)
    return {
        "requested": requested.to_dict(),
        "default_gates": default_gates,
        "thresholds": thresholds.to_dict(),
        "results": [r.to_dict() for r in results],
        "failures": [r.to_dict() for r in failures(results)],
        "passed": not failures(results),
    }


def summary_row(result: dict) -> dict:
    """One table row from a validation report: what the matrix, the demo and the gates read."""

    accuracy = result.get("accuracy") or {}
    fidelity = result.get("fidelity") or []
    latency = result["latency"]["latency"] if result.get("latency") else {}
    artifact = result.get("artifact") or {}
    provenance = artifact.get("meta", {}).get("provenance") or {}
    npu = provenance.get("npu")
    fallback = fallback_of(provenance)
    size = result["latency"]["size_bytes"] if result.get("latency") else artifact.get("size_bytes", 0)
    reference = accuracy.get("reference")
    top1 = _least_agreeing(fidelity)
    judged = result.get("task_metrics") or {}
    return {
        "format": artifact.get("format"),
        "precision": artifact.get("precision"),
        "target": result.get("target"),
        "status": "ok",
        "threads": result.get("threads"),
        "accuracy": accuracy.get("artifact"),
        "reference_accuracy": reference,
        "drop_points": accuracy.get("drop_points"),
        "drop_points_ci95": accuracy.get("drop_ci95"),
        "top1_agreement_ci95": top1.get("top1_agreement_ci95"),
        "samples": (result.get("data") or {}).get("samples"),
        "drop_relative": 100 * accuracy["drop_points"] / reference if reference else None,
        "top1_agreement": top1.get("top1_agreement"),
        "metric": metric_label(judged.get("metric") or ("top1" if top1 else None)),
        "agreement": judged["agreement"] if judged else top1.get("top1_agreement"),
        "agreement_ci95": judged["agreement_ci95"] if judged else top1.get("top1_agreement_ci95"),
        "agreement_metric": judged.get("metric", "top1_agreement"),
        "top1_agreement_confident": top1.get("top1_agreement_confident"),
        "flip_margin_max": top1.get("flip_margin_max"),
        "expected_top1_drop": top1.get("expected_top1_drop"),
        "top1_flips": top1.get("top1_flips"),
        "top1_changes": (top1.get("top1_changes") or [])[:CHANGES_SHOWN],
        "confident_samples": top1.get("confident_samples"),
        "cosine": min((f["cosine_mean"] for f in fidelity), default=None),
        "snr_db": min((f["snr_db"] for f in fidelity), default=None),
        "nonfinite": sum(f.get("nonfinite", 0) for f in fidelity) if fidelity else None,
        "nonfinite_outputs": {f["name"]: f.get("nonfinite", 0) for f in fidelity},
        "p50_ms": latency.get("p50"),
        "p50_ms_ci95": median_interval(result["latency"]["times_ms"]) if result.get("latency") else None,
        "p90_ms": latency.get("p90"),
        "peak_rss_mb": result["latency"].get("peak_rss_mb") if result.get("latency") else None,
        "size_bytes": size,
        "size_mb": size / 1e6,
        "int8_coverage": coverage_share(result.get("int8_coverage")),
        "int8_coverage_detail": result.get("int8_coverage"),
        "npu_fallback": npu["cpu_fallback_percent"] if npu else None,
        "fallback": fallback["percent"] if fallback else None,
        "artifact": artifact.get("spec"),
        "times_ms": result["latency"]["times_ms"] if result.get("latency") else [],
        "random_data": bool((result.get("data") or {}).get("random")),
        "task": (result.get("task") or {}).get("name"),
        "emulated": ((result.get("device") or {}).get("facts") or {}).get("emulated"),  # timed on an emulated board
        **language_row(result),
    }


def language_row(result: dict) -> dict:
    """A language model's figures in a row: perplexity ratio and interval, greedy match, KL, TTFT, tokens/s."""
    language = result.get("language")
    if not language:
        return {}
    generation = (result.get("latency") or {}).get("generation") or {}
    return {
        "ppl_ratio": language["ppl_ratio"],
        "ppl_ratio_ci95": language["ppl_ratio_ci95"],
        "perplexity": language["perplexity"],
        "reference_perplexity": language["perplexity_reference"],
        "greedy_match": language["greedy_match"],
        "kl": language["kl"],
        "next_token_agreement": language["top1_agreement"],
        "nonfinite": language["nonfinite"],
        "samples": language["sequences"],
        "ttft_ms": generation.get("ttft_ms"),
        "tokens_per_s": generation.get("tokens_per_s"),
    }


METRIC_LABELS = {"top1": "top-1", "map50": "mAP@0.5", "miou": "mIoU", "f1": "F1", "mean_abs_error": "MAE", "r2": "R^2"}


def metric_label(metric: str | None) -> str | None:
    """How tables name a task metric: top-1, mAP@0.5, mIoU, F1, recall@10, MAE."""
    if metric and metric.startswith("recall_at_"):
        return f"recall@{metric.removeprefix('recall_at_')}"
    return METRIC_LABELS.get(metric, metric)


def fallback_of(provenance: dict) -> dict | None:
    """How much of the graph runs outside the accelerated part: ops an NPU compiler left on the CPU, or a delegate
    left to the runtime's own kernels, as {"percent", "where"}; None when the conversion recorded no split."""
    if provenance.get("fallback"):
        return provenance["fallback"]
    npu = provenance.get("npu")
    return {"percent": npu["cpu_fallback_percent"], "where": f"the {npu['device']} NPU"} if npu else None


def _least_agreeing(fidelity: list[dict]) -> dict:
    """The class-score output whose top-1 agrees least (top-1 figures exist for class scores only), or {}: a row's top-1
    figures (agreement, its interval, the flips, their margin, the confident samples) all describe this one output."""
    rated = [f for f in fidelity if f.get("top1_agreement") is not None]
    return min(rated, key=lambda f: f["top1_agreement"]) if rated else {}


def _named(fidelity: dict, samples: Samples) -> dict:
    """An output's changed top-1 answers, each with its sample's name in the data (an image's path, file.npz[row]) and
    the names of both classes where the data names them (class_names)."""
    names = class_names(samples)
    for change in fidelity.get("top1_changes") or []:
        change["id"] = samples.ids[change["sample"]] if samples.ids else None
        change["reference_class"], change["artifact_class"] = (_name(change[k], names) for k in ("reference_top1", "artifact_top1"))
    return fidelity


def class_names(samples: Samples) -> list[str]:
    """The class names of data whose labels are its image folder's class subfolders (class i: the i-th name, sorted);
    [] for any other data, whose class indices name nothing edgekit knows."""
    return samples.provenance.get("classes", []) if samples.provenance.get("labels") == "class subfolders" else []


def _name(index: int, names: list[str]) -> str | None:
    return names[index] if 0 <= index < len(names) else None


def _samples(request: ValidationRequest, specs: list[TensorSpec]) -> Samples:
    if request.data:
        return load_samples(request.data, request.data_limit, 0, request.preprocess, specs)
    log.warning(RANDOM_WARNING)
    return random_samples(specs, request.random_count)


def _accuracy_batch(specs: list[TensorSpec], wanted: int) -> int:
    first = specs[0].shape[0] if specs and specs[0].shape else None
    return first if isinstance(first, int) else wanted


def _accuracy(ref_logits, art_logits, samples: Samples, ignore_label: int | None = None) -> dict | None:
    from edgekit.metrics.compare import labels_in_range

    if samples.labels is None or not is_classifier_output(ref_logits):
        return None
    labels = labels_in_range(samples.labels, ref_logits.shape[-1], ignore_label, samples.provenance.get("source", "the data"))
    accuracy, names = paired_accuracy(ref_logits, art_logits, labels), class_names(samples)
    for row in accuracy["classes_lost"] or []:
        row["name"] = _name(row["class"], names)
    return accuracy


def timing_job(report: dict, request: ValidationRequest, feeds: dict[str, np.ndarray] | None) -> tuple:
    """What the latency run of a validation times: bench()'s (source, settings, inputs, feeds)."""
    return request.artifact, replace(request.latency, target=report["target"]), list(request.inputs) or None, feeds
