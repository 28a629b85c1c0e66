"""The zoo's language model (zoo:stdlib-lm, trained here) written as users hold real ones: a transformers
save_pretrained folder with its tokenizer, and a GGUF file as llama.cpp's converter writes one (Llama tensor names, the
query/key rows permuted for its RoPE layout, a byte-level BPE tokenizer), quantized to Q8_0 or Q4_1 with gguf-py."""

from __future__ import annotations

import functools
import json
from pathlib import Path

GGUF_NAMES = {  # transformers' Llama names -> llama.cpp's, per layer
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}


def write_pretrained_folder(folder: Path) -> Path:
    """zoo:stdlib-lm as save_pretrained writes it (config.json, safetensors) with its tokenizer files."""
    from transformers import PreTrainedTokenizerFast

    from edgekit.zoo.lm import LM_TOKENIZER, build_stdlib_lm

    build_stdlib_lm().save_pretrained(folder)
    PreTrainedTokenizerFast(tokenizer_file=str(LM_TOKENIZER), eos_token="<|endoftext|>").save_pretrained(folder)
    return folder


def write_gguf(path: Path, quantization: str = "Q8_0") -> Path:
    """zoo:stdlib-lm as a GGUF file whose 2-D weights are quantized to `quantization` (a gguf-py type name)."""
    import gguf

    from edgekit.zoo.lm import LM_CONFIG, LM_TOKENIZER, build_stdlib_lm

    model = build_stdlib_lm()
    weights = {k: v.float().numpy() for k, v in model.state_dict().items()}
    qtype = gguf.GGMLQuantizationType[quantization]
    writer = gguf.GGUFWriter(str(path), "llama")
    _write_config(writer, model.config, LM_CONFIG, gguf.LlamaFileType[f"MOSTLY_{quantization}"])
    _write_tokenizer(writer, json.loads(Path(LM_TOKENIZER).read_text()), gguf)
    for name, gguf_name in _tensor_names(LM_CONFIG["num_hidden_layers"]).items():
        array = weights[name]
        if "q_proj" in name or "k_proj" in name:
            heads = LM_CONFIG["num_attention_heads"] if "q_proj" in name else LM_CONFIG["num_key_value_heads"]
            array = _permuted(array, heads)
        if array.ndim == 2:
            packed = gguf.quants.quantize(array, qtype)
            writer.add_tensor(gguf_name, packed, raw_shape=packed.shape, raw_dtype=qtype)
        else:
            writer.add_tensor(gguf_name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _write_config(writer, config, declared: dict, file_type) -> None:
    writer.add_name("stdlib-lm")
    writer.add_context_length(declared["max_position_embeddings"])
    writer.add_embedding_length(declared["hidden_size"])
    writer.add_block_count(declared["num_hidden_layers"])
    writer.add_feed_forward_length(declared["intermediate_size"])
    writer.add_head_count(declared["num_attention_heads"])
    writer.add_head_count_kv(declared["num_key_value_heads"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_vocab_size(declared["vocab_size"])
    writer.add_file_type(file_type)


def _write_tokenizer(writer, tokenizer: dict, gguf) -> None:
    vocab = tokenizer["model"]["vocab"]
    tokens = sorted(vocab, key=vocab.get)
    special = {t["content"] for t in tokenizer.get("added_tokens", []) if t.get("special")}
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens])
    writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in tokenizer["model"]["merges"]])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(0)
    writer.add_add_bos_token(False)


def _tensor_names(layers: int) -> dict[str, str]:
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
    for i in range(layers):
        names |= {f"model.layers.{i}.{ours}.weight": f"blk.{i}.{theirs}.weight" for ours, theirs in GGUF_NAMES.items()}
    return names


def _permuted(weight, heads: int):
    """The rows of a query/key projection in llama.cpp's RoPE order (its converter's permute; transformers undoes it)."""
    return weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


@functools.cache
def large_random_lm():
    """A Llama of 2.3 GB in fp32 with seeded random weights, almost all of it a 270,000 x 2,048 embedding (tied to the
    head) and one thin layer: past the 2 GB a protobuf holds, cheap to run. The factory `tests.lm_files:large_random_lm`.

    Built once per process (the test clears it after): convert and validate each build it and check that a second
    build is the same, four builds of 2.3 GB (30 s of the test's 130 s on a 2-core Zen 3). Uniform weights of
    normal(0, 0.02)'s spread: drawn twice as fast. Tied again after to_empty, which unties: untied, the head was a
    second 2.2 GB matrix that doubled the export (152 s -> 79 s for the test, 2-core Zen 3)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=270_000, hidden_size=2048, intermediate_size=64, num_hidden_layers=1, num_attention_heads=16,
        num_key_value_heads=1, tie_word_embeddings=True, max_position_embeddings=256,
    )  # fmt: skip
    torch.manual_seed(0)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    model = model.to_empty(device="cpu")
    model.tie_weights()  # to_empty gives each module its own tensor: the head would be a second 2.2 GB matrix
    for parameter in model.parameters():  # std 0.02 as transformers initializes, without its slow per-module init
        torch.nn.init.uniform_(parameter, -0.035, 0.035) if parameter.ndim > 1 else torch.nn.init.ones_(parameter)
    model.model.rotary_emb.__init__(config)  # its inv_freq buffer, which to_empty left unset
    return model.eval()
