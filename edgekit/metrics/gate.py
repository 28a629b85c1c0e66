"""Gates: thresholds on a result row; a failed gate exits 2 in the CLI.

One row per (format, precision, target) - from a validation or a matrix cell - is checked against
the thresholds; `compare_latency` decides latency regressions against a baseline run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace


@dataclass(frozen=True)
class Thresholds:
    """Limits a result must meet; None means not checked."""

    max_drop: float | None = None  # accuracy points, reference minus artifact
    max_drop_relative: float | None = None  # percent of the reference accuracy
    min_cosine: float | None = None  # mean cosine similarity, worst output
    min_agreement: float | None = None  # the task metric against the reference, percent: top-1 agreement, mAP@0.5, mIoU, F1, recall@k
    min_snr_db: float | None = None  # signal-to-noise ratio of the artifact's outputs vs the reference's, worst output
    max_nonfinite: int | None = None  # NaN/inf values in the artifact's outputs where the reference is finite
    max_p50_ms: float | None = None
    max_p90_ms: float | None = None
    max_size_mb: float | None = None
    min_speedup: float | None = None  # vs fp32 on the same target; not applied to fp32 rows
    max_fallback: float | None = None  # percent of ops outside the NPU or delegate (validation.fallback_of)
    max_npu_fallback: float | None = None  # percent of operators an NPU compiler left on the CPU (recipes written before max_fallback)
    size_metric: str | None = None  # max_size_mb on: stored (default: the file), gzip, or coded (entropy-coded weights)
    max_ppl_ratio: float | None = None  # a language model: its perplexity over the reference's on the same tokens
    min_greedy_match: float | None = None  # a language model: share of greedily decoded tokens equal to the reference's

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


# Thresholds on how the artifact's outputs compare with the reference's: a non-finite output fails each.
FIDELITY = {
    "max_drop",
    "max_drop_relative",
    "min_cosine",
    "min_agreement",
    "min_snr_db",
    "max_nonfinite",
    "max_ppl_ratio",
    "min_greedy_match",
}
# Applied when the user sets no fidelity threshold. Chosen below every honest int8 of the zoo's models, measured
# (docs/ci.md): the worst is EfficientNet-Lite0 int8 ONNX at cosine 0.985 / SNR 14.9 dB; a broken int8 sits far
# lower (the sentence-embedding int8 of issue 15: cosine 0.61, SNR 1.1 dB).
DEFAULT_GATES = Thresholds(min_cosine=0.97, min_snr_db=10.0)
# Where cosine says nothing (a detector's boxes, a map that is blank on most images), the floor is on the task metric
# against the reference instead: mAP@0.5 of the reference's confident detections, the F1 or mIoU of its maps.
TASK_GATES = {"detection": Thresholds(min_agreement=90.0), "segmentation": Thresholds(min_agreement=90.0)}
# A language model by its precision: an fp32 export decodes exactly what PyTorch decodes, fp16 nearly; weight-only
# int8 and int4 are held to their perplexity: int4 at 1.03, ahead of llama.cpp's Q4_K_M (1.014 on Llama-2-7B, 1.028 on
# Llama-3-8B, 1.085 re-quantizing SmolLM2-135M); convert holds its own int4/int8 to the same limit (converters.causal_lm).
LM_GATES = {
    "fp32": Thresholds(min_greedy_match=1.0),
    "fp16": Thresholds(min_greedy_match=0.99),
    "int8-weights": Thresholds(max_ppl_ratio=1.01),
    "int4-weights": Thresholds(max_ppl_ratio=1.03),
}


@dataclass(frozen=True)
class GateResult:
    """One threshold checked on one row."""

    metric: str
    value: float | None
    limit: float
    passed: bool
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


# threshold field -> (row key, metric name, "max"/"min", unit)
CHECKS = {
    "max_drop": ("drop_points", "accuracy_drop", "max", " pts"),
    "max_drop_relative": ("drop_relative", "accuracy_drop_relative", "max", "%"),
    "min_cosine": ("cosine", "cosine", "min", ""),
    "min_agreement": ("agreement", "top1_agreement", "min", "%"),  # the metric's name: the row's agreement_metric
    "min_snr_db": ("snr_db", "snr_db", "min", " dB"),
    "max_nonfinite": ("nonfinite", "nonfinite_values", "max", ""),
    "max_p50_ms": ("p50_ms", "p50_ms", "max", " ms"),
    "max_p90_ms": ("p90_ms", "p90_ms", "max", " ms"),
    "max_size_mb": ("size_mb", "size_mb", "max", " MB"),
    "min_speedup": ("speedup", "speedup", "min", "x"),
    "max_fallback": ("fallback", "fallback", "max", "%"),
    "max_npu_fallback": ("npu_fallback", "npu_cpu_fallback", "max", "%"),
    "max_ppl_ratio": ("ppl_ratio", "perplexity_ratio", "max", ""),
    "min_greedy_match": ("greedy_match", "greedy_match", "min", ""),
}
SIZE_METRICS = {"stored": ("size_mb", "size_mb"), "gzip": ("gzip_mb", "gzip_size_mb"), "coded": ("coded_mb", "coded_size_mb")}


def check_row(row: dict, limits: Thresholds) -> list[GateResult]:
    """Every active threshold checked on `row` (a summary row: see validation.summary_row)."""
    results = (_check(name, limit, row, limits.size_metric) for name, limit in limits.to_dict().items() if name != "size_metric")
    return [r for r in results if r is not None]


def _check(name: str, limit: float, row: dict, size_metric: str | None = None) -> GateResult | None:
    key, metric, kind, unit = CHECKS[name]
    if name == "max_size_mb":
        key, metric = SIZE_METRICS[size_metric or "stored"]
    if name == "min_speedup" and row.get("precision") == "fp32":
        return None
    if name == "min_agreement":  # rows of reports written before 1.5 hold top1_agreement alone
        metric, key = row.get("agreement_metric") or metric, key if "agreement" in row else "top1_agreement"
    value = row.get(key)
    if value is None:
        if name in ("max_fallback", "max_npu_fallback"):  # no NPU or delegate: nothing falls back
            return None
        return GateResult(metric, None, limit, False, f"{metric} was not measured ({_why_missing(name, row)})")
    passed = value <= limit if kind == "max" else value >= limit
    shown, allowed = fmt_against(value, limit)
    reason = f"{metric} {shown}{unit}, {'at most' if kind == 'max' else 'at least'} {allowed}{unit} allowed"
    reason += _interval_note(row.get(f"{key}_ci95"), value, limit, row.get("samples"))
    if not passed and name == "min_speedup" and row.get("speedup_note"):
        reason += f": {row['speedup_note']}"
    if not passed and name == "min_agreement":
        reason += _flips_note(row)
    broken = row.get("nonfinite") or 0
    if name in FIDELITY and broken:
        passed, reason = False, f"{reason}; {broken} non-finite value(s) in the artifact's outputs ({_broken_outputs(row)})"
    return GateResult(metric, value, limit, passed, reason)


def _interval_note(ci: list[float] | None, value: float, limit: float, samples: int | None) -> str:
    """When the 95% interval straddles the limit: say so, and roughly how many samples would settle it."""
    if not ci or not ci[0] < limit < ci[1]:
        return ""
    note = f"; the 95% CI {ci[0]:.3g} to {ci[1]:.3g} straddles the limit"
    if samples and value != limit:
        # the interval narrows as 1/sqrt(n): n such that its half-width is the distance from the limit
        needed = samples * ((ci[1] - ci[0]) / 2 / abs(value - limit)) ** 2
        return f"{note}: about {needed:,.0f} samples would settle it (this used {samples:,})"
    return f"{note}: only many more samples would settle it"


def _flips_note(row: dict) -> str:
    """Which answers a missed agreement limit changed: near-ties (a small reference margin) or ones the reference was
    sure of, for the user to judge the miss by."""
    from edgekit.metrics.compare import flips_text

    text = flips_text(row)
    return f"; {text}" if text else ""


def _why_missing(name: str, row: dict) -> str:
    if name == "min_agreement" and row.get("task") not in (None, "classification"):
        return f"the {row['task']} outputs were not read by a task metric (see the report's warnings)"
    return "labels, a baseline or the data are missing"


def _broken_outputs(row: dict) -> str:
    return ", ".join(f"'{name}': {count}" for name, count in (row.get("nonfinite_outputs") or {}).items() if count) or "see the report"


def fmt_against(value: float, limit: float) -> tuple[str, str]:
    """`value` with enough significant digits to fall on the same side of `limit` as it does, and `limit` as given."""
    allowed = repr(limit) if isinstance(limit, float) and not limit.is_integer() else f"{limit:g}"
    for digits in range(4, 18):
        shown = f"{value:.{digits}g}"
        if (float(shown) < limit) == (value < limit) and (float(shown) > limit) == (value > limit):
            return shown, allowed
    return repr(value), allowed


def with_default_gates(thresholds: Thresholds, default_gates: bool = True, row: dict | None = None) -> Thresholds:
    """The thresholds that apply: non-finite outputs always fail, and without a fidelity threshold of the user's own,
    the floor applies: the task's (TASK_GATES) where the row has its task metric, else the fidelity floor
    (DEFAULT_GATES); `default_gates=False` leaves the user's alone."""
    if not default_gates:
        return thresholds
    task = (row or {}).get("task")
    task_floor = TASK_GATES.get(task) if isinstance(task, str) and (row or {}).get("agreement") is not None else None
    if task == "text-generation":
        task_floor = LM_GATES.get((row or {}).get("precision"), LM_GATES["int4-weights"])
    floor = {} if FIDELITY & set(thresholds.to_dict()) else (task_floor or DEFAULT_GATES).to_dict()
    return replace(thresholds, **{**floor, "max_nonfinite": 0, **thresholds.to_dict()})


