"""PyTorch -> ExecuTorch .pte lowered to XNNPACK: torch.export, then to_edge_transform_and_lower with the
XNNPACK partitioner; int8 through PT2E with the XNNPACK quantizer, calibrated on real samples.

The provenance records which ops the delegate took and which it left to ExecuTorch's portable CPU kernels:
that share is the artifact's fallback, gated by `--max-fallback`.
"""

from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path

from edgekit.conversion import ConversionData, Converter, ConvertOptions
from edgekit.errors import ConversionError
from edgekit.native import stderr_silenced

EXPORT_BATCH = 1  # a .pte is planned for static shapes: batch 1, as an app on a phone feeds it
DELEGATE = "XNNPACK"
PLUMBING = {"getitem"}  # picks a delegate call's outputs apart: no compute, not an op left outside


class TorchToExecutorch(Converter):
    """torch.export -> (PT2E int8) -> to_edge_transform_and_lower(XnnpackPartitioner) -> .pte."""

    sources = ("torch",)
    target_format = "executorch"
    precisions = {"fp32": False, "int8": True}
    honours = frozenset({"calib_method", "per_tensor"})  # PT2E int8: backends.torch.pt2e.static_config
    calib_methods = ("minmax", "histogram")  # backends.torch.pt2e.OBSERVERS: torchao has no entropy or percentile observer
    default_calib_method = "histogram"  # the stock quantizer's own observer; Lite0 on LiteRT 96.00% vs 94.50% with minmax
    package = "executorch"
    import_name = "executorch"

    def convert(self, model, specs, out: Path, options: ConvertOptions, data: ConversionData) -> dict:
        import torch

        from edgekit.backends.torch.loader import check_forward, example_tensors, export_batch, in_eval_mode

        logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)
        check_forward(model, specs)
        batch = export_batch(model, EXPORT_BATCH)  # a .pt2 exported at a fixed batch keeps it
        args = example_tensors(specs, batch)
        try:
            with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()), stderr_silenced():
                program, split, quantization = _lower(in_eval_mode(model), args, options, data, specs)
        except ConversionError:
            raise
        except Exception as exc:  # torch.export and the lowering raise many types for unsupported code
            raise ConversionError(
                f"ExecuTorch could not lower the model: {str(exc).strip().splitlines()[0][:300]}",
                hint="torch.export must trace the model (no data-dependent control flow); try --to onnx",
            ) from None
        Path(out).write_bytes(program.buffer)
        return {"executorch": {"delegate": DELEGATE, "batch": batch, "quantization": quantization}, "fallback": split}


def _lower(module, args, options: ConvertOptions, data: ConversionData, specs):
    quantization = None
    if options.precision == "int8":
        module, quantization = _quantize(module, args, options, data, specs)
    edge, split = lower_to_xnnpack(module, args)
    return edge.to_executorch(), split, quantization


def lower_to_xnnpack(module, args) -> tuple:
    """torch.export of `module` (float or PT2E-quantized) lowered with the XNNPACK partitioner: (the edge program,
    its delegation split)."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    edge = to_edge_transform_and_lower(torch.export.export(module, args), partitioner=[XnnpackPartitioner()])
    return edge, delegation(edge.exported_program().graph_module)


def _quantize(module, args, options: ConvertOptions, data: ConversionData, specs):
    """PT2E with the XNNPACK quantizer and backends.torch.pt2e's steps (calibration, fitted weight codes, the sensitivity
    outliers kept float unless --no-keep-sensitive), weights folded to int8 for the delegate; (the quantized
    GraphModule, provenance entry)."""
    from edgekit.backends.executorch.quantizer import xnnpack_quantizer
    from edgekit.backends.torch.pt2e import int8

    converted, _, quantization = int8(
        module,
        args,
        lambda keep: xnnpack_quantizer(options, keep),
        data.calibration,
        specs,
        fold_quantize=True,
        search=options.keep_sensitive,
    )
    return converted, quantization


def delegation(graph_module) -> dict:
    """Ops the delegate took and ops left outside it, and the share left outside (the fallback)."""
    from executorch.devtools.backend_debug import get_delegation_info

    info = get_delegation_info(graph_module)
    rows = [r for r in info.delegation_by_operator.values() if r.op_type not in PLUMBING]
    inside = {r.op_type: r.delegated for r in rows if r.delegated}
    outside = {r.op_type: r.non_delegated for r in rows if r.non_delegated}
    total = sum(inside.values()) + sum(outside.values())
    return {
        "where": f"the {DELEGATE} delegate",
        "percent": 100.0 * sum(outside.values()) / total if total else 0.0,
        "delegated_ops": inside,
        "not_delegated_ops": outside,
        "delegated_subgraphs": info.num_delegated_subgraphs,
    }
