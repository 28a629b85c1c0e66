"""PyTorch -> TFLite with litert-torch: fp32, fp16, PT2E int8 (static with calibration, or dynamic).

With --layout nhwc the model takes channels-last inputs (litert_torch.to_channel_last_io): the
transposes to the model's NCHW then live inside the graph, and the provenance says where.
"""

from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path

from edgekit.backends.tflite.pads import fold_same_pads
from edgekit.conversion import ConversionData, Converter, ConvertOptions
from edgekit.errors import ConversionError, EdgekitError
from edgekit.native import stderr_silenced

log = logging.getLogger("edgekit")
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
        args = example_tensors(specs, export_batch(model, EXPORT_BATCH))
        notes = {"precision": options.precision, "layout": options.layout}
        module = model
        if options.layout == "nhwc":
            module = litert_torch.to_channel_last_io(model, args=list(range(len(specs))))
            args = tuple(a.permute(0, 2, 3, 1).contiguous() if a.dim() == 4 else a for a in args)
            notes["layout_transposes"] = [
                f"{s.name}: NHWC input transposed to NCHW at the graph's entry" for s in specs if len(s.shape) == 4
            ]
        if options.precision == "int8" and data.validation is not None:  # --max-drop / --min-agreement
            from edgekit.backends.tflite.accuracy import accuracy_controlled

            def build(keep_float: tuple[str, ...]):
                return _converted(lambda: _int8_static(module, args, options, data, specs, notes, keep_float))

            notes["accuracy_control"] = accuracy_controlled(model, specs, data, options, build, out)
        else:
            export(_converted(lambda: _convert(module, args, options, data, specs, notes)), out)
        notes["pads_folded"] = fold_same_pads(out)  # int8 keeps explicit pads in NCHW between transposes
        return {"tflite": notes}


def _converted(make):
    """`make()` (a litert-torch conversion) with its chatter silenced and its failures as one ConversionError line."""
    import torch

    try:
        with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()), stderr_silenced():  # progress bars, MLIR logs
            return make()
    except ConversionError:
        raise
    except Exception as exc:  # litert-torch raises many types for unsupported ops
        raise ConversionError(
            f"litert-torch could not convert the model: {str(exc).strip().splitlines()[0][:300]}",
            hint="an op may be unsupported; try --to onnx or --to openvino",
        ) from None


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
