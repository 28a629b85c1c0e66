"""A language model judged the way its users judge it: perplexity, next-token agreement, greedy decoding.

Numpy only. The artifact and its reference are read on the same token sequences: `logits` [N, T, V] of a
full-sequence pass (each position's distribution over the next token), `greedy` [N, n] tokens decoded
greedily from the same prompts through the KV cache (so the cache path is judged, not only one forward).
"""

from __future__ import annotations

import numpy as np

BOOTSTRAP = 2000  # resamples of the sequences for the perplexity ratio's interval
SEED = 0


def token_nll(logits: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Negative log-likelihood [N, T-1] of each next token: position t's logits predict ids[:, t + 1]."""
    logp = log_softmax(np.asarray(logits[:, :-1], np.float64))
    return -np.take_along_axis(logp, np.asarray(ids)[:, 1:, None], axis=-1)[..., 0]


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def perplexity(nll: np.ndarray) -> float:
    return float(np.exp(np.mean(nll)))


def perplexity_ratio(nll_reference: np.ndarray, nll_artifact: np.ndarray) -> tuple[float, list[float]]:
    """The artifact's perplexity over the reference's, and its 95% interval from a paired bootstrap over sequences
    (both models read the same sequences, so a sequence's difficulty cancels out)."""
    per_sequence = np.mean(nll_artifact, axis=1) - np.mean(nll_reference, axis=1)
    ratio = float(np.exp(np.mean(per_sequence)))
    rng = np.random.default_rng(SEED)
    draws = rng.integers(0, len(per_sequence), (BOOTSTRAP, len(per_sequence)))
    lo, hi = np.exp(np.percentile(per_sequence[draws].mean(axis=1), [2.5, 97.5]))
    return ratio, [float(lo), float(hi)]


def mean_kl(logits_reference: np.ndarray, logits_artifact: np.ndarray) -> float:
    """Mean KL(reference || artifact) of the next-token distributions, in nats."""
    p = log_softmax(np.asarray(logits_reference, np.float64))
    q = log_softmax(np.asarray(logits_artifact, np.float64))
    return float(np.mean(np.sum(np.exp(p) * (p - q), axis=-1)))


def top1_agreement(logits_reference: np.ndarray, logits_artifact: np.ndarray) -> float:
    """Share of positions where both models' most likely next token is the same."""
    return float(np.mean(np.argmax(logits_reference, -1) == np.argmax(logits_artifact, -1)))


def greedy_match(reference_tokens: np.ndarray, artifact_tokens: np.ndarray) -> float:
    """Share of the greedily generated tokens equal to the reference's at the same position of the same prompt."""
    return float(np.mean(np.asarray(reference_tokens) == np.asarray(artifact_tokens)))


def first_divergence(reference_tokens: np.ndarray, artifact_tokens: np.ndarray) -> list[int | None]:
    """Per prompt, the index of the first generated token that differs (None where all agree)."""
    differ = np.asarray(reference_tokens) != np.asarray(artifact_tokens)
    return [int(np.argmax(row)) if row.any() else None for row in differ]


def compare_lm(ids: np.ndarray, ref_logits: np.ndarray, art_logits: np.ndarray, ref_greedy: np.ndarray, art_greedy: np.ndarray) -> dict:
    """Every language-model metric of an artifact against its reference on the same sequences and prompts."""
    nll_ref, nll_art = token_nll(ref_logits, ids), token_nll(art_logits, ids)
    ratio, ci = perplexity_ratio(nll_ref, nll_art)
    divergence = first_divergence(ref_greedy, art_greedy)
    return {
        "sequences": int(len(ids)),
        "tokens": int(nll_ref.size),
        "perplexity_reference": perplexity(nll_ref),
        "perplexity": perplexity(nll_art),
        "ppl_ratio": ratio,
        "ppl_ratio_ci95": ci,
        "kl": mean_kl(ref_logits, art_logits),
        "top1_agreement": top1_agreement(ref_logits, art_logits),
        "greedy_match": greedy_match(ref_greedy, art_greedy),
        "greedy_prompts": int(len(ref_greedy)),
        "greedy_tokens": int(np.asarray(ref_greedy).shape[1]),
        "greedy_diverged": sum(d is not None for d in divergence),
    }
