"""PyTorch -> ONNX by routes, the first that writes the file wins (ROUTES):

- dynamo: torch.onnx.export(dynamo=True), which captures the module with torch.export non-strict, then strict;
- dynamo-unoptimized: the same without onnxscript's graph optimizer, tried only when that optimizer failed;
- torchscript: the TorchScript exporter, refused when its trace turned a tensor into a Python value (a branch on a
  tensor's value, a number, len): such an ONNX replays the example input's path for every input, silently wrong.

Each route considered is in the notes ("routes": route, result "failed" | "taken" | "skipped", why), each fallback
logged on one line (backends.routes).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import re
import traceback
import warnings
from pathlib import Path

from edgekit.backends.export_errors import HINTS, is_user_file, model_code, quiet, reason, where_text
from edgekit.backends.onnx.torchlib_registry import share_torchlib_registry
from edgekit.backends.routes import Route, Routing, first_route
from edgekit.conversion import ConversionData, Converter, ConvertOptions

TWO_GB = 2 * 1024**3
EXPORT_BATCH = 2  # torch.export specialises a dim of size 1, so the example batch is 2
# TracerWarnings of a trace that turned a tensor into a Python value: the trace holds the example input's value
TRACED_VALUE = re.compile(r"Converting a tensor to a |Using len to get tensor shape|Iterating over a tensor")
ONNX_HINTS = (
    *HINTS,
    (re.compile(r"(?:op='|operator ')([\w.:]+)'"), "{0} has no ONNX translation in these exporters: rewrite it with other ops"),
)


class TorchToOnnx(Converter):
    """Writes one self-contained .onnx with a dynamic batch axis (external data only above 2 GB)."""

    sources = ("torch",)
    target_format = "onnx"
    precisions = {"fp32": False}
    package = "onnxscript"
    import_name = "onnxscript"

    def convert(self, model, specs, out: Path, options: ConvertOptions, data: ConversionData) -> dict:
        """Export the torch module `model` (inputs `specs`) to `out`; returns notes for the artifact's meta."""
        from edgekit.backends.torch.loader import check_forward, example_tensors, export_batch

        _quiet_exporter_logs()
        n_outputs = check_forward(model, specs)
        names = ["output"] if n_outputs == 1 else [f"output_{i}" for i in range(n_outputs)]
        external = _parameter_bytes(model) > TWO_GB
        args = example_tensors(specs, export_batch(model, EXPORT_BATCH), module=model)
        exporter, routes = export_by_routes(Export(model, args, specs, names, out, external))
        notes = {"exporter": exporter, "routes": routes, "external_data": external and exporter == "dynamo"}
        return notes | ({"fallback_reason": routes[0]["why"]} if len(routes) > 1 else {})


@dataclasses.dataclass(frozen=True)
class Export:
    """What every route exports: the module, its example args and input specs, the output names, the file, and
    whether the weights go to external data."""

    module: object
    args: tuple
    specs: list
    names: list[str]
    out: Path
    external: bool

    @functools.cached_property
    def model_code(self) -> tuple[str, ...]:
        return model_code(self.module)


class TracedValues(Exception):
    """The TorchScript trace turned tensors into Python values (`traced`: the TracerWarnings, in the user's code)."""

    def __init__(self, traced: list[warnings.WarningMessage]) -> None:
        first = traced[0]
        clause = str(first.message).split(" might cause")[0]  # "Converting a tensor to a Python boolean"
        more = f" (and {len(traced) - 1} more such lines)" if len(traced) > 1 else ""
        super().__init__(
            f"refused: {clause[0].lower()}{clause[1:]} at {where_text(first.filename, first.lineno)}{more} "
            "fixes the trace to the example input's path"
        )
        self.traced = traced


def export_by_routes(job: Export) -> tuple[str, list[dict]]:
    """The exporter that wrote `job.out` (by the first of ROUTES that did) and every route considered ({"route",
    "result": "failed" | "taken" | "skipped", "why"}); each route after a failure only where it can succeed after that
    failure. All failing: a ConversionError naming each."""
    return first_route(ROUTES, job, EXPORTING)


