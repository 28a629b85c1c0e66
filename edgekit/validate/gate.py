"""Gates: thresholds on a result row; a failed gate exits 2 in the CLI.

One row per (format, precision, target) - from a validation or a matrix cell - is checked against
the thresholds; `compare_latency` decides latency regressions against a baseline run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields


@dataclass(frozen=True)
class Thresholds:
    """Limits a result must meet; None means not checked."""

    max_drop: float | None = None  # accuracy points, reference minus artifact
    max_drop_relative: float | None = None  # percent of the reference accuracy
    min_cosine: float | None = None  # mean cosine similarity, worst output
    min_agreement: float | None = None  # top-1 agreement with the reference, percent
    max_p50_ms: float | None = None
    max_p90_ms: float | None = None
    max_size_mb: float | None = None
    min_speedup: float | None = None  # vs fp32 on the same target; not applied to fp32 rows
    max_npu_fallback: float | None = None  # percent of operators an NPU compiler left on the CPU
    size_metric: str | None = None  # max_size_mb on: stored (default: the file), gzip, or coded (entropy-coded weights)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


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
    "min_agreement": ("top1_agreement", "top1_agreement", "min", "%"),
    "max_p50_ms": ("p50_ms", "p50_ms", "max", " ms"),
    "max_p90_ms": ("p90_ms", "p90_ms", "max", " ms"),
    "max_size_mb": ("size_mb", "size_mb", "max", " MB"),
    "min_speedup": ("speedup", "speedup", "min", "x"),
    "max_npu_fallback": ("npu_fallback", "npu_cpu_fallback", "max", "%"),
}
SIZE_METRICS = {"stored": ("size_mb", "size_mb"), "gzip": ("gzip_mb", "gzip_size_mb"), "coded": ("coded_mb", "coded_size_mb")}


def check_row(row: dict, limits: Thresholds) -> list[GateResult]:
    """Every active threshold checked on `row` (a summary row: see validation.summary_row)."""
    results = []
    for name, limit in limits.to_dict().items():
        if name == "size_metric":
            continue
        key, metric, kind, unit = CHECKS[name]
        if name == "max_size_mb":
            key, metric = SIZE_METRICS[limits.size_metric or "stored"]
        if name == "min_speedup" and row.get("precision") == "fp32":
            continue
        value = row.get(key)
        if value is None:
            if name in ("max_npu_fallback",):
                continue
            results.append(
                GateResult(metric, None, limit, False, f"{metric} was not measured (labels, a baseline or the data are missing)")
            )
            continue
        passed = value <= limit if kind == "max" else value >= limit
        word = "at most" if kind == "max" else "at least"
        reason = f"{metric} {value:.4g}{unit}, {word} {limit}{unit} allowed"
        if not passed and row.get("speedup_note") and name == "min_speedup":
            reason += f": {row['speedup_note']}"
        results.append(GateResult(metric, value, limit, passed, reason))
    return results


def failures(results: list[GateResult]) -> list[GateResult]:
    return [r for r in results if not r.passed]


def compare_latency(new_ms: list[float], old_ms: list[float], tolerance: float = 0.05, seed: int = 0, resamples: int = 2000) -> dict:
    """Is `new` slower than `old` by more than the run-to-run spread?

    A bootstrap 95% confidence interval on the ratio of medians (new/old) is computed from the raw
    per-run times of both reports. A regression is flagged only when the whole interval lies above
    1 + tolerance: a noisy machine widens the interval instead of crying wolf.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    new, old = np.asarray(new_ms, float), np.asarray(old_ms, float)
    ratios = np.median(rng.choice(new, (resamples, len(new))), axis=1) / np.median(rng.choice(old, (resamples, len(old))), axis=1)
    low, high = np.percentile(ratios, [2.5, 97.5])
    ratio = float(np.median(new) / np.median(old))
    return {"ratio": ratio, "ci95": [float(low), float(high)], "tolerance": tolerance, "regressed": bool(low > 1 + tolerance)}
