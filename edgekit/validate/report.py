"""Reports: JSON for machines (versioned schema), rich tables for people."""

from __future__ import annotations

import datetime as dt
import json
import math
import sys
from pathlib import Path

from edgekit.fileio import atomic_output
from edgekit.machine import machine_info, package_versions

SCHEMA_VERSION = "1.0"


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
    """Read a saved report."""
    from edgekit.errors import EdgekitError

    try:
        report = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise EdgekitError(f"cannot read report {path}: {exc}", hint="give a JSON report written by edgekit") from None
    if not isinstance(report, dict):
        raise EdgekitError(f"{path} holds a JSON {type(report).__name__}, not a report", hint="give a JSON report written by edgekit")
    if str(report.get("schema_version", "")).split(".")[0] != SCHEMA_VERSION.split(".")[0]:
        raise EdgekitError(
            f"{path} has report schema {report.get('schema_version')}, this edgekit reads {SCHEMA_VERSION}",
            hint="re-run the validation with this edgekit version",
        )
    return report


def fmt_size(size: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)


def fmt(value, spec: str = ".2f", empty: str = "-") -> str:
    return empty if value is None else format(value, spec)