def _traced_warnings(exc: BaseException) -> tuple[str, ...]:
    """A refused trace's TracerWarnings (TracedValues.traced), as texts the hints read."""
    return tuple(str(w.message) for w in getattr(exc, "traced", ()))


def _export_reason(exc: BaseException, job: Export) -> str:
    """A refused trace says why itself; an exporter's error: where in the user's code it stopped, and the cause."""
    return str(exc) if isinstance(exc, TracedValues) else reason(exc, job.model_code)


def _export_dynamo(job: Export, optimize: bool = True) -> tuple[str, dict]:
    import torch

    from edgekit.backends.torch.loader import batch_dynamic_shapes

    share_torchlib_registry()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            job.module,
            job.args,
            str(job.out),
            dynamo=True,
            dynamic_shapes=batch_dynamic_shapes(job.module, job.specs),
            input_names=[s.name for s in job.specs],
            output_names=job.names,
            external_data=job.external,
            optimize=optimize,
            verbose=False,
        )
    return "dynamo", {}


def _export_torchscript(job: Export) -> tuple[str, dict]:
    """The TorchScript exporter; a trace that turned a tensor into a Python value in the user's code: TracedValues,
    and nothing left at `job.out`."""
    import torch

    axes = {s.name: {s.batch_axis(): "batch"} for s in job.specs if s.value is None and s.batch_axis() is not None}
    axes |= {n: {0: "batch"} for n in job.names}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.onnx.export(
            job.module,
            job.args,
            str(job.out),
            dynamo=False,
            input_names=[s.name for s in job.specs],
            output_names=job.names,
            dynamic_axes=axes,
            opset_version=17,
            do_constant_folding=True,
        )
    traced = [w for w in caught if issubclass(w.category, torch.jit.TracerWarning) and _traced_value(w, job.model_code)]
    if traced:
        job.out.unlink(missing_ok=True)
        raise TracedValues(traced)
    return "torchscript", {}


def _traced_value(warning: warnings.WarningMessage, model_code: tuple[str, ...]) -> bool:
    """A TracerWarning, in the user's code, of a tensor turned into a Python value (torch's own are benign: torch
    ignores them by default; so are those of other installed libraries)."""
    return bool(TRACED_VALUE.match(str(warning.message))) and is_user_file(warning.filename, model_code)


def _not_scripted(job: Export) -> bool:
    """Not a TorchScript module: the dynamo exporter does not take one (scripted already)."""
    import torch

    return not isinstance(job.module, torch.jit.ScriptModule)


def _optimizer_failed(exc: BaseException) -> bool:
    """The dynamo exporter wrote a graph and onnxscript's optimizer failed on it (not torch.export, not translation)."""
    import torch

    frames = traceback.extract_tb(exc.__traceback__)
    return not isinstance(exc, torch.onnx.errors.OnnxExporterError) and any(f.name == "optimize" for f in frames)


SCRIPTED = "a TorchScript module"  # why the dynamo routes are skipped for one
ROUTES = (
    Route("dynamo", _export_dynamo, applies=_not_scripted, not_applying=SCRIPTED),
    Route(
        "dynamo-unoptimized",
        functools.partial(_export_dynamo, optimize=False),
        applies=_not_scripted,
        not_applying=SCRIPTED,
        worth_trying=_optimizer_failed,
    ),
    Route("torchscript", _export_torchscript),
)
EXPORTING = Routing(
    doing="ONNX export",
    failed="ONNX export failed: ",
    reason=_export_reason,
    hints=ONNX_HINTS,
    shown=_traced_warnings,
    within=quiet,
)


def _quiet_exporter_logs() -> None:
    # torch configures its loggers on import; its exporter warns about optional torchvision ops on every export.
    import torch  # noqa: F401

    for name in ("torch.onnx", "torch.export", "torch._export", "onnxscript"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _parameter_bytes(module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters()) + sum(b.numel() * b.element_size() for b in module.buffers())
