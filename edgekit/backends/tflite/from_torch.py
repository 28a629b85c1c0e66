"""PyTorch -> TFLite with litert-torch: fp32, fp16, PT2E int8 (static with calibration, or dynamic).

With --layout nhwc the model takes channels-last inputs (litert_torch.to_channel_last_io): the
transposes to the model's NCHW then live inside the graph, and the provenance says where.

fp32, fp16 and int8-dynamic go by routes, the first that writes the file wins: litert-torch, then through ONNX
(edgekit's ONNX export, then onnx2tf where it is installed) for an op litert-torch does not lower. The notes list
every route tried ("routes": route, result "failed" | "taken", why). Static int8 has litert-torch's route only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import logging
import re
import shutil
import sys
from pathlib import Path

from edgekit.backends.export_errors import ANSI, HINTS, first_line, model_code, reason
from edgekit.backends.routes import Route, Routing, first_route
from edgekit.backends.tflite.pads import fold_same_pads
from edgekit.conversion import ConversionData, Converter, ConvertOptions
from edgekit.errors import ConversionError, EdgekitError
from edgekit.fileio import work_folder
from edgekit.native import stderr_silenced

EXPORT_BATCH = 1  # TFLite models are converted at batch 1; the interpreter resizes where the graph allows


class TorchToTflite(Converter):
    """litert_torch.convert; int8 through torch.export + PT2E with litert's PT2EQuantizer."""

    sources = ("torch",)
    target_format = "tflite"
    precisions = {"fp32": False, "fp16": False, "int8-dynamic": False, "int8": True}
    honours = frozenset({"calib_method", "per_tensor"})  # PT2E int8: backends.torch.pt2e.static_config
    calib_methods = ("minmax", "histogram")  # backends.torch.pt2e.OBSERVERS: torchao has no entropy or percentile observer
    default_calib_method = "histogram"  # the stock quantizer's own observer; Lite0 on LiteRT 96.00% vs 94.50% with minmax
    accuracy_control = True  # --max-drop / --min-agreement / --min-cosine: backends.tflite.accuracy
    package = "litert-torch"
    import_name = "litert_torch"

    def convert(self, model, specs, out: Path, options: ConvertOptions, data: ConversionData) -> dict:
        with stderr_silenced():  # litert-torch imports TensorFlow and torchao, both chatty at import
            import litert_torch
        logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)

        from edgekit.backends.torch.loader import check_forward, example_tensors, export_batch

        if options.per_tensor and options.precision != "int8":  # litert-torch's dynamic recipe has channel-wise weights only
            raise EdgekitError(
                f"--per-tensor is not available for TFLite {options.precision} from PyTorch", hint="drop --per-tensor, or use -p int8"
            )
        check_forward(model, specs)
        args = model_args = example_tensors(specs, export_batch(model, EXPORT_BATCH))
        notes = {"precision": options.precision, "layout": options.layout}
        routes: list[dict] = []  # static int8 has litert-torch's route only
        module = model
        if options.layout == "nhwc":
            module = litert_torch.to_channel_last_io(model, args=list(range(len(specs))))
            args = tuple(a.permute(0, 2, 3, 1).contiguous() if a.dim() == 4 else a for a in args)
            notes["layout_transposes"] = [
                f"{s.name}: NHWC input transposed to NCHW at the graph's entry" for s in specs if len(s.shape) == 4
            ]
        if options.precision == "int8" and data.validation is not None:  # --max-drop / --min-agreement
            from edgekit.backends.tflite.accuracy import accuracy_controlled

            def build(keep_float: tuple[str, ...], path: Path) -> None:
                export(_converted(lambda: _int8_static(module, args, options, data, specs, notes, keep_float)), path)

            notes["accuracy_control"] = accuracy_controlled(model, specs, data, options, build, out)
        elif options.precision == "int8":
            export(_converted(lambda: _convert(module, args, options, data, specs, notes)), out)
        else:
            routes = write_by_routes(Job(model, model_args, module, args, specs, out, options, data, notes))
        notes["pads_folded"] = fold_same_pads(out)  # int8 keeps explicit pads in NCHW between transposes
        return {"tflite": notes} | ({"routes": routes} if routes else {})


@dataclasses.dataclass(frozen=True)
class Job:
    """What every route converts: the torch module (`model`) on `model_args`, and what litert-torch converts
    (`module`: with --layout nhwc, wrapped to take channels-last inputs) on `args` (batch 1), the input specs, the
    file, the options and data, and the notes the routes add to."""

    model: object
    model_args: tuple
    module: object
    args: tuple
    specs: list
    out: Path
    options: ConvertOptions
    data: ConversionData
    notes: dict


def write_by_routes(job: Job) -> list[dict]:
    """Write `job.out` (fp32, fp16 or int8-dynamic) by the first of ROUTES that writes it; every route tried, as
    {"route", "result": "failed" | "taken", "why"}. All failing: a ConversionError naming each route's failure, with
    the hints for the causes their errors showed."""
    _, routes = first_route(ROUTES, job, WRITING)
    return routes


