"""Typed results of the Python API: dataclasses shaped like report.schema.json.

Each result holds the schema's named fields (nested sections as their own dataclasses) and keeps every
other key of the report in `extra`, so `to_dict()` gives back exactly the report `--report` writes
(same keys, same order) and `to_json()` its text. `from_dict()` reads a saved report.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar


@dataclass
class Record:
    """A report section: its schema fields plus `extra` (the keys the schema leaves open), in the report's order."""

    extra: dict = field(default_factory=dict, repr=False, kw_only=True)
    _order: tuple = field(default=(), repr=False, compare=False, kw_only=True)

    @classmethod
    def from_dict(cls, data: dict):
        hints = typing.get_type_hints(cls)
        names = [f.name for f in dataclasses.fields(cls) if f.name not in ("extra", "_order")]
        values = {name: _typed(hints[name], data[name]) for name in names if name in data}
        extra = {k: v for k, v in data.items() if k not in names}
        return cls(**values, extra=extra, _order=tuple(data))

    def to_dict(self) -> dict:
        names = [f.name for f in dataclasses.fields(self) if f.name not in ("extra", "_order")]
        values = {name: _plain(getattr(self, name)) for name in names}
        values.update(self.extra)
        order = [k for k in self._order if k in values] + [k for k in values if k not in self._order]
        return {k: values[k] for k in order}


def _typed(hint, value):
    """`value` as the annotated type: a Record from a dict, a list of Records from a list of dicts."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    target = args[0] if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1 else hint
    if isinstance(target, type) and issubclass(target, Record) and isinstance(value, dict):
        return target.from_dict(value)
    if typing.get_origin(target) is list and isinstance(value, list):
        (item,) = typing.get_args(target)
        if isinstance(item, type) and issubclass(item, Record):
            return [item.from_dict(v) if isinstance(v, dict) else v for v in value]
    return value


def _plain(value):
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


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
class LatencyStats(Record):
    p50: float = 0.0
    p90: float = 0.0
    p99: float = 0.0
    mean: float = 0.0
    std: float = 0.0
    min: float = 0.0
    max: float = 0.0
    runs: int = 0
    batch: int = 1
    throughput: float = 0.0


@dataclass
class BenchResult(Record):
    artifact: str = ""
    target: str = ""
    threads: int = 0
    load_ms: float = 0.0
    first_inference_ms: float = 0.0
    latency: LatencyStats = field(default_factory=LatencyStats)
    peak_rss_mb: float = 0.0
    size_bytes: int = 0
    times_ms: list = field(default_factory=list)
    generation: dict | None = None  # a language model's time to first token and decode tokens/s


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
        from edgekit.report.schema import strict_json

        return strict_json(self.to_dict())

    def write(self, path: str | Path) -> Path:
        """Write the report atomically, as `--report PATH` does."""
        from edgekit.report.schema import write_json

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
        import json

        return json.dumps(self.to_dict(), indent=2, default=str)


KINDS = {cls.KIND: cls for cls in (Validation, Bench, Prune, Matrix)}


def as_result(report: dict) -> Report:
    """A report dict (any kind) as its typed result."""
    return KINDS.get(report.get("kind"), Report).from_dict(report)
