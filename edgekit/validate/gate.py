"""Gates: thresholds on a validation's figures; a failed gate exits 2 in the CLI."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Thresholds:
    """Limits a validation must meet; None means not checked."""

    max_drop: float | None = None  # accuracy points, reference minus artifact
    min_cosine: float | None = None  # mean cosine similarity of every output
    min_agreement: float | None = None  # top-1 agreement with the reference, percent
    max_npu_fallback: float | None = None  # percent of operators an NPU compiler left on the CPU

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class GateFailure:
    """One threshold that was not met."""

    metric: str
    value: float | None
    limit: float
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


def check(report: dict, limits: Thresholds) -> list[GateFailure]:
    """Every threshold `report` (a validation report) misses."""
    failures = []
    accuracy = report.get("accuracy")
    if limits.max_drop is not None:
        if accuracy is None:
            failures.append(GateFailure("accuracy_drop", None, limits.max_drop, "no labels in the data: the drop cannot be measured"))
        elif accuracy["drop_points"] > limits.max_drop:
            failures.append(
                GateFailure(
                    "accuracy_drop",
                    accuracy["drop_points"],
                    limits.max_drop,
                    f"accuracy fell {accuracy['drop_points']:.2f} points, more than {limits.max_drop}",
                )
            )
    npu = ((report.get("artifact") or {}).get("meta", {}).get("provenance") or {}).get("npu")
    if limits.max_npu_fallback is not None and npu and npu["cpu_fallback_percent"] > limits.max_npu_fallback:
        failures.append(
            GateFailure(
                "npu_cpu_fallback",
                npu["cpu_fallback_percent"],
                limits.max_npu_fallback,
                f"{npu['operators_cpu']} of {npu['operators_cpu'] + npu['operators_npu']} ops fall back to the CPU on {npu['device']}",
            )
        )
    for out in report.get("fidelity", []):
        if limits.min_cosine is not None and out["cosine_mean"] < limits.min_cosine:
            failures.append(
                GateFailure(
                    f"cosine[{out['name']}]",
                    out["cosine_mean"],
                    limits.min_cosine,
                    f"mean cosine {out['cosine_mean']:.5f} below {limits.min_cosine}",
                )
            )
        agreement = out.get("top1_agreement")
        if limits.min_agreement is not None and agreement is not None and agreement < limits.min_agreement:
            failures.append(
                GateFailure(
                    f"top1_agreement[{out['name']}]",
                    agreement,
                    limits.min_agreement,
                    f"top-1 agreement {agreement:.2f}% below {limits.min_agreement}%",
                )
            )
    return failures
