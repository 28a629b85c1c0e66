"""Re-checking a saved matrix report, and latency regressions against a baseline report."""

from __future__ import annotations

from edgekit.validate.gate import GateResult, Thresholds, check_row, compare_latency, failures


def regate(report: dict, baseline: dict | None, tolerance: float = 0.05) -> dict:
    """The report with every row's gates re-checked (thresholds from the report) plus baseline latency checks."""
    limits = Thresholds(**report.get("thresholds", {}))
    old = {(r["format"], r["precision"], r["target"]): r for r in (baseline or {}).get("rows", []) if r.get("status") == "ok"}
    rows = []
    for row in report["rows"]:
        row = dict(row)
        results = check_row(row, limits) if row["status"] == "ok" else []
        before = old.get((row["format"], row["precision"], row["target"]))
        if row["status"] == "ok" and before and row.get("times_ms") and before.get("times_ms"):
            verdict = compare_latency(row["times_ms"], before["times_ms"], tolerance)
            row["baseline"] = verdict
            low, high = verdict["ci95"]
            results.append(
                GateResult(
                    "latency_vs_baseline",
                    verdict["ratio"],
                    1 + tolerance,
                    not verdict["regressed"],
                    f"p50 x{verdict['ratio']:.3f} of the baseline (95% CI {low:.3f}-{high:.3f}); "
                    f"flagged only if the whole interval is above {1 + tolerance:.2f}",
                )
            )
        row["gates"] = [r.to_dict() for r in results]
        row["passed"] = row["status"] == "ok" and not failures(results)
        rows.append(row)
    return {**report, "rows": rows, "passed": all(r["passed"] for r in rows), "baseline": bool(baseline)}