def _litert_torch(job: Job) -> tuple[None, dict]:
    export(_silenced(lambda: _convert(job.module, job.args, job.options, job.data, job.specs, job.notes)), job.out)
    return None, {}


# onnx2tf's file for each precision, after the ONNX file's stem
ONNX2TF_FILES = {"fp32": "_float32.tflite", "fp16": "_float16.tflite", "int8-dynamic": "_dynamic_range_quant.tflite"}
ONNX2TF_INSTALL = (
    "for the route through ONNX: pip install --no-deps onnx2tf onnx-graphsurgeon sng4onnx tf-keras "
    "(onnx2tf pins an older TensorFlow and NumPy: --no-deps keeps these; tf-keras must match TensorFlow's version)"
)


def _via_onnx(job: Job) -> tuple[None, dict]:
    """edgekit's ONNX export of the torch module (its own routes, in the entry), converted by onnx2tf at batch 1: the
    inputs kept NCHW (with --layout nhwc, 4-D inputs channels-last), each input and output checked against the
    module's."""
    from edgekit.backends.onnx.from_torch import TorchToOnnx

    onnx2tf = _onnx2tf()
    options = job.options
    with work_folder(job.out) as work:
        onnx = work / "model.onnx"
        exported = TorchToOnnx().convert(job.model, job.specs, onnx, dataclasses.replace(options, precision="fp32"), job.data)
        inputs = {s.name: a for s, a in zip(job.specs, job.model_args, strict=True) if hasattr(a, "shape")}
        # onnx2tf lays out 3-D to 5-D inputs channels-last unless told to keep them (it takes no other ranks there)
        nchw = [
            s.name for s in job.specs if s.name in inputs and len(s.shape) in (3, 4, 5) and (options.layout == "nchw" or len(s.shape) != 4)
        ]
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed), stderr_silenced(), _no_download(onnx2tf):
                onnx2tf.convert(
                    input_onnx_file_path=str(onnx),
                    output_folder_path=str(work / "onnx2tf"),
                    overwrite_input_shape=[f"{name}:{','.join(map(str, a.shape))}" for name, a in inputs.items()],
                    keep_ncw_or_nchw_or_ncdhw_input_names=nchw or None,
                    copy_onnx_input_output_names_to_tflite=True,
                    output_signaturedefs=True,
                    output_dynamic_range_quantized_tflite=options.precision == "int8-dynamic",
                    not_use_onnxsim=True,
                    non_verbose=True,
                )
        except SystemExit:  # onnx2tf exits on some errors, after printing them
            raise ConversionError(f"onnx2tf stopped: {_last_error(printed.getvalue())}") from None
        except Exception as exc:
            raise ConversionError(f"onnx2tf: {(first_line(exc) or type(exc).__name__).removeprefix('ERROR: ')}") from exc
        written = work / "onnx2tf" / f"{onnx.stem}{ONNX2TF_FILES[options.precision]}"
        _check_io(written, job)
        shutil.copyfile(written, job.out)
    if options.layout == "nhwc":
        job.notes["layout_transposes"] = [
            f"{s.name}: NHWC input, the graph laid out channels-last by onnx2tf" for s in job.specs if len(s.shape) == 4
        ]
    return None, {"exporter": exported["exporter"], "onnx_routes": exported["routes"], "converter": f"onnx2tf {_version(onnx2tf)}"}


def _onnx2tf():
    """onnx2tf, imported; not installed or not importable: a ConversionError saying what to install."""
    if importlib.util.find_spec("onnx2tf") is None:
        raise ConversionError("onnx2tf is not installed (pip install --no-deps onnx2tf)", hint=ONNX2TF_INSTALL)
    try:
        with contextlib.redirect_stdout(io.StringIO()), stderr_silenced():
            import onnx2tf
    except ImportError as exc:  # its dependencies, installed without pip's resolver
        raise ConversionError(f"onnx2tf cannot be imported: {exc}", hint=ONNX2TF_INSTALL) from None
    return onnx2tf


@contextlib.contextmanager
def _no_download(onnx2tf):
    """onnx2tf downloads sample images from the internet to run an RGB NHWC model on: photo crops shipped with
    edgekit instead."""

    from edgekit.zoo.photos import photo_crops

    module = sys.modules["onnx2tf.onnx2tf"]
    download = getattr(module, "download_test_image_data", None)
    module.download_test_image_data = lambda: photo_crops(20, 128).transpose(0, 2, 3, 1)
    try:
        yield
    finally:
        if download is not None:
            module.download_test_image_data = download