def failures(results: list[GateResult]) -> list[GateResult]:
    return [r for r in results if not r.passed]


REPORTS_ONLY = (
    "from reports alone: reports taken at different times cannot tell a {tol:.0%} regression from machine noise; "
    "flagged only when the new run's p10 is above the baseline's p90 x {limit:.2f} (the spread the reports record). "
    "To decide by measuring, give the baseline's artifact (--baseline-artifact) and both are re-timed here"
)


def compare_latency(new_ms: list[float], old_ms: list[float], tolerance: float = 0.10) -> dict:
    """Is `new` slower than `old`, judged from two reports' raw per-run times only?

    Times inside one process do not show the spread between processes and between moments on a shared
    machine, so no verdict of "same" or "regressed by 10%" is possible from them. Only a change beyond the
    spread the reports themselves record is flagged: the new run's p10 above the old run's p90 x (1 + tolerance).
    """
    import numpy as np

    new, old = np.asarray(new_ms, float), np.asarray(old_ms, float)
    ratio = float(np.median(new) / np.median(old))
    new_p10, old_p90 = float(np.percentile(new, 10)), float(np.percentile(old, 90))
    regressed = bool(new_p10 > old_p90 * (1 + tolerance))
    return {
        "method": "reports",
        "verdict": "REGRESSION" if regressed else "INCONCLUSIVE",
        "ratio": ratio,
        "new_p10": new_p10,
        "old_p90": old_p90,
        "tolerance": tolerance,
        "regressed": regressed,
        "reason": f"p50 x{ratio:.3f} of the baseline; " + REPORTS_ONLY.format(tol=tolerance, limit=1 + tolerance),
    }
