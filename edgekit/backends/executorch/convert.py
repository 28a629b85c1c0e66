"""PyTorch -> ExecuTorch .pte lowered to XNNPACK: torch.export, then to_edge_transform_and_lower with the
XNNPACK partitioner; int8 through PT2E with the XNNPACK quantizer, calibrated on real samples.

Lowering tries routes in order and takes the first that gives a program (`ROUTES`): XNNPACK's partitioner as it comes,
then one delegate call per op, then XNNPACK leaving out the nodes its channels-last pass cannot lay out (they run on
ExecuTorch's portable kernels). The provenance lists every route tried, why each failed, and the one taken.

The provenance records which ops the delegate took and which it left to ExecuTorch's portable CPU kernels:
that share is the artifact's fallback, gated by `--max-fallback`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from edgekit.backends.export_errors import HINTS, chain, hint_for, model_code, plain, quiet, reason
from edgekit.backends.routes import Route, Routing, alike_together, first_route
from edgekit.conversion import ConversionData, Converter, ConvertOptions
from edgekit.errors import ConversionError

EXPORT_BATCH = 1  # a .pte is planned for static shapes: batch 1, as an app on a phone feeds it
DELEGATE = "XNNPACK"
PLUMBING = {"getitem"}  # picks a delegate call's outputs apart: no compute, not an op left outside
NHWC_RANK = 4  # the rank XNNPACK's channels-last pass lays out (ChannelsLastTaggedReshapePass.can_be_converted_to_nhwc)
UNSQUEEZED = {"convolution.default"}  # XNNPACK's Conv1dUnsqueezePass makes a 1-D convolution 4-D before that pass
PASS_FAILED = re.compile(r"An error occurred when running the '(\w+)' pass after the following passes")  # ExecuTorch's
# what the errors showed -> the hint naming that cause (backends.export_errors.hint_for): torch.export's, XNNPACK's
# channels-last layout, and ONNX, the other route from a torch module, whatever they showed
LOWERING_HINTS = (
    *HINTS,
    (re.compile(r"NHWC"), "XNNPACK could not lay out an op channels-last (NHWC) on any route"),
    (re.compile(r"(?s)."), "try --to onnx"),
)


class TorchToExecutorch(Converter):
    """torch.export -> (PT2E int8) -> to_edge_transform_and_lower(XnnpackPartitioner, by ROUTES) -> .pte."""

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
        module, quantization = in_eval_mode(model), None
        with torch.no_grad():
            if options.precision == "int8":
                with failing_as("PT2E int8 quantization failed", module), quiet():
                    module, quantization = _quantize(module, args, options, data, specs)
            lowered = lower_by_routes(exported(module, args))
        Path(out).write_bytes(lowered.program.buffer)
        return {
            "executorch": {"delegate": DELEGATE, "batch": batch, "quantization": quantization},
            "routes": lowered.routes,
            "fallback": lowered.split,
        }


@dataclass(frozen=True)
class Lowered:
    """The route taken's edge program (through to_executorch: memory planned) and .pte program, its delegation split,
    and every route tried."""

    edge: object
    program: object
    split: dict
    routes: list


def exported(module, args):
    """torch.export of `module` (float or PT2E-quantized); a failure as a ConversionError with a hint from its error."""
    import torch

    with failing_as("torch.export could not trace the model", module), quiet():
        return torch.export.export(module, args)


def lower_to_xnnpack(module, args) -> tuple:
    """torch.export of `module` (float or PT2E-quantized) lowered by the first of ROUTES that works: (the edge program,
    its delegation split). The edge program has been through to_executorch once; calling it again gives the same .pte."""
    lowered = lower_by_routes(exported(module, args))
    return lowered.edge, lowered.split


def lower_by_routes(program) -> Lowered:
    """The exported `program` lowered by the first of ROUTES that gives a .pte program; each route considered is
    recorded as {"route", "result": "failed" | "taken" | "skipped", "why"}. All failing: a ConversionError naming each
    failure."""
    (edge, executorch, split), routes = first_route(ROUTES, program, LOWERING)
    return Lowered(edge, executorch, split, routes)


def lowered_with(partitioner):
    """A route's run: `program` lowered with the partitioner `partitioner()` makes -> ((edge program, .pte program,
    delegation split), the record's why: what the route left out of the delegate, or None). The split is read before
    to_executorch, which plans memory in the edge program (alloc nodes)."""

    def lower(program) -> tuple[tuple, dict]:
        from executorch.exir import to_edge_transform_and_lower

        made = partitioner()
        edge = to_edge_transform_and_lower(program, partitioner=[made])
        split = delegation(edge.exported_program().graph_module)
        return (edge, edge.to_executorch(), split), {"why": _left_out_text(getattr(made, "edgekit_left_out", None))}

    return lower


def xnnpack_partitioner(**kwargs):
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    return XnnpackPartitioner(**kwargs)


def partitioner_leaving_out_non_nhwc():
    """XNNPACK's partitioner leaving to the portable kernels each node its channels-last pass cannot lay out (an op
    XNNPACK runs NHWC on a tensor that is not 4-D: a PReLU after a Linear, which the PReLU config takes and the pass
    asserts on). What it left out: its `edgekit_left_out`, {node name: description}."""
    partitioner = xnnpack_partitioner()
    left_out: dict[str, str] = {}
    for config in partitioner.target_partitioner_configs.values():
        config.check_constraints = functools.partial(_unless_non_nhwc, config.check_constraints, left_out)
    partitioner.edgekit_left_out = left_out
    return partitioner


def _unless_non_nhwc(check, left_out: dict, node, ep) -> bool:
    """A partitioner config's check_constraints that also refuses (and records in `left_out`) a non-NHWC-able node."""
    rank = non_nhwc_rank(node)
    if rank is not None:
        left_out[node.name] = f"{_op_name(node)} on a {rank}-D tensor"
        return False
    return check(node, ep)


