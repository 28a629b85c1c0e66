"""A PyTorch causal language model with its KV cache as inputs and outputs, for export and as the reference.

Any transformers causal LM (Llama, Qwen, GPT-2, Phi and their like: a model whose forward takes `past_key_values`)
is wrapped in `KVCacheLM`: forward(input_ids [1, T], past_keys [L, 1, H_kv, P, D], past_values) ->
(logits [1, T, V], present_keys [L, 1, H_kv, P + T, D], present_values). Prefill is P = 0, T = the prompt; decode is
T = 1. The past is handed to the model as a transformers DynamicCache, and positions run from P, so one graph serves
both. Every runtime (ONNX Runtime, OpenVINO, ExecuTorch) runs the same signature (edgekit.validation.text_generation).
"""

from __future__ import annotations

import inspect
import json
from contextlib import contextmanager
from pathlib import Path

from edgekit.artifact import CacheShape
from edgekit.backends.torch.lm_files import gguf_facts
from edgekit.errors import ModelLoadError
from edgekit.native import stderr_silenced, third_party_quiet

INPUTS = ("input_ids", "past_keys", "past_values")
OUTPUTS = ("logits", "present_keys", "present_values")


def cache_shape(model, max_seq_len: int) -> CacheShape:
    """The KV cache shape of a transformers causal LM, from its config."""
    config = getattr(model, "config", None)
    try:
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        return CacheShape(config.num_hidden_layers, kv_heads, head_dim, config.vocab_size, max_seq_len)
    except AttributeError as exc:
        raise ModelLoadError(
            f"{type(model).__name__} is not a transformers causal language model ({exc})",
            hint="--task text-generation takes a transformers *ForCausalLM (Llama, Qwen, GPT-2, Phi...) from a factory, a pickle or a folder",
        ) from None


def load_causal_lm(source):
    """The source as an eval-mode transformers causal LM: a module:factory (+ --weights), zoo:stdlib-lm, a pickled
    module (with consent), a folder written by save_pretrained or a GGUF file."""
    from edgekit.backends.torch.loader import load_torch

    with stderr_silenced(), third_party_quiet():  # transformers imports torchao, which notes kernels it cannot load
        model, _ = load_torch(source)
    if not hasattr(model, "config") or "past_key_values" not in _forward_parameters(model):
        raise ModelLoadError(
            f"{source.spec} is not a causal language model with a KV cache (its forward takes no past_key_values)",
            hint="--task text-generation takes a transformers *ForCausalLM (Llama, Qwen, GPT-2, Phi...)",
        )
    model.config.use_cache = True
    return model.float().eval()


def load_with_cache(source, max_seq_len: int) -> tuple[object, CacheShape, dict]:
    """The causal LM of `source`, the shape of its KV cache up to `max_seq_len` tokens and what the provenance says of
    the weights it came with (a GGUF file's quantization; the head tied to the embedding or not): the registry's
    lm_loader."""
    model = load_causal_lm(source)
    facts = {"head": head_of(model)}
    if source.format == "gguf":
        facts["gguf"] = gguf_facts(source.path)
    return model, cache_shape(model, max_seq_len), facts


def head_of(model) -> str:
    """'tied to the embedding' where the output layer reads the input embedding's matrix, else 'untied'."""
    head, embedding = model.get_output_embeddings(), model.get_input_embeddings()
    tied = head is not None and embedding is not None and head.weight is embedding.weight
    return "tied to the embedding" if tied else "untied"


def _forward_parameters(model) -> set[str]:

    return set(inspect.signature(model.forward).parameters)


def wrap(model):
    """`model` behind the KV-cache signature (an nn.Module, for torch.export and as the reference)."""
    import torch
    from transformers import DynamicCache

    class KVCacheLM(torch.nn.Module):
        def __init__(self, lm) -> None:
            super().__init__()
            self.lm = lm
            self.layers = lm.config.num_hidden_layers

        def forward(self, input_ids, past_keys, past_values):
            past = past_keys.shape[3]
            cache = DynamicCache(config=self.lm.config)
            for i in range(self.layers):
                cache.update(past_keys[i], past_values[i], i)
            positions = torch.arange(past, past + input_ids.shape[1]).unsqueeze(0)
            out = self.lm(input_ids=input_ids, past_key_values=cache, position_ids=positions, use_cache=True)
            layers = out.past_key_values.layers
            return out.logits, torch.stack([c.keys for c in layers]), torch.stack([c.values for c in layers])

    return KVCacheLM(model).eval()


