"""A causal language model as an ExecuTorch .pte with its KV cache, lowered to XNNPACK; weights through torchao.

The cache is a **static cache in the program's mutable buffers**, as ExecuTorch's own LLM export holds it: one
`[1, max_seq_len, H_kv, D]` keys and values buffer per layer, written in place by `llama::update_cache` at the step's
start position and read by `llama::custom_sdpa` up to the tokens held (ExecuTorch's LLM runner's kernels, grouped-query
attention without repeating the cache). forward(input_ids [1, T], input_pos [1], logits_at [K]) -> logits [1, K, V],
T dynamic (1..--max-seq-len), logits_at the positions whose logits it gives: the transformers model runs with that
attention (registered with transformers' AttentionInterface for the export only) and a cache object that writes to
the buffers. A model that graph refuses takes edgekit.backends.torch.causal_lm's KV-cache signature instead (the
cache in and out whole, token and past lengths dynamic); the provenance's `graph` says which. The weights: torchao's
8da8w and 8da4w (lm_weights), run by XNNPACK's dynamically quantized linear kernels.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import numpy as np

from edgekit.artifact import check_cache_room, held_step
from edgekit.backends.executorch.lm_weights import quantize_weights
from edgekit.errors import ConversionError, first_line
from edgekit.native import stderr_silenced

log = logging.getLogger("edgekit")
ATTENTION = "edgekit_executorch_sdpa"  # the attention implementation's name in transformers' AttentionInterface
STATIC = "static cache: llama::update_cache and llama::custom_sdpa on mutable buffers (forward(input_ids, input_pos, logits_at) -> logits)"
HELD = "in the program's mutable buffers, allocated whole (max_seq_len tokens), as ExecuTorch's LLM export holds it"


def convert(model, shape, final: Path, options, calibration, work: Path) -> dict:
    """Write the language model as a .pte at options.precision to `final`; the notes for the provenance."""
    from edgekit.backends.executorch.describe import delegate_split

    if options.precision == "fp16":
        raise ConversionError("ExecuTorch language models are written in fp32, int8-weights or int4-weights", hint="choose one of those")
    model = copy.deepcopy(model) if options.precision != "fp32" else model
    notes = quantize_weights(model, options, calibration) if options.precision.endswith("-weights") else {"weights": options.precision}
    try:
        _lower(_export_static(model, shape), final)
        notes |= {"graph": STATIC, "kv_cache_held": HELD}
    except Exception as exc:  # noqa: BLE001 - torch.export and the lowering raise many types; the other graph is tried
        why = first_line(exc, 200)
        log.info("ExecuTorch language model: the cache as inputs and outputs (%s)", why)
        _lower(_export_dynamic(model, shape), final)
        notes |= {"graph": f"the cache as inputs and outputs: the static cache was refused ({why})"}
    return notes | {"delegation": delegate_split(final)}


def _load_llm_kernels() -> None:
    """ExecuTorch's LLM kernels (llama::update_cache, llama::custom_sdpa): loading their library registers them with
    torch (for export) and with ExecuTorch's runtime in this process (without it the method does not load: 0x14,
    an operator missing). An app links them as ExecuTorch's LLM runner does."""
    with stderr_silenced():
        from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401


def _export_static(model, shape):
    """torch.export of the model behind the static cache (StaticCacheLM)."""
    import torch

    from edgekit.backends.torch import causal_lm

    _load_llm_kernels()
    tokens = torch.export.Dim("tokens", min=1, max=shape.max_seq_len)
    kept = torch.export.Dim("kept", min=1, max=shape.max_seq_len)
    example = (torch.randint(0, shape.vocab, (1, 5)), torch.tensor([0]), torch.arange(4))
    dynamic = ({1: tokens}, None, {0: kept})
    with causal_lm.attention(model, ATTENTION, _custom_sdpa), torch.no_grad():
        return torch.export.export(static_cache_lm(model, shape), example, dynamic_shapes=dynamic, strict=False)


def _custom_sdpa(module, query, key, value, attention_mask, scaling=None, dropout=0.0, start_pos=0, **_):
    """transformers' attention interface over ExecuTorch's kernel: the queries [B, H, T, D] against the whole cache
    buffers [B, max_seq_len, H_kv, D], causal from `start_pos` (so only the tokens held are read)."""
    import torch

    return torch.ops.llama.custom_sdpa(query.transpose(1, 2), key, value, start_pos, None, 0.0, True, scaling), None


