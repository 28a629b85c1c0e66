"""Train zoo:stdlib-lm, the language model: a small Llama-architecture decoder on the Python standard library.

The text is this interpreter's own standard library (`.py` sources and their docstrings, tests left out), on every
machine. Files are split by a hash of their path: 1 in 10 is held out and never trained on. Writes
edgekit/zoo/data/stdlib_lm.pt (the weights, fp16), stdlib_lm_tokenizer.json (a byte-level BPE tokenizer trained here
on the training files) and stdlib_lm_test.npz (held-out sequences of token ids for validation and the tests) plus
stdlib_lm_test.txt (held-out text, for `-d TEXT`) and stdlib_lm_calib.txt (training text, for `--calib`). Prints the held-out perplexity. About 28 minutes on 2 cores (1200 steps; held-out perplexity 13.34).

    .venv/bin/python scripts/train_stdlib_lm.py [--steps 1200]
"""

from __future__ import annotations

import argparse
import glob
import math
import sysconfig
import time
import zlib
from pathlib import Path

import numpy as np
import torch

from edgekit.zoo.lm import LM_CALIB_TEXT, LM_CONFIG, LM_EVAL, LM_EVAL_TEXT, LM_TOKENIZER, LM_WEIGHTS, build_stdlib_lm

SEQ, BATCH, SEED, VOCAB = 128, 32, 0, 2048
EVAL_SEQUENCES, EVAL_LEN = 64, 128


def stdlib_files() -> tuple[list[Path], list[Path]]:
    """The standard library's sources, split into (training, held out) by a hash of their relative path."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(Path(f) for f in glob.glob(str(root / "**" / "*.py"), recursive=True))
    files = [f for f in files if "site-packages" not in f.parts and not any(p.startswith("test") for p in f.relative_to(root).parts)]
    held = [f for f in files if zlib.crc32(str(f.relative_to(root)).encode()) % 10 == 0]
    return [f for f in files if f not in held], held


def train_tokenizer(files: list[Path]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=["<|endoftext|>"])
    tokenizer.train([str(f) for f in files], trainer)
    return tokenizer


def encode(tokenizer, files: list[Path]) -> np.ndarray:
    eos = tokenizer.token_to_id("<|endoftext|>")
    ids: list[int] = []
    for f in files:
        ids += tokenizer.encode(f.read_text(errors="replace")).ids + [eos]
    return np.asarray(ids, dtype=np.int64)


def perplexity(model, tokens: np.ndarray) -> float:
    model.eval()
    with torch.no_grad():
        x = torch.from_numpy(tokens)
        logits = model(x).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
    model.train()
    return math.exp(loss.item())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1200)
    args = parser.parse_args()
    torch.manual_seed(SEED)
    torch.set_num_threads(2)
    train_files, held_files = stdlib_files()
    tokenizer = train_tokenizer(train_files)
    assert tokenizer.get_vocab_size() == LM_CONFIG["vocab_size"], tokenizer.get_vocab_size()
    train_ids, held_ids = encode(tokenizer, train_files), encode(tokenizer, held_files)
    print(f"{len(train_files)} training files ({len(train_ids)} tokens), {len(held_files)} held out ({len(held_ids)} tokens)")
    rng = np.random.default_rng(SEED)
    starts = rng.choice(len(held_ids) - EVAL_LEN, EVAL_SEQUENCES, replace=False)
    held_seqs = np.stack([held_ids[s : s + EVAL_LEN] for s in sorted(starts)])
    model = build_stdlib_lm(weights=False)
    print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters")
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.95), weight_decay=0.1)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-3, total_steps=args.steps, pct_start=0.05)
    start = time.perf_counter()
    for step in range(args.steps):
        idx = rng.integers(0, len(train_ids) - SEQ - 1, BATCH)
        x = torch.from_numpy(np.stack([train_ids[i : i + SEQ] for i in idx]))
        loss = model(x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 100 == 0 or step == args.steps - 1:
            print(
                f"step {step} loss {loss.item():.3f} held-out ppl {perplexity(model, held_seqs):.2f} {time.perf_counter() - start:.0f}s",
                flush=True,
            )
    print(f"trained in {time.perf_counter() - start:.0f}s; held-out perplexity {perplexity(model, held_seqs):.2f}")
    torch.save({k: v.half() for k, v in model.state_dict().items() if k != "lm_head.weight"}, LM_WEIGHTS)  # tied to the embedding
    tokenizer.save(str(LM_TOKENIZER))
    np.savez_compressed(LM_EVAL, input_ids=held_seqs)
    write_texts(train_files, held_files)


def write_texts(train_files: list[Path], held_files: list[Path]) -> None:
    """40 kB of held-out text (validation from text) and 40 kB of training text (calibration: AWQ, scale estimation)."""
    LM_EVAL_TEXT.write_text("".join(f.read_text(errors="replace") for f in held_files[:8])[:40_000])
    rng = np.random.default_rng(SEED)
    picked = [train_files[i] for i in sorted(rng.choice(len(train_files), 12, replace=False))]
    LM_CALIB_TEXT.write_text("".join(f.read_text(errors="replace")[:4_000] for f in picked))


if __name__ == "__main__":
    main()
