"""Matrix reports as Markdown (PR comments, $GITHUB_STEP_SUMMARY), self-contained HTML (report/html.py) and JUnit XML,
each written atomically."""

from __future__ import annotations

import os
from pathlib import Path
from xml.etree import ElementTree as ET

from edgekit.fileio import atomic_output
from edgekit.report.html import to_html
from edgekit.report.schema import write_json
from edgekit.report.tables import cells, columns, failed_gates, machine_text, row_notes


def to_markdown(report: dict) -> str:
    verdict = "passed" if report["passed"] else "FAILED"
    lines = [
        f"### edgekit: {report['model']} - gates {verdict}",
        "",
        "| " + " | ".join(columns(report["rows"])) + " |",
        "|" + "---|" * len(columns(report["rows"])),
    ]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in cells(r)) + " |" for r in report["rows"]]
    lines += [f"\n{note}" for note in row_notes(report)]
    failed = failed_gates(report)
    lines += ["", "Failed gates:", *(f"- {line}" for line in failed)] if failed else []
    lines += [
        "",
        f"Thresholds: {', '.join(f'{k}={v}' for k, v in report['thresholds'].items()) or 'none'}. Measured on {machine_text(report)}.",
        "",
    ]
    return "\n".join(lines)


def to_junit(report: dict) -> str:
    """One testsuite; one testcase per (row, gate), plus one per failed cell. A tune that chose a candidate: its gates,
    and each other candidate one skipped testcase saying why it was not chosen (a CI fails only when nothing passes)."""
    suite = ET.Element("testsuite", name="edgekit", tests="0", failures="0", errors="0")
    tests = fails = errors = skipped = 0
    chose = report.get("kind") == "tune" and report.get("choice") is not None
    for row in report["rows"]:
        classname = f"{row['format']}.{row['precision']}.{row['target']}" + (f".{row['threads']}threads" if "tune" in row else "")
        if chose and row["tune"]["stage"] != "chosen":
            case = ET.SubElement(suite, "testcase", classname=classname, name="tune")
            ET.SubElement(case, "skipped", message=f"{row['tune']['stage']}: {row['tune'].get('why') or 'not the fastest'}")
            tests, skipped = tests + 1, skipped + 1
            continue
        if row["status"] != "ok":
            case = ET.SubElement(suite, "testcase", classname=classname, name="run")
            ET.SubElement(case, "error", message=row["status"])
            tests, errors = tests + 1, errors + 1
            continue
        for gate in row.get("gates", []):
            case = ET.SubElement(suite, "testcase", classname=classname, name=gate["metric"])
            if not gate["passed"]:
                ET.SubElement(case, "failure", message=gate["reason"])
                fails += 1
            tests += 1
    suite.set("tests", str(tests))
    suite.set("failures", str(fails))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    return ET.tostring(suite, encoding="unicode", xml_declaration=True)


RENDERERS = {"md": ("report.md", to_markdown), "html": ("report.html", to_html), "junit": ("junit.xml", to_junit)}


def render(report: dict, fmt_name: str) -> str:
    return RENDERERS[fmt_name][1](report)


def write_reports(report: dict, folder: Path, formats) -> list[Path]:
    """Write each requested format atomically; append the Markdown to $GITHUB_STEP_SUMMARY when set."""
    written = []
    for name in formats:
        if name == "json":
            write_json(report, folder / "report.json")
            written.append(folder / "report.json")
            continue
        filename, renderer = RENDERERS[name]
        with atomic_output(folder / filename) as tmp:
            tmp.write_text(renderer(report))
        written.append(folder / filename)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a") as f:
            f.write(to_markdown(report) + "\n")
    return written
