"""Reports: JSON for machines (versioned schema), rich tables for people."""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import sys
from pathlib import Path

from edgekit.errors import EdgekitError
from edgekit.fileio import atomic_output
from edgekit.machine import machine_info, package_versions

SCHEMA_VERSION = "1.5"  # 1.5: task_metrics (detection, segmentation, embedding, regression); 1.1: fidelity nonfinite/reference_name/task, gate requested/default_gates, latency notes; 1.2: peak_gpu_memory_mb; 1.3: fidelity expected_top1_drop; 1.4: fidelity top1_changes, accuracy classes_lost
SCHEMA_FILE = Path(__file__).with_name("report.schema.json")
NOT_A_REPORT_HINT = "give a JSON report written by `edgekit validate/bench/prune --report` or `edgekit run`"


def new_report(kind: str, runtimes: tuple[str, ...] = ()) -> dict:
    """The common head of every report: schema, tool and runtime versions, machine, command."""
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["edgekit", *sys.argv[1:]]) if Path(sys.argv[0]).name == "edgekit" else None,
        "machine": machine_info(),
        "versions": package_versions(*runtimes),
        "warnings": [],
    }


def write_json(report: dict, path: Path) -> None:
    """Write a report atomically, as strict JSON: non-finite numbers become null and are counted."""
    text = strict_json(report)
    with atomic_output(Path(path)) as tmp:
        tmp.write_text(text + "\n")


def strict_json(report: dict) -> str:
    """The report as strict JSON (never a bare NaN/Infinity); `non_finite_values` counts the nulls put in their place."""
    count = [0]
    clean = _finite(json.loads(json.dumps(report, default=_json_default)), count)
    if count[0]:
        clean["non_finite_values"] = count[0]
        clean.setdefault("warnings", []).append(f"{count[0]} non-finite values (NaN/Inf) were written as null")
    return json.dumps(clean, indent=2, allow_nan=False)


def _finite(value, count: list[int]):
    if isinstance(value, float) and not math.isfinite(value):
        count[0] += 1
        return None
    if isinstance(value, dict):
        return {k: _finite(v, count) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v, count) for v in value]
    return value


def _json_default(value):
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def load_json(path: Path) -> dict:
    """Read a saved report of any kind, checked against the report schema (report.schema.json)."""

    try:
        report = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EdgekitError(f"cannot read report {path}: {exc}", hint=NOT_A_REPORT_HINT) from None
    if not isinstance(report, dict):
        raise EdgekitError(f"{path} holds a JSON {type(report).__name__}, not an edgekit report", hint=NOT_A_REPORT_HINT)
    if "schema_version" not in report:
        raise EdgekitError(f"{path} is not an edgekit report (no schema_version)", hint=NOT_A_REPORT_HINT)
    _check_version(path, str(report["schema_version"]))
    problem = schema_problem(report)
    if problem:
        raise EdgekitError(f"{path} is not a valid edgekit {report.get('kind', '')} report: {problem}", hint=NOT_A_REPORT_HINT)
    return report


def _check_version(path: Path, version: str) -> None:

    try:
        theirs = tuple(int(x) for x in version.split("."))
    except ValueError:
        theirs = None
    ours = tuple(int(x) for x in SCHEMA_VERSION.split("."))
    if theirs is None or theirs[0] != ours[0] or theirs > ours:
        raise EdgekitError(
            f"{path} has report schema {version}, this edgekit reads {ours[0]}.0 to {SCHEMA_VERSION}",
            hint="use the edgekit version that wrote it, or write the report again with this one",
        )


def schema_problem(report: dict) -> str | None:
    """The first place where `report` breaks report.schema.json, or None."""
    schema = json.loads(SCHEMA_FILE.read_text())
    return _problem(report, schema, schema, "$")


_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _problem(value, schema: dict, root: dict, where: str) -> str | None:
    """A small JSON Schema checker for the keywords report.schema.json uses (no third-party dependency)."""
    if "$ref" in schema:
        schema = root["$defs"][schema["$ref"].rsplit("/", 1)[1]]
    if "type" in schema and not any(_is(value, t) for t in ([schema["type"]] if isinstance(schema["type"], str) else schema["type"])):
        return f"{where} should be {schema['type']}, not {type(value).__name__}"
    if "const" in schema and value != schema["const"]:
        return f"{where} should be {schema['const']!r}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where} is {value!r}, one of {schema['enum']} expected"
    if isinstance(value, dict):
        missing = [k for k in schema.get("required", []) if k not in value]
        if missing:
            return f"{where} has no {', '.join(missing)}"
        for key, sub in schema.get("properties", {}).items():
            if key in value and (problem := _problem(value[key], sub, root, f"{where}.{key}")):
                return problem
        extra = schema.get("additionalProperties")
        for key in value.keys() - schema.get("properties", {}).keys() if isinstance(extra, dict) else ():
            if problem := _problem(value[key], extra, root, f"{where}.{key}"):
                return problem
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            if problem := _problem(item, schema["items"], root, f"{where}[{i}]"):
                return problem
    if "oneOf" in schema:
        problems = [_problem(value, sub, root, where) for sub in schema["oneOf"]]
        if sum(p is None for p in problems) != 1:
            relevant = [p for p in problems if p and not p.startswith(f"{where}.kind should be")]
            return relevant[0] if relevant else f"{where} matches several kinds"
    if "pattern" in schema and isinstance(value, str):
        if not re.search(schema["pattern"], value):
            return f"{where} ({value!r}) does not match {schema['pattern']}"
    return None


def _is(value, kind: str) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, _TYPES[kind])


def fmt_size(size: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)


def fmt_count(value: int | None) -> str:
    """1814073344 -> 1.81 G (MACs, operations)."""
    if value is None:
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.2f} {unit}"
    return str(value)


def fmt(value, spec: str = ".2f", empty: str = "-", unit: str = "") -> str:
    """`value` formatted by `spec` and followed by `unit`, or `empty` (no unit) for None."""
    return empty if value is None else format(value, spec) + unit
