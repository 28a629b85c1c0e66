"""zoo:stdlib-lm: a small Llama-architecture decoder trained here on the Python standard library.

Built with transformers (LlamaForCausalLM from a config, no hub access), trained by scripts/train_stdlib_lm.py; its
fp16 weights, byte-level BPE tokenizer and held-out token sequences are committed under edgekit/zoo/data/.
Imported only where torch is used.
"""

from __future__ import annotations

from edgekit.zoo.fashion_mnist import DATA_DIR

LM_WEIGHTS = DATA_DIR / "stdlib_lm.pt"
LM_TOKENIZER = DATA_DIR / "stdlib_lm_tokenizer.json"
LM_EVAL = DATA_DIR / "stdlib_lm_test.npz"  # held-out `input_ids` [64, 128] (files the model never saw)
LM_EVAL_TEXT = DATA_DIR / "stdlib_lm_test.txt"  # held-out source text, for validation from text with the tokenizer
LM_CALIB_TEXT = DATA_DIR / "stdlib_lm_calib.txt"  # training text: calibration of data-aware int4 (AWQ, scale estimation)
# Grouped-query attention (4 query heads, 2 key/value heads), RoPE, SwiGLU, RMSNorm, tied embeddings: the Llama/Qwen
# layout at 3.9 M parameters. Widths are multiples of 128 so int4 group size 128 differs from per-channel.
LM_CONFIG = dict(
    vocab_size=2048,
    hidden_size=256,
    intermediate_size=768,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    tie_word_embeddings=True,
    bos_token_id=0,
    eos_token_id=0,
    pad_token_id=0,
)


def build_stdlib_lm(weights: bool = True):
    """The zoo LM in fp32, eval mode, with its trained weights (or freshly initialised for training)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**LM_CONFIG, attn_implementation="sdpa"))
    if weights:
        model.load_state_dict(torch.load(LM_WEIGHTS, map_location="cpu", weights_only=True), strict=False)
        model.tie_weights()
        model.eval()
    return model


def stdlib_lm():
    """Factory for `edgekit.zoo.lm:stdlib_lm` (zoo:stdlib-lm)."""
    return build_stdlib_lm()