def static_cache_lm(model, shape):
    """`model` behind forward(input_ids [1, T], input_pos [1], logits_at [K]) -> logits [1, K, V] of the positions
    `logits_at` names (every one for perplexity, the last for a prompt read for generation), its cache in mutable
    buffers."""
    import torch

    class BufferCache:
        """What the attention layers call on a cache: update() writes the new keys and values at the start position
        and gives the whole buffers back."""

        def __init__(self, owner, start) -> None:
            self.owner, self.start = owner, start

        def update(self, keys, values, layer: int, *_, **__):
            held = getattr(self.owner, f"keys_{layer}"), getattr(self.owner, f"values_{layer}")
            for new, buffer in zip((keys, values), held, strict=True):
                torch.ops.llama.update_cache(new.transpose(1, 2), buffer, self.start)
            return held

    class StaticCacheLM(torch.nn.Module):
        def __init__(self, lm) -> None:
            super().__init__()
            self.lm, self.max_seq_len = lm, shape.max_seq_len
            for layer in range(shape.layers):
                for kind in ("keys", "values"):
                    buffer = torch.zeros(1, shape.max_seq_len, shape.kv_heads, shape.head_dim)
                    self.register_buffer(f"{kind}_{layer}", buffer, persistent=False)

        def forward(self, input_ids, input_pos, logits_at):
            start = input_pos[0].item()
            torch._check_is_size(start)
            torch._check(start + input_ids.shape[1] <= self.max_seq_len)
            positions = (torch.arange(input_ids.shape[1]) + input_pos[0]).unsqueeze(0)
            cache = BufferCache(self, start)
            out = self.lm(
                input_ids=input_ids,
                past_key_values=cache,
                position_ids=positions,
                use_cache=True,
                start_pos=start,
                logits_to_keep=logits_at,
            )
            return out.logits

    return StaticCacheLM(model).eval()


def _export_dynamic(model, shape):
    """torch.export of edgekit's KV-cache signature (the cache in and out whole)."""
    import torch

    from edgekit.backends.torch import causal_lm

    example, dynamic = causal_lm.export_inputs(shape)
    try:
        with torch.no_grad():
            return torch.export.export(causal_lm.wrap(model), example, dynamic_shapes=dynamic, strict=False)
    except Exception as exc:  # noqa: BLE001 - torch.export raises many types
        raise ConversionError(f"ExecuTorch export of the language model failed: {first_line(exc, 240)}") from None


def _lower(program, final: Path) -> None:
    """The exported program lowered to XNNPACK and written to `final`; without the edge dialect's IR check, as
    ExecuTorch's export_llm lowers its LLMs (extension/llm/export/builder.py): 20% of the lowering (65 s instead of
    82 s CPU for the zoo LM's dynamic-cache graph); the greedy check follows."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    try:
        config = EdgeCompileConfig(_check_ir_validity=False)
        edge = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()], compile_config=config)
        final.write_bytes(edge.to_executorch().buffer)
    except Exception as exc:  # noqa: BLE001 - the partitioner and to_executorch raise many types
        raise ConversionError(f"ExecuTorch lowering of the language model failed: {first_line(exc, 240)}") from None


class ExecuTorchLM:
    """The .pte's forward method stepping the language model in ExecuTorch's runtime.

    A static-cache program keeps the cache in its mutable buffers: step() takes and gives back zero-byte stand-ins of
    the cache's shape (their length axis counts the tokens held, which is where the new tokens go), like OpenVINO's
    stateful session; a prompt from position 0 overwrites what the buffers held. A program with the cache as inputs
    and outputs takes and gives the cache itself."""

    def __init__(self, source, threads: int | None = None) -> None:
        """`source`: the artifact's ModelSource or its path."""
        from edgekit.backends.executorch.describe import load_program
        from edgekit.provenance import read_provenance
        from edgekit.targets.base import default_threads

        path = getattr(source, "path", source)
        with stderr_silenced():  # the thread pool's cpuinfo banners, printed where it is first made
            from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool

            _unsafe_reset_threadpool(threads or default_threads())
        program, meta = load_program(path)
        self.static = len(meta.input_tensor_meta(1).sizes()) == 1  # the start position, not a cache
        if self.static:
            _load_llm_kernels()
        self.method = program.load_method("forward")
        if self.static:  # the tokens the buffers hold allocated, as the provenance records them
            self.cache_tokens = ((read_provenance(Path(path)) or {}).get("kv_cache") or {}).get("max_seq_len", 0)
        self.name = "executorch:cpu"

    def step(self, ids, keys, values):
        return self._run(ids, keys, values, np.arange(ids.shape[1]))

    def step_last(self, ids, keys, values):
        """step() giving the last position's logits only (a prompt read for generation: the head runs once)."""
        return self._run(ids, keys, values, np.array([ids.shape[1] - 1]))

    def _run(self, ids, keys, values, logits_at: np.ndarray):
        if not self.static:
            outs = self.method.execute([_tensor(a) for a in (ids, keys, values)])
            return tuple(out.numpy().copy() for out in outs)
        past, count = keys.shape[3], ids.shape[1]
        if self.cache_tokens:
            check_cache_room(past + count, self.cache_tokens, "ExecuTorch")
        inputs = [_tensor(ids), _tensor(np.array([past], np.int64)), _tensor(logits_at.astype(np.int64))]
        logits = self.method.execute(inputs)[0].numpy().copy()
        return held_step(logits, keys, past + count)


def _tensor(array):
    """A contiguous torch tensor; an empty one (the past of a prefill) with the strides ExecuTorch computes, which
    count a size-0 dimension as 1 (torch's are 0 there, and ExecuTorch's runtime refuses them)."""
    import torch

    if array.size:
        return torch.from_numpy(np.ascontiguousarray(array))
    strides, step = [], 1
    for size in reversed(array.shape):
        strides.append(step)
        step *= max(size, 1)
    return torch.empty_strided(array.shape, tuple(reversed(strides)), dtype=torch.from_numpy(array[:0]).dtype)
