"""Typed results of the Python API: dataclasses shaped like report.schema.json.

Each result holds the schema's named fields (nested sections as their own dataclasses) and keeps every
other key of the report in `extra`, so `to_dict()` gives back exactly the report `--report` writes
(same keys, same order) and `to_json()` its text. `from_dict()` reads a saved report.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from edgekit.metrics.latency import BenchResult, LatencyStats
from edgekit.record import Record
from edgekit.report.schema import strict_json, write_json

__all__ = [
    "Bench",
    "BenchResult",
    "Converted",
    "Fidelity",
    "Gate",
    "GateCheck",
    "GateResult",
    "LatencyStats",
    "Matrix",
    "Prune",
    "Record",
    "Report",
    "Tuned",
    "Validation",
    "as_result",
    "exit_code",
]


@dataclass
class GateResult(Record):
    metric: str = ""
    value: float | None = None
    limit: float = 0.0
    passed: bool = True
    reason: str = ""


@dataclass
class Gate(Record):
    passed: bool = True
    thresholds: dict = field(default_factory=dict)
    results: list[GateResult] = field(default_factory=list)
    failures: list[GateResult] = field(default_factory=list)


@dataclass
class Fidelity(Record):
    name: str = ""
    max_abs: float = 0.0
    mean_abs: float = 0.0
    cosine_mean: float = 0.0
    cosine_min: float = 0.0
    snr_db: float | None = None
    top1_agreement: float | None = None
    top1_flips: int | None = None
    flip_margin_max: float | None = None
    confident_samples: int | None = None
    top1_agreement_confident: float | None = None
    expected_top1_drop: float | None = None


@dataclass
class Report(Record):
    """The head every report has; `kind` says which of the subclasses it is."""

    KIND: ClassVar[str] = ""
    schema_version: str = ""
    kind: str = ""
    created: str = ""
    command: str | None = None
    machine: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)

    def to_json(self) -> str:
        """The report as `--report` writes it (strict JSON: non-finite numbers become null)."""

        return strict_json(self.to_dict())

    def write(self, path: str | Path) -> Path:
        """Write the report atomically, as `--report PATH` does."""

        write_json(self.to_dict(), Path(path))
        return Path(path)


@dataclass
class Validation(Report):
    KIND: ClassVar[str] = "validate"
    artifact: dict = field(default_factory=dict)
    reference: dict = field(default_factory=dict)
    target: str = ""
    threads: int = 0
    data: dict = field(default_factory=dict)
    fidelity: list[Fidelity] = field(default_factory=list)
    accuracy: dict | None = None
    task_metrics: dict | None = None  # detection, segmentation, embedding, regression (metrics.task_metrics)
    int8_coverage: dict | None = None  # an int8 artifact's share run in int8, read from its runtime (metrics.coverage)
    language: dict | None = None  # a language model: perplexity ratio, KL, next-token agreement, greedy match (metrics.language)
    latency: BenchResult | None = None
    gate: Gate = field(default_factory=Gate)

    @property
    def passed(self) -> bool:
        return self.gate.passed

    def __str__(self) -> str:
        acc = f", accuracy {self.accuracy['artifact']:.2f}% (drop {self.accuracy['drop_points']:+.2f} pts)" if self.accuracy else ""
        worst = min((f.cosine_mean for f in self.fidelity), default=float("nan"))
        return (
            f"Validation({self.artifact.get('spec')} on {self.target} vs {self.reference.get('zoo') or self.reference.get('spec')}: "
            f"cosine {worst:.5f}{acc}, p50 {self.latency.latency.p50:.3f} ms, gate {'passed' if self.passed else 'FAILED'})"
            if self.latency
            else f"Validation({self.artifact.get('spec')}{acc})"
        )


@dataclass
class Bench(Report):
    KIND: ClassVar[str] = "bench"
    results: list[BenchResult] = field(default_factory=list)


@dataclass
class Prune(Report):
    KIND: ClassVar[str] = "prune"
    model: str = ""
    output: str = ""
    stage: dict = field(default_factory=dict)
    stages: list = field(default_factory=list)
    gate: dict | None = None

    @property
    def passed(self) -> bool:
        return self.gate is None or self.gate["passed"]


@dataclass
class Matrix(Report):
    """`edgekit run`'s report, and `edgekit gate`'s re-checked one (the same rows, every gate checked again)."""

    KIND: ClassVar[str] = "matrix"
    model: str = ""
    thresholds: dict = field(default_factory=dict)
    rows: list = field(default_factory=list)
    passed: bool = True

    @property
    def exit_code(self) -> int:
        return exit_code(self.to_dict())


def exit_code(report: dict) -> int:
    """A matrix's verdict as an exit status: 0 all passed; 2 a gate failed; 1 a cell could not run (and no gate failed)."""
    if any(r["status"] == "ok" and not r["passed"] for r in report["rows"]):
        return 2
    return 0 if report["passed"] else 1


@dataclass
class Tuned(Matrix):
    """`edgekit tune`'s report: every candidate's row (its `tune` stage and why), the choice, or the closest miss."""

    KIND: ClassVar[str] = "tune"
    choice: dict | None = None
    closest: dict | None = None

    @property
    def exit_code(self) -> int:
        """0 with a choice, 2 when nothing passes."""
        return 0 if self.choice else 2


@dataclass
class GateCheck(Matrix):
    """`edgekit gate`'s result: the saved report (any kind) as rows, every gate re-checked, latency vs a baseline."""

    KIND: ClassVar[str] = ""
    baseline: bool = False


@dataclass
class Converted:
    """What `convert` / `quantize` wrote: the artifact, its format and precision, and its provenance."""

    path: Path
    format: str
    precision: str
    size_bytes: int
    inputs: list[dict]
    outputs: list[dict]
    provenance: dict
    artifact: Any = field(default=None, repr=False, compare=False)  # the edgekit.artifact.Artifact

    @classmethod
    def from_artifact(cls, artifact) -> Converted:
        d = artifact.to_dict()
        return cls(
            Path(d["path"]),
            d["format"],
            d["precision"],
            d["size_bytes"],
            d["inputs"],
            d["outputs"],
            d["meta"].get("provenance") or {},
            artifact,
        )

    def to_dict(self) -> dict:
        return self.artifact.to_dict()

    def to_json(self) -> str:

        return json.dumps(self.to_dict(), indent=2, default=str)


KINDS = {cls.KIND: cls for cls in (Validation, Bench, Prune, Matrix)}


def as_result(report: dict) -> Report:
    """A report dict (any kind) as its typed result."""
    return KINDS.get(report.get("kind"), Report).from_dict(report)
