"""PyTorch -> ONNX: the dynamo exporter first, the TorchScript exporter as a logged fallback."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

from edgekit.conversion import ConversionData, Converter, ConvertOptions
from edgekit.errors import ConversionError

log = logging.getLogger("edgekit")
TWO_GB = 2 * 1024**3
EXPORT_BATCH = 2  # torch.export specialises a dim of size 1, so the example batch is 2


class TorchToOnnx(Converter):
    """Writes one self-contained .onnx with a dynamic batch axis (external data only above 2 GB)."""

    sources = ("torch",)
    target_format = "onnx"
    precisions = {"fp32": False}
    package = "onnxscript"
    import_name = "onnxscript"

    def convert(self, model, specs, out: Path, options: ConvertOptions, data: ConversionData) -> dict:
        """Export the torch module `model` (inputs `specs`) to `out`; returns notes for the artifact's meta."""
        module = model
        from edgekit.backends.torch.loader import check_forward, example_tensors, export_batch

        _quiet_exporter_logs()
        n_outputs = check_forward(module, specs)
        names = ["output"] if n_outputs == 1 else [f"output_{i}" for i in range(n_outputs)]
        external = _parameter_bytes(module) > TWO_GB
        args = example_tensors(specs, export_batch(module, EXPORT_BATCH), module=module)
        try:
            _export_dynamo(module, args, specs, names, out, external)
            return {"exporter": "dynamo", "external_data": external}
        except Exception as exc:  # the exporter raises many types; the fallback is the point
            reason = _first_line(exc)
            log.warning("dynamo exporter failed (%s); falling back to the TorchScript exporter", reason)
        try:
            _export_torchscript(module, args, specs, names, out)
        except Exception as exc:
            raise ConversionError(
                f"ONNX export failed with both exporters: {_first_line(exc)}",
                hint="an op may be unsupported; try another opset or rewrite the op",
                cause=f"dynamo exporter: {reason}\nTorchScript exporter: {exc}",
            ) from None
        return {"exporter": "torchscript", "fallback_reason": reason, "external_data": False}


def _export_dynamo(module, args, specs, names, out: Path, external: bool) -> None:
    import torch

    from edgekit.backends.torch.loader import batch_dynamic_shapes

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            args,
            str(out),
            dynamo=True,
            dynamic_shapes=batch_dynamic_shapes(module, specs),
            input_names=[s.name for s in specs],
            output_names=names,
            external_data=external,
            verbose=False,
        )


def _export_torchscript(module, args, specs, names, out: Path) -> None:
    import torch

    axes = {s.name: {s.batch_axis(): "batch"} for s in specs if s.value is None and s.batch_axis() is not None}
    axes |= {n: {0: "batch"} for n in names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            args,
            str(out),
            dynamo=False,
            input_names=[s.name for s in specs],
            output_names=names,
            dynamic_axes=axes,
            opset_version=17,
            do_constant_folding=True,
        )


def _quiet_exporter_logs() -> None:
    # torch configures its loggers on import; its exporter warns about optional torchvision ops on every export.
    import torch  # noqa: F401

    for name in ("torch.onnx", "torch.export", "torch._export", "onnxscript"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _parameter_bytes(module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters()) + sum(b.numel() * b.element_size() for b in module.buffers())


def _first_line(exc: BaseException) -> str:
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return (lines[0] if lines else type(exc).__name__)[:300]
