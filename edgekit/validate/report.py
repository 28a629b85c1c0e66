"""Reports: JSON for machines (versioned schema), rich tables for people."""

from __future__ import annotations

import datetime as dt
import json
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
    """Write a report atomically."""
    with atomic_output(Path(path)) as tmp:
        tmp.write_text(json.dumps(report, indent=2, default=_json_default) + "\n")


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
    if report.get("schema_version", "").split(".")[0] != SCHEMA_VERSION.split(".")[0]:
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
