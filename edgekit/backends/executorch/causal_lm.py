"""A causal language model as an ExecuTorch .pte with its KV cache, lowered to XNNPACK; weights through torchao.

torch.export of edgekit.backends.torch.causal_lm's KV-cache signature with dynamic token and past lengths (bounded
by --max-seq-len), lowered with the XnnpackPartitioner. int8-weights: torchao 8da8w (int8 dynamic
activations, int8 weights per output channel); int4-weights: torchao 8da4w (int4 weights in groups of --group-size),
ExecuTorch's scheme for its LLMs; both run by XNNPACK's dynamically quantized linear kernels.
"""

from __future__ import annotations

import copy
from pathlib import Path

from edgekit.errors import ConversionError
from edgekit.native import stderr_silenced
from edgekit.quantization.groups import adjusted_group, group_fallback


def convert(model, shape, final: Path, options, calibration, work: Path) -> dict:
    """Write the language model as a .pte at options.precision to `final`; the notes for the provenance."""

    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    from edgekit.backends.torch import causal_lm

    notes = {"weights": options.precision}
    wrapped = causal_lm.wrap(copy.deepcopy(model) if options.precision != "fp32" else model)
    if options.precision == "fp16":
        raise ConversionError("ExecuTorch language models are written in fp32, int8-weights or int4-weights", hint="choose one of those")
    if options.precision.endswith("-weights"):
        notes = quantize_weights(wrapped, options)
    example, dynamic = causal_lm.export_inputs(shape)
    try:
        with torch.no_grad():
            program = torch.export.export(wrapped, example, dynamic_shapes=dynamic, strict=False)
            # without the edge dialect's IR check, as ExecuTorch's export_llm lowers its LLMs (extension/llm/export/
            # builder.py): 20% of the lowering (65 s instead of 82 s CPU for the zoo LM); the greedy check follows
            config = EdgeCompileConfig(_check_ir_validity=False)
            edge = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()], compile_config=config)
            final.write_bytes(edge.to_executorch().buffer)
    except Exception as exc:  # noqa: BLE001 - torch.export, the partitioner and to_executorch raise many types
        raise ConversionError(f"ExecuTorch export of the language model failed: {str(exc).splitlines()[0][:240]}") from None
    from edgekit.backends.executorch.describe import delegate_split

    return notes | {"delegation": delegate_split(final)}


def quantize_weights(wrapped, options) -> dict:
    """torchao in place on the Linear layers, int8 dynamic activations with int8 weights per channel (8da8w) or int4
    weights in groups (8da4w): the schemes XNNPACK runs. int4's scale keeps every weight in range
    (SYMMETRIC_NO_CLIPPING_ERR: torchao's default SYMMETRIC clips a group's largest weight; on SmolLM2-135M the
    perplexity ratio 1.64 -> 1.35). Weight-only int8 (torchao IntxWeightOnlyConfig) lowers to wrong numbers in
    executorch 1.5.1 (max abs logit error 8.9e3 against the same model in eager), so it is not used."""
    import torch
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, MappingType, quantize_
    from torchao.quantization.granularity import PerAxis, PerGroup

    if options.precision == "int8-weights":
        quantize_(wrapped, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0)))
        return {"weights": "int8 per channel, int8 dynamic activations (torchao 8da8w)", "method": "RTN"}
    group = options.group_size if options.group_size > 0 else None
    widths = sorted({m.in_features for m in wrapped.modules() if isinstance(m, torch.nn.Linear)})
    for width in widths:  # a width the group does not divide: quantization.groups' rule, as NNCF's (None: int8)
        taken = adjusted_group(width, group) if group else -1
        config = Int8DynamicActivationIntxWeightConfig(
            weight_dtype=torch.int4 if taken else torch.int8,
            weight_granularity=PerGroup(taken) if taken and taken > 0 else PerAxis(0),
            weight_mapping_type=MappingType.SYMMETRIC_NO_CLIPPING_ERR if taken else MappingType.SYMMETRIC,
        )
        quantize_(
            wrapped, config, filter_fn=lambda module, _, width=width: isinstance(module, torch.nn.Linear) and module.in_features == width
        )
    groups = f"in groups of {group}" if group else "per channel"
    return {
        "weights": f"int4 {groups}, symmetric with every weight in range, int8 dynamic activations (torchao 8da4w)",
        "group_size": group or -1,
        "group_fallback": group_fallback(widths, group or 0),
        "method": "RTN",
    }


class ExecuTorchLM:
    """The .pte's forward method stepping the KV-cache graph in ExecuTorch's runtime."""

    def __init__(self, source, threads: int | None = None) -> None:
        """`source`: the artifact's ModelSource or its path."""
        from edgekit.backends.executorch.describe import load_program
        from edgekit.targets.base import default_threads

        path = getattr(source, "path", source)
        with stderr_silenced():  # the thread pool's cpuinfo banners, printed where it is first made
            from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool

            _unsafe_reset_threadpool(threads or default_threads())
        program, _ = load_program(path)
        self.method = program.load_method("forward")
        self.name = "executorch:cpu"

    def step(self, ids, keys, values):
        outs = self.method.execute([_tensor(a) for a in (ids, keys, values)])
        return tuple(out.numpy().copy() for out in outs)


def _tensor(array):
    """A contiguous torch tensor; an empty one (the past of a prefill) with the strides ExecuTorch computes, which
    count a size-0 dimension as 1 (torch's are 0 there, and ExecuTorch's runtime refuses them)."""
    import numpy as np
    import torch

    if array.size:
        return torch.from_numpy(np.ascontiguousarray(array))
    strides, step = [], 1
    for size in reversed(array.shape):
        strides.append(step)
        step *= max(size, 1)
    return torch.empty_strided(array.shape, tuple(reversed(strides)), dtype=torch.from_numpy(array[:0]).dtype)
