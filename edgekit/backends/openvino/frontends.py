"""Reading a model into OpenVINO (an ov.Model): an .onnx and a Keras SavedModel through OpenVINO's frontends, a
PyTorch module by the first of TORCH_ROUTES that converts it: OpenVINO's PyTorch frontend on a TorchScript trace, then
on torch.export's program, then through ONNX (edgekit's ONNX export and OpenVINO's ONNX frontend), for an op the
PyTorch frontend lacks. The notes list every route tried ("routes": route, result "failed" | "taken", why;
backends.routes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

from edgekit.backends.export_errors import HINTS, model_code, plain, quiet, reason
from edgekit.backends.openvino.loader import root_logger_kept
from edgekit.backends.routes import Route, Routing, first_route
from edgekit.conversion import ConversionData, ConvertOptions
from edgekit.errors import ConversionError, EdgekitError

log = logging.getLogger("edgekit")


def to_openvino(model, specs):
    """An ov.Model from a torch module, an .onnx path or a Keras SavedModel folder, batch dim dynamic."""
    import openvino as ov

    try:
        if isinstance(model, (str, Path)):
            return ov.convert_model(str(model))
        if hasattr(model, "export_saved_model"):  # a KerasModel: OpenVINO reads the SavedModel it exports
            with tempfile.TemporaryDirectory() as tmp:
                return ov.convert_model(str(model.export_saved_model(Path(tmp) / "saved_model")))
        return _torch_to_openvino(model, specs)
    except EdgekitError:
        raise
    except Exception as exc:  # the frontends raise OpConversionFailure and friends
        onnx_input = isinstance(model, (str, Path))
        raise ConversionError(
            f"OpenVINO cannot convert the model: {openvino_reason(exc)}",
            hint="this ONNX has an op OpenVINO lacks (see the cause below): run it on onnxruntime:cpu, or replace the op"
            if onnx_input
            else "an op OpenVINO lacks (listed below): try --to onnx first, then convert that .onnx",
            cause=str(exc),
        ) from None


def _torch_to_openvino(module, specs):
    """Trace with example inputs; modules that cannot be traced (a .pt2's GraphModule) go through torch.export."""
    try:
        return _traced_to_openvino(module, specs)
    except Exception as exc:  # tracing fails on GraphModules and some control flow
        log.info("OpenVINO tracing failed (%s); converting through torch.export", openvino_reason(exc))
    return _exported_to_openvino(module, specs)


def _input_shapes(module, specs) -> tuple[tuple, list]:
    """(example inputs at the export batch, OpenVINO's (shape, type) of each input: the batch dynamic, or a .pt2's
    fixed batch)."""
    import openvino as ov

    from edgekit.backends.torch.loader import batch_dynamic_shapes, example_tensors, export_batch

    args = example_tensors(specs, export_batch(module, 2))
    batch = -1 if batch_dynamic_shapes(module, specs) is not None else export_batch(module, 1)  # a .pt2's fixed batch stays
    # Positional (forward() argument names may differ from the specs'); name_tensors names them after.
    return args, [(ov.PartialShape([batch, *s.concrete_shape(1)[1:]]), ov.Type(s.dtype)) for s in specs]


def _traced_to_openvino(module, specs):
    """OpenVINO's PyTorch frontend on a TorchScript trace of `module`."""
    import openvino as ov

    args, shapes = _input_shapes(module, specs)
    return ov.convert_model(module, example_input=args, input=shapes)


def _exported_to_openvino(module, specs):
    """OpenVINO's PyTorch frontend on torch.export's program of `module`."""
    import openvino as ov
    import torch

    from edgekit.backends.torch.loader import batch_dynamic_shapes

    args, shapes = _input_shapes(module, specs)
    program = torch.export.export(module, args, dynamic_shapes=batch_dynamic_shapes(module, specs))
    ov_model = ov.convert_model(program)
    # The exported-program frontend leaves every dim dynamic; only the batch should be.
    ov_model.reshape({port: shape for port, (shape, _) in zip(ov_model.inputs, shapes, strict=True)})
    return ov_model


@dataclasses.dataclass(frozen=True)
class TorchJob:
    """What every route from a torch module converts: the module, its input specs, the work folder (a route's files),
    and the conversion's options and data."""

    module: object
    specs: list
    work: Path
    options: ConvertOptions
    data: ConversionData


def _own_route(read: Callable) -> Callable[[TorchJob], tuple[object, dict]]:
    return lambda job: (read(job.module, job.specs), {})


def _via_onnx(job: TorchJob) -> tuple[object, dict]:
    """edgekit's ONNX export of the module (its own routes, in the entry) read by OpenVINO's ONNX frontend."""
    import openvino as ov

    from edgekit.backends.onnx.from_torch import TorchToOnnx

    onnx = job.work / "via-onnx" / "model.onnx"
    onnx.parent.mkdir()
    exported = TorchToOnnx().convert(job.module, job.specs, onnx, dataclasses.replace(job.options, precision="fp32"), job.data)
    try:
        ov_model = ov.convert_model(str(onnx))
    except Exception as exc:
        raise ConversionError(f"OpenVINO cannot read the exported ONNX: {openvino_reason(exc)}") from exc
    return ov_model, {"exporter": exported["exporter"], "onnx_routes": exported["routes"]}


def _traceable(job: TorchJob) -> bool:
    """Not an exported program's module (a .pt2's): it refuses eval() (torch.export replaces it on the instance), and
    OpenVINO's trace calls it."""
    return "eval" not in vars(job.module)


TORCH_ROUTES = (
    Route("openvino", _own_route(_traced_to_openvino), applies=_traceable),
    Route("openvino-export", _own_route(_exported_to_openvino)),
    Route("via-onnx", _via_onnx),
)
# what OpenVINO's errors showed -> the hint naming that cause ({0}: what the pattern caught)
OPENVINO_HINTS = (
    (
        re.compile(r"No conversion rule found for operations: ([^\n]+)"),
        "OpenVINO has no conversion for {0}: rewrite it with ops it converts",
    ),
)


def torch_by_routes(module, specs, work: Path, options: ConvertOptions, data: ConversionData) -> tuple[object, list[dict]]:
    """The ov.Model of the first of TORCH_ROUTES that converts `module`, and every route tried ({"route", "result":
    "failed" | "taken", "why"}). All failing: a ConversionError naming each route's failure, with the hints for the
    causes their errors showed."""
    return first_route(TORCH_ROUTES, TorchJob(module, specs, work, options, data), READING)


def _reading_reason(exc: BaseException, job: TorchJob) -> str:
    """OpenVINO's reason, or torch's: where in the model's code it stopped, and the cause."""
    return openvino_reason(exc) if _from_openvino(exc) else reason(exc, model_code(job.module))


def _frontend_message(failures: list[BaseException]) -> str:
    """The first frontend error's full text: its list of the ops it lacks."""
    return plain(next((str(exc) for exc in failures if _from_openvino(exc)), ""))


@contextlib.contextmanager
def _quietly():
    """A route's exporters quiet, the root logger kept (so the warning before the next route shows)."""
    with quiet(), root_logger_kept():
        yield


def _from_openvino(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("openvino")


def openvino_reason(exc: Exception) -> str:
    """OpenVINO's messages start with 'Exception from src/...cpp:N:'; the reason is the next line."""
    text = plain(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("Exception from")]
    unconverted = [ln.removeprefix("-- ") for ln in lines if "No conversion rule found" in ln]
    lines = unconverted or [ln for ln in lines if not ln.startswith("Check '")] or lines
    return " ".join((lines[0] if lines else text).split())[:300]


READING = Routing(
    doing="OpenVINO",
    failed="OpenVINO cannot convert the model by any route: ",
    reason=_reading_reason,
    hints=(*HINTS, *OPENVINO_HINTS),
    cause=_frontend_message,
    own_errors=True,
    within=_quietly,
)


def name_tensors(ov_model, specs):
    """Name inputs after `specs` and unnamed outputs `output`/`output_i`, as the ONNX path does."""
    for port, spec in zip(ov_model.inputs, specs, strict=False):
        port.get_tensor().set_names({spec.name})
    for i, port in enumerate(ov_model.outputs):
        if not port.get_names():
            port.get_tensor().set_names({"output" if len(ov_model.outputs) == 1 else f"output_{i}"})
    return ov_model