def non_nhwc_rank(node) -> int | None:
    """The rank of `node`'s input where `node` is an op XNNPACK's channels-last pass lays out NHWC (as the installed
    ExecuTorch lists them) and that input is not 4-D; else None."""
    import torch

    if node.op != "call_function" or _op_name(node.target) not in _nhwc_ops() or not node.args:
        return None
    value = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
    rank = value.dim() if isinstance(value, torch.Tensor) else None
    return rank if rank is not None and rank != NHWC_RANK else None


@functools.cache
def _nhwc_ops() -> frozenset[str]:
    """The ops XNNPACK's channels-last pass lays out NHWC, as the installed ExecuTorch lists them, by `_op_name`."""
    from executorch.backends.xnnpack._passes.channels_last_tagged_reshape_pass import ChannelsLastTaggedReshapePass

    return frozenset(_op_name(op) for op in ChannelsLastTaggedReshapePass.memory_sensitive_ops_nhwc) - UNSQUEEZED


def _op_name(target) -> str:
    """`prelu.default` for aten's and the edge dialect's op alike (a node: its target's)."""
    from executorch.exir.backend.canonical_partitioners.config_partitioner import format_target_name

    target = getattr(target, "target", target)
    return format_target_name(getattr(target, "__name__", str(target)))


def _left_out_text(left_out: dict | None) -> str | None:
    """`left to portable kernels: prelu.default on a 2-D tensor (x2)`, or None where nothing was left out."""
    if not left_out:
        return None
    counts = Counter(left_out.values())
    return "left to portable kernels: " + ", ".join(f"{what}{f' (x{n})' if n > 1 else ''}" for what, n in counts.items())


ROUTES = (
    Route("xnnpack", lowered_with(xnnpack_partitioner)),  # as XNNPACK comes: ops merged into as few delegate calls as it can
    # one delegate call per op; a node the channels-last pass asserts on fails as its own one-op partition too
    Route(
        "xnnpack-per-op",
        lowered_with(functools.partial(xnnpack_partitioner, per_op_mode=True)),
        fails_alike_on=re.compile(r"^ChannelsLastTaggedReshapePass: "),
    ),
    Route("xnnpack+portable", lowered_with(partitioner_leaving_out_non_nhwc)),  # the nodes that break channels-last left outside
)


def lowering_reason(exc: BaseException) -> str:
    """export_errors.reason (the innermost cause's type and first line), after the name of the ExecuTorch pass that
    raised it where one did: `ChannelsLastTaggedReshapePass: AssertionError: Attempting to convert ...`."""
    passes = [match.group(1) for error in chain(exc) if (match := PASS_FAILED.search(plain(error)))]
    return (f"{passes[0]}: " if passes else "") + reason(exc)


LOWERING = Routing(
    doing="ExecuTorch lowering",
    failed="ExecuTorch could not lower the model by any route: ",
    reason=lambda exc, program: lowering_reason(exc),
    hints=LOWERING_HINTS,
    listed=alike_together,
    within=quiet,
)


@contextlib.contextmanager
def failing_as(what: str, module):
    """Any error in the block as a ConversionError: `what: <the error's reason>` (where in `module`'s code it stopped),
    with the hints for what it showed."""
    try:
        yield
    except ConversionError:
        raise
    except Exception as exc:  # torch.export, PT2E and ExecuTorch raise many types for unsupported code
        raise ConversionError(f"{what}: {reason(exc, model_code(module))}", hint=hint_for([exc], LOWERING_HINTS)) from None


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
