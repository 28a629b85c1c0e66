"""PyTorch -> TFLite with litert-torch: fp32, fp16, PT2E int8 (static with calibration, or dynamic).

With --layout nhwc the model takes channels-last inputs (litert_torch.to_channel_last_io): the
transposes to the model's NCHW then live inside the graph, and the provenance says where.
"""

from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path

from edgekit.converters import ConversionData, Converter, ConvertOptions
from edgekit.errors import ConversionError, EdgekitError
from edgekit.native import stderr_silenced

log = logging.getLogger("edgekit")
EXPORT_BATCH = 1  # TFLite models are converted at batch 1; the interpreter resizes where the graph allows


class TorchToTflite(Converter):
    """litert_torch.convert; int8 through torch.export + PT2E with litert's PT2EQuantizer."""

    sources = ("torch",)
    target_format = "tflite"
    precisions = {"fp32": False, "fp16": False, "int8-dynamic": False, "int8": True}
    honours = frozenset({"calib_method", "per_tensor"})  # PT2E int8: converters.pt2e.static_config
    calib_methods = ("minmax", "histogram")  # converters.pt2e.OBSERVERS: torchao has no entropy or percentile observer
    default_calib_method = "histogram"  # the stock quantizer's own observer; Lite0 on LiteRT 96.00% vs 94.50% with minmax
    accuracy_control = True  # --max-drop / --min-agreement: converters.litert_accuracy
    agreement_control = True
    package = "litert-torch"
    import_name = "litert_torch"

    def convert(self, model, specs, out: Path, options: ConvertOptions, data: ConversionData) -> dict:
        with stderr_silenced():  # litert-torch imports TensorFlow and torchao, both chatty at import
            import litert_torch
        logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)

        from edgekit.loaders.torch import check_forward, example_tensors, export_batch

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
            from edgekit.converters.litert_accuracy import accuracy_controlled

            def build(keep_float: tuple[str, ...]):
                return _converted(lambda: _int8_static(module, args, options, data, specs, notes, keep_float))

            notes["accuracy_control"] = accuracy_controlled(model, specs, data, options, build, out)
            return {"tflite": notes}
        export(_converted(lambda: _convert(module, args, options, data, specs, notes)), out)
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

    if options.precision == "fp32":
        return litert_torch.convert(_inference_mode(module), args)
    if options.precision in ("fp16", "int8-dynamic"):
        from litert_torch.generative.quantize import quant_recipes

        # Recipes return a QuantConfig. PT2E's dynamic mode gave a 10%-accurate Fashion-MNIST model here
        # (litert-torch 0.10); the weight-only dynamic recipe keeps accuracy.
        recipe = quant_recipes.full_fp16_recipe() if options.precision == "fp16" else quant_recipes.full_dynamic_recipe()
        return litert_torch.convert(_inference_mode(module), args, quant_config=recipe)
    if options.keep_sensitive and options.layout == "nchw":
        return _int8_keeping_sensitive(module, args, options, data, specs, notes)
    return _int8_static(module, args, options, data, specs, notes)


def _int8_static(module, args, options: ConvertOptions, data: ConversionData, specs, notes: dict, keep_float: tuple[str, ...] = ()):
    """PT2E static int8 (converters.pt2e.quantize) with litert-torch's quantizer; `keep_float` modules stay float."""
    import litert_torch
    from litert_torch.quantize.quant_config import QuantConfig

    from edgekit.converters.litert_quantizer import litert_quantizer
    from edgekit.converters.pt2e import quantize

    quantizer, scheme = litert_quantizer(options)
    quantizer.keep_float = tuple(keep_float)
    batches = list(calibration_batches(data.calibration, specs, options.layout))
    converted, done = quantize(_inference_mode(module), args, quantizer, batches, fold_quantize=False)
    notes["quantization"] = {**scheme, **done}
    return litert_torch.convert(converted, args, quant_config=QuantConfig(pt2e_quantizer=quantizer))


def _int8_keeping_sensitive(module, args, options: ConvertOptions, data: ConversionData, specs, notes: dict):
    """PT2E static int8 keeping in float the prefix of the sensitivity outliers (most sensitive first, as ONNX Runtime's
    default does) that brings the quantized model's outputs closest to fp32 on the ranking's samples, all-int8
    included: layers interact. EfficientNet-Lite0: the three outliers kept (with the layers that feed them:
    pt2e.unannotate_modules) 96.00 -> 97.67% of the photo crops, cosine 0.9981 -> 0.9989 (docs/int8-schemes.md)."""
    import litert_torch
    import torch
    from litert_torch.quantize.quant_config import QuantConfig

    from edgekit.converters.litert_quantizer import litert_quantizer
    from edgekit.converters.pt2e import quantize
    from edgekit.converters.sensitivity import SAMPLES, losses_by_kept, outliers, output_loss, provenance, torch_sensitivity

    module = _inference_mode(module)
    ranked, total = torch_sensitivity(module, data.calibration, specs)
    candidates = outliers(ranked)
    batches = list(calibration_batches(data.calibration, specs, options.layout))
    probe = batches[:SAMPLES]
    with torch.no_grad():
        reference = [_first_output(module(*b)) for b in probe]
    trials = []
    for count in range(len(candidates) + 1):
        quantizer, scheme = litert_quantizer(options)
        quantizer.keep_float = tuple(s.name for s in candidates[:count])
        converted, done = quantize(module, args, quantizer, batches, fold_quantize=False)
        with torch.no_grad():
            loss = output_loss(reference, [_first_output(converted(*b)) for b in probe])
        trials.append((loss, count, converted, quantizer, {**scheme, **done}))
    loss, best, converted, quantizer, quantization = min(trials, key=lambda t: (t[0], t[1]))
    sensitivity = provenance(ranked, candidates[:best], len(probe), total)
    sensitivity["output_loss_by_kept"] = losses_by_kept(candidates, [t[0] for t in trials])
    notes["quantization"] = {**quantization, "sensitivity": sensitivity}
    return litert_torch.convert(converted, args, quant_config=QuantConfig(pt2e_quantizer=quantizer))


def _first_output(out):
    """A torch model's first output as an array."""
    import numpy as np

    return np.asarray((out[0] if isinstance(out, (tuple, list)) else out).detach())


def calibration_batches(samples, specs, layout: str):
    """The calibration samples as tuples of input tensors (batch 1, as exported), for PT2E observers (LiteRT, ExecuTorch)."""
    import torch

    for feeds in samples.batches(1):
        tensors = [torch.from_numpy(feeds[s.name]) for s in specs]
        if layout == "nhwc":
            tensors = [t.permute(0, 2, 3, 1).contiguous() if t.dim() == 4 else t for t in tensors]
        yield tuple(tensors)


def _inference_mode(module):
    """eval() where allowed: a .pt2's GraphModule is already in inference form and refuses eval()."""
    try:
        return module.eval()
    except (NotImplementedError, RuntimeError):
        return module
