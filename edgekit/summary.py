"""What `edgekit info` and `edgekit targets` report."""

from __future__ import annotations

import sys

from edgekit import registry
from edgekit.artifact import file_size
from edgekit.errors import EdgekitError
from edgekit.imports import import_attr
from edgekit.source import ModelSource

GRAPH_SUMMARIES = registry.summaries()  # from the backend registry


def model_info(source: ModelSource) -> dict:
    """Format, signature, parameter count, size and op histogram of a model."""
    summary = {"model": source.spec, "format": source.format, "size_bytes": file_size(source.path) if source.path else None}
    if source.format in GRAPH_SUMMARIES:
        from edgekit.provenance import describe

        artifact = describe(source.path, source.format, None)
        summary.update(
            size_bytes=artifact.size_bytes(),
            precision=artifact.precision,
            inputs=[s.to_dict() for s in artifact.inputs],
            outputs=[s.to_dict() for s in artifact.outputs],
            **import_attr(GRAPH_SUMMARIES[source.format])(source.path),
            provenance=artifact.meta.get("provenance"),
        )
    else:
        summary.update(import_attr(registry.backend(source.family).source_summary)(source))
    return summary


def target_findings(source: ModelSource, backend: registry.Backend) -> list[dict]:
    """Will `backend` (TensorRT) take this model? Its acceptance checks, on the file it builds from."""

    if source.format != backend.via:
        raise EdgekitError(
            f"{backend.title} builds from {registry.backend(backend.via).title}; {source.spec} is {source.format}",
            hint=f"convert first: edgekit convert MODEL --to {backend.via} --precision int8 --for-target {backend.int8_for} --calib DATA",
        )
    return import_attr(backend.acceptance_checks)(source.path)


def target_checks(source: ModelSource, target: str) -> dict:
    """`info --for-target`: the acceptance checks of a backend that builds its own int8 (TensorRT's: {"tensorrt_checks":
    [...]}), else the target runtime's int8 coverage ({"int8_coverage": {...}})."""
    own = registry.own_int8_backend(target)
    if own is not None and own.acceptance_checks:
        return {f"{own.format}_checks": target_findings(source, own)}
    return {"int8_coverage": target_coverage(source, target)}


def target_coverage(source: ModelSource, target: str) -> dict:
    """How much of `source` the runtime of `target` executes in int8, read from the runtime before any timing."""
    from edgekit.targets import make_runner

    runner = make_runner(source, target, None, None)
    runner.load()
    coverage = runner.int8_coverage()
    if coverage is None:
        raise EdgekitError(
            f"{runner.target} does not say which layers it runs in int8",
            hint="ONNX Runtime, OpenVINO, LiteRT and ExecuTorch do: pass one of their targets to --for-target",
        )
    return coverage


def list_targets(probe: bool = False) -> list[dict]:
    """Every registered runtime with its devices; a missing runtime names the package to install.

    Versions come from package metadata and devices from the package's files and the system, so no framework is
    imported; `probe` asks each runtime itself instead (seconds: it imports them all). Off Linux it always asks.
    """

    from edgekit.targets import RUNNERS, runner_class

    probe = probe or not sys.platform.startswith("linux")

    rows = []
    for runtime in RUNNERS:
        cls = runner_class(runtime)
        if not cls.installed():
            rows.append({"target": f"{runtime}:*", "available": False, "version": "-", "detail": f"pip install {cls.package}"})
            continue
        options = ", ".join(f"{key}={'|'.join(values)}" for key, values in cls.options.items())
        rows += [
            {"target": d.target, "available": d.available, "version": cls.version(), "detail": d.detail, "options": options}
            for d in (cls.devices() if probe else cls.listed_devices())
        ]
    return rows
