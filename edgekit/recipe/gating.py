"""Re-checking any saved report (validate, bench, prune, matrix, tune), and latency regressions against a baseline."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edgekit.errors import EdgekitError
from edgekit.metrics.gate import GateResult, Thresholds, check_row, compare_latency, failures, with_default_gates
from edgekit.report.tables import precision_label
from edgekit.source import open_source

FIDELITY_KINDS = ("validate", "matrix", "tune")  # reports with outputs compared against a reference: the default gates apply


def report_rows(report: dict) -> list[dict]:
    """Any report as summary rows (format, precision, target, status, metrics): what gates and renderers read."""
    from edgekit.validation.validate import summary_row

    kind = report.get("kind")
    if kind == "validate":
        return [{**summary_row(report), "status": "ok"}]
    if kind == "bench":
        return [_bench_row(r) for r in report["results"]]
    if kind == "prune":
        return [_prune_row(r, report) for r in report["stages"]]
    if kind == "tune":  # its choice; when nothing passed, the candidates that were judged (each failing)
        chosen = [r for r in report["rows"] if r["tune"]["stage"] == "chosen"]
        return [dict(r) for r in chosen or [r for r in report["rows"] if r["status"] == "ok" and r.get("gates")]]
    return [dict(r) for r in report["rows"]]


def _bench_row(result: dict) -> dict:
    latency = result["latency"]
    return {
        "format": Path(result["artifact"]).suffix.lstrip(".") or result["artifact"],
        "precision": "-",
        "target": result["target"],
        "status": "ok",
        "artifact": result["artifact"],
        "threads": result["threads"],
        "p50_ms": latency["p50"],
        "p90_ms": latency["p90"],
        "size_bytes": result["size_bytes"],
        "size_mb": result["size_bytes"] / 1e6,
        "times_ms": result["times_ms"],
    }


def _prune_row(stage: dict, report: dict) -> dict:
    reference = stage["accuracy"] + stage["drop_points"] if stage.get("accuracy") is not None else None
    return {
        **stage,
        "format": stage["stage"],
        "target": "onnxruntime:cpu",
        "status": "ok",
        "reference_accuracy": reference,
        "drop_relative": 100 * stage["drop_points"] / reference if reference else None,
        "size_mb": stage["size_bytes"] / 1e6,
        "artifact": report.get("output"),
    }


def report_thresholds(report: dict) -> tuple[Thresholds, bool]:
    """The thresholds the user asked for when the report was written, and whether default gates applied."""
    gate = report.get("gate") or report  # a validation keeps them in its gate section, a matrix at the top
    requested = gate.get("requested", gate.get("requested_thresholds", gate.get("thresholds", {})))
    return Thresholds(**requested), bool(gate.get("default_gates", False))


@dataclass(frozen=True)
class LatencyCheck:
    """How `gate --baseline` judges latency: re-timing both artifacts where they are at hand, else from the reports."""

    tolerance: float = 0.10
    baseline_artifact: str | None = None  # the baseline's model file, when its report's path is not at hand
    max_rounds: int = 12
    retime: bool = True  # False: judge from the reports' times even when the artifacts are at hand
    progress: Callable[[str], None] | None = None


def regate(
    report: dict,
    baseline: dict | None,
    latency: LatencyCheck = LatencyCheck(),
    overrides: Thresholds | None = None,
    default_gates: bool | None = None,
) -> dict:
    """`report` (any kind) as matrix rows with every gate re-checked, plus latency checks against a baseline report.

    Thresholds: the report's own, each replaced by the one given in `overrides`; the default gates apply
    where the report has fidelity and neither the report nor `default_gates=False` turned them off.
    """
    requested, recorded_defaults = report_thresholds(report)
    requested = Thresholds(**{**requested.to_dict(), **(overrides or Thresholds()).to_dict()})
    use_defaults = recorded_defaults if default_gates is None else default_gates
    defaults = use_defaults and report.get("kind") in FIDELITY_KINDS
    limits = with_default_gates(requested, defaults)
    rows = report_rows(report)
    old = _baseline_rows(baseline, latency.baseline_artifact, rows)
    rows = [_regate_row(row, with_default_gates(requested, defaults, row), old.get(_key(row)), latency) for row in rows]
    if report.get("kind") == "tune" and (baseline or {}).get("kind") == "tune":
        rows = [_same_choice(row, baseline) for row in rows]
    return {
        **report,
        "model": report.get("model") or _model_name(report),
        "thresholds": limits.to_dict(),
        "rows": rows,
        "passed": all(r["passed"] for r in rows),
        "baseline": bool(baseline),
    }


def _key(row: dict) -> tuple:
    return (row.get("format"), row.get("precision"), row.get("target"))


def _model_name(report: dict) -> str:
    reference = (report.get("reference") or {}).get("spec")
    return reference or ", ".join(r["artifact"] for r in report.get("results", [])) or report.get("kind", "report")


def _baseline_rows(baseline: dict | None, artifact: str | None, rows: list[dict]) -> dict:
    """The baseline's rows by (format, precision, target); `artifact` names the baseline's model for a one-row report."""
    old = {_key(r): r for r in (report_rows(baseline) if baseline else []) if r.get("status") == "ok"}
    if artifact:
        if len(rows) != 1:
            raise EdgekitError(
                f"--baseline-artifact names one model, the report has {len(rows)} rows",
                hint="gate a report with one row, or keep the artifacts where the baseline report says they are",
            )
        old[_key(rows[0])] = {**old.get(_key(rows[0]), {}), "artifact": artifact}
    return old


def _same_choice(row: dict, baseline: dict) -> dict:
    """A tune's choice against the baseline tune's: the same candidate, or a failed `choice` gate naming both."""
    before = baseline.get("choice")
    if row["tune"]["stage"] != "chosen":
        return row
    now = _choice_name(row)
    same = before is not None and _choice_name(before) == now
    reason = (
        f"the choice is {now}, as in the baseline"
        if same
        else f"the choice is {now}; the baseline chose {_choice_name(before) if before else 'nothing'}"
    )
    gates = [*row["gates"], GateResult("choice", None, 0.0, same, reason).to_dict()]
    return {**row, "gates": gates, "passed": row["passed"] and same}


def _choice_name(choice: dict) -> str:
    return f"{choice['format']} {precision_label(choice)} on {choice['target']} x {choice.get('threads')} thread(s)"


def _latency_verdict(row: dict, before: dict, latency: LatencyCheck) -> dict | None:
    """Re-timed when both artifacts are files here; else judged from the two reports' times; None without either."""

    new, old = row.get("artifact"), before.get("artifact")
    if latency.retime and new and old and Path(new).exists() and Path(old).exists():
        from edgekit.validation.regression import RetimeSettings, retime, with_runner

        settings = with_runner(RetimeSettings(latency.tolerance, max_rounds=latency.max_rounds), row.get("target"), row.get("threads"))
        return retime(open_source(old), open_source(new), settings, latency.progress)
    if row.get("times_ms") and before.get("times_ms"):
        return compare_latency(row["times_ms"], before["times_ms"], latency.tolerance)
    return None


def _regate_row(row: dict, limits: Thresholds, before: dict | None, latency: LatencyCheck) -> dict:
    row = dict(row)
    results = check_row(row, limits) if row["status"] == "ok" else []
    verdict = _latency_verdict(row, before, latency) if row["status"] == "ok" and before else None
    if verdict:
        row["baseline"] = {k: v for k, v in verdict.items() if k != "round_details"}
        row["baseline_rounds"] = verdict.get("round_details")
        limit = 1 + latency.tolerance
        results.append(GateResult("latency_vs_baseline", verdict["ratio"], limit, not verdict["regressed"], verdict["reason"]))
    row["gates"] = [r.to_dict() for r in results]
    row["passed"] = row["status"] == "ok" and not failures(results)
    return row