def wrap_layers(model):
    """`model` behind a per-layer KV-cache signature (the layout OpenVINO's stateful fusion matches, as optimum-intel
    exports): forward(input_ids [1, T], [past key 0, past value 0, ...] each [1, H_kv, P, D], logits_at [K]) ->
    (logits [1, K, V] of the positions `logits_at` names, present key 0, present value 0, ...). Every position's
    logits are what perplexity reads, the last one's what a prompt read for generation needs (the head is a fifth of
    SmolLM2-135M's weights). Each layer of the cache is handed over as it is, not concatenated to an empty tensor (a
    rank-1 Concat no converter takes)."""
    import torch
    from transformers import DynamicCache

    class LayeredKVCacheLM(torch.nn.Module):
        def __init__(self, lm) -> None:
            super().__init__()
            self.lm = lm
            self.layers = lm.config.num_hidden_layers

        def forward(self, input_ids, past, logits_at):
            cache = DynamicCache(config=self.lm.config)
            for i, layer in enumerate(cache.layers[: self.layers]):
                layer.lazy_initialization(past[2 * i], past[2 * i + 1])
                layer.keys, layer.values = past[2 * i], past[2 * i + 1]
            start = past[0].shape[2]
            positions = torch.arange(start, start + input_ids.shape[1]).unsqueeze(0)
            out = self.lm(input_ids=input_ids, past_key_values=cache, position_ids=positions, use_cache=True, logits_to_keep=logits_at)
            return (out.logits, *[t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)])

    return LayeredKVCacheLM(model).eval()


ADDITIVE_MASK_SDPA = "edgekit_additive_mask_sdpa"  # transformers' SDPA attention, its boolean mask made additive


@contextmanager
def attention(model, name: str, function=None, mask=None):
    """`model` runs with the attention implementation `name` inside the block: `function` (transformers'
    AttentionInterface signature) and `mask` (its AttentionMaskInterface's; None: none is built) registered under it."""
    from transformers import AttentionInterface, AttentionMaskInterface

    if function is not None:
        AttentionInterface.register(name, function)
    if mask is not None:
        AttentionMaskInterface.register(name, mask)
    saved = model.config._attn_implementation
    model.config._attn_implementation = name
    try:
        yield
    finally:
        model.config._attn_implementation = saved


def additive_mask_attention(model):
    """`model` with transformers' SDPA attention whose boolean causal mask is made additive (0 or float32's minimum):
    OpenVINO's attention fused to its cache reads a boolean mask on a slow path (SmolLM2's 2,048-token prefill: its
    attention 10.4 s against 2.2 s with the additive mask, the same tokens)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import sdpa_mask

    def sdpa(module, query, key, value, attention_mask, **kwargs):
        import torch

        if attention_mask is not None and attention_mask.dtype == torch.bool:
            attention_mask = torch.where(attention_mask, 0.0, torch.finfo(query.dtype).min)
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    return attention(model, ADDITIVE_MASK_SDPA, sdpa, sdpa_mask)


def layered_export_inputs(shape: CacheShape):
    """wrap_layers' example inputs and dynamic shapes (T in 1..max_seq_len, P in 0..max_seq_len - 1, K in 1..T)."""
    import torch

    tokens = torch.export.Dim("tokens", min=1, max=shape.max_seq_len)
    past = torch.export.Dim("past", min=0, max=shape.max_seq_len - 1)
    kept = torch.export.Dim("kept", min=1, max=shape.max_seq_len)
    layer = (1, shape.kv_heads, 3, shape.head_dim)
    example = (torch.randint(0, shape.vocab, (1, 5)), [torch.zeros(layer) for _ in range(2 * shape.layers)], torch.arange(4))
    return example, ({1: tokens}, [{2: past} for _ in range(2 * shape.layers)], {0: kept})


def save_folder(model, folder: Path) -> None:
    """The model as a save_pretrained folder, with a stand-in tokenizer: the exporters that read a folder (litert-torch,
    onnxruntime-genai's builder) load one and copy it, and edgekit writes the source's own beside the artifact
    (convert_lm), so the model alone is what they take from here."""
    from tokenizers import Tokenizer, models

    with third_party_quiet(), stderr_silenced():  # transformers' shard-writing bar
        model.save_pretrained(folder)
    Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>")).save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))


def export_inputs(shape: CacheShape):
    """Example inputs (distinct tensors: torch.export takes one tensor passed twice for one input) and the dynamic
    shapes: T in 1..max_seq_len, P in 0..max_seq_len - 1."""
    import torch

    tokens = torch.export.Dim("tokens", min=1, max=shape.max_seq_len)
    past = torch.export.Dim("past", min=0, max=shape.max_seq_len - 1)
    cache = (shape.layers, 1, shape.kv_heads, 3, shape.head_dim)
    example = (torch.randint(0, shape.vocab, (1, 5)), torch.zeros(cache), torch.zeros(cache))
    return example, {"input_ids": {1: tokens}, "past_keys": {3: past}, "past_values": {3: past}}


class TorchLM:
    """The reference: the PyTorch model itself behind the KV-cache signature, one step at a time."""

    name = "torch:cpu"

    def __init__(self, model, threads: int | None = None) -> None:
        """`model`: a loaded causal LM, or the ModelSource to load it from."""
        import torch

        if threads:
            torch.set_num_threads(threads)
        self.wrapped = wrap(model if isinstance(model, torch.nn.Module) else load_causal_lm(model))

    def step(self, ids, keys, values):
        import torch

        with torch.no_grad():
            logits, keys, values = self.wrapped(torch.from_numpy(ids), torch.from_numpy(keys), torch.from_numpy(values))
        return logits.numpy(), keys.numpy(), values.numpy()