def _check_io(written: Path, job: Job) -> None:
    """The TFLite's inputs and outputs, in order, have the module's shapes at batch 1 (the inputs in the layout asked):
    onnx2tf lays a graph out channels-last, and may leave an output NHWC or reorder the tensors."""
    import numpy as np
    import torch

    from edgekit.backends.tflite.interpreter import interpreter_class

    with torch.no_grad():
        outputs = job.model(*job.model_args)
    outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    wanted_in = [tuple(a.shape) for a in job.model_args if hasattr(a, "shape")]
    if job.options.layout == "nhwc":
        wanted_in = [(s[0], *s[2:], s[1]) if len(s) == 4 else s for s in wanted_in]
    with stderr_silenced():
        interpreter = interpreter_class()[0](model_path=str(written))
    found_in = [tuple(int(d) for d in np.atleast_1d(t["shape"])) for t in interpreter.get_input_details()]
    found_out = [tuple(int(d) for d in np.atleast_1d(t["shape"])) for t in interpreter.get_output_details()]
    wanted_out = [tuple(o.shape) for o in outputs]
    for kind, found, wanted in (("inputs", found_in, wanted_in), ("outputs", found_out, wanted_out)):
        if found != wanted:
            raise ConversionError(f"onnx2tf wrote {kind} of shapes {_shapes(found)}, the model's are {_shapes(wanted)}")


def _shapes(shapes: list[tuple]) -> str:
    return ", ".join("x".join(map(str, s)) or "scalar" for s in shapes)


def _version(module) -> str:
    return getattr(module, "__version__", "?")


def _last_error(printed: str) -> str:
    """The last ERROR line onnx2tf printed (ANSI colours removed), else that it exited."""
    lines = [ANSI.sub("", ln).strip() for ln in printed.splitlines()]
    errors = [ln.removeprefix("ERROR:").strip() for ln in lines if ln.startswith("ERROR:")]
    return " ".join(errors[-1].split())[:300] if errors else "it exited without a message"


ROUTES = (Route("litert-torch", _litert_torch), Route("via-onnx", _via_onnx))
# what the routes' errors showed -> the hint naming that cause ({0}: what the pattern caught)
LITERT_HINTS = ((re.compile(r"Lowering not found: ([\w.]+)"), "litert-torch has no lowering for {0}: rewrite it with other ops"),)
WRITING = Routing(
    doing="TFLite",
    failed="TFLite conversion failed by every route: ",
    reason=lambda exc, job: reason(exc, model_code(job.model)),  # where in the user's code it stopped, and the cause
    hints=(*HINTS, *LITERT_HINTS),
    own_errors=True,
)


def _converted(make):
    """`make()` (a litert-torch conversion) with its chatter silenced and its failures as one ConversionError line."""
    try:
        return _silenced(make)
    except ConversionError:
        raise
    except Exception as exc:  # litert-torch raises many types for unsupported ops
        raise ConversionError(
            f"litert-torch could not convert the model: {(first_line(exc) or type(exc).__name__)}",
            hint="an op may be unsupported; try --to onnx or --to openvino",
        ) from None


def _silenced(make):
    """`make()` (a litert-torch conversion) with its chatter silenced: progress bars, MLIR logs."""
    import torch

    with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()), stderr_silenced():
        return make()


def export(edge, out: Path) -> None:
    """Write the converted model to `out` (the pipeline's temporary path, renamed into place when all is done)."""
    with contextlib.redirect_stdout(io.StringIO()):
        edge.export(str(out))


def _convert(module, args, options: ConvertOptions, data: ConversionData, specs, notes: dict):
    import litert_torch

    from edgekit.backends.torch.loader import in_eval_mode

    if options.precision == "fp32":
        return litert_torch.convert(in_eval_mode(module), args)
    if options.precision in ("fp16", "int8-dynamic"):
        from litert_torch.generative.quantize import quant_recipes

        # Recipes return a QuantConfig. PT2E's dynamic mode gave a 10%-accurate Fashion-MNIST model here
        # (litert-torch 0.10); the weight-only dynamic recipe keeps accuracy.
        recipe = quant_recipes.full_fp16_recipe() if options.precision == "fp16" else quant_recipes.full_dynamic_recipe()
        return litert_torch.convert(in_eval_mode(module), args, quant_config=recipe)
    search = options.keep_sensitive and options.layout == "nchw"  # the ranking runs the NCHW module
    return _int8_static(module, args, options, data, specs, notes, search=search)


def _int8_static(module, args, options: ConvertOptions, data: ConversionData, specs, notes: dict, keep_float=(), search=False):
    """PT2E static int8 (backends.torch.pt2e.int8) with litert-torch's quantizer: the `keep_float` modules stay float, or
    with `search` the sensitivity outliers that bring the outputs closest to fp32."""
    import litert_torch
    from litert_torch.quantize.quant_config import QuantConfig

    from edgekit.backends.tflite.quantizer import litert_quantizer
    from edgekit.backends.torch.loader import in_eval_mode
    from edgekit.backends.torch.pt2e import int8

    converted, quantizer, notes["quantization"] = int8(
        in_eval_mode(module),
        args,
        lambda keep: litert_quantizer(options, keep),
        data.calibration,
        specs,
        fold_quantize=False,
        search=search,
        layout=options.layout,
        keep_float=keep_float,
    )
    return litert_torch.convert(converted, args, quant_config=QuantConfig(pt2e_quantizer=quantizer))
