"""The language-model metrics on logits whose answers are known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgekit.metrics import language
from edgekit.metrics.gate import Thresholds, check_row, with_default_gates


def _logits(probs: np.ndarray) -> np.ndarray:
    return np.log(probs)


def test_perplexity_of_a_uniform_model_is_the_vocabulary_size():
    ids = np.random.default_rng(0).integers(0, 50, (4, 9))
    logits = np.zeros((4, 9, 50))
    nll = language.token_nll(logits, ids)
    assert nll.shape == (4, 8)
    assert language.perplexity(nll) == pytest.approx(50.0)


def test_nll_reads_the_next_token_of_each_position():
    probs = np.full((1, 3, 4), 0.1)
    probs[0, 0, 2], probs[0, 1, 3] = 0.7, 0.7  # position 0 predicts id 2, position 1 predicts id 3
    ids = np.array([[0, 2, 3]])
    nll = language.token_nll(_logits(probs), ids)
    assert nll[0] == pytest.approx([-math.log(0.7), -math.log(0.7)])


def test_ratio_is_one_with_a_tight_interval_for_the_same_model_and_above_one_for_a_worse():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(16, 12, 30))
    ids = rng.integers(0, 30, (16, 12))
    same, ci = language.perplexity_ratio(language.token_nll(logits, ids), language.token_nll(logits, ids))
    assert same == 1.0 and ci == [1.0, 1.0]
    worse = logits + rng.normal(scale=2.0, size=logits.shape)
    ratio, (lo, hi) = language.perplexity_ratio(language.token_nll(logits, ids), language.token_nll(worse, ids))
    assert ratio > 1.0 and lo < ratio < hi


def test_kl_agreement_and_greedy_match():
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(3, 5, 10))
    assert language.mean_kl(logits, logits) == pytest.approx(0.0, abs=1e-12)
    assert language.mean_kl(logits, logits + 1.0) == pytest.approx(0.0, abs=1e-12)  # a shift changes no distribution
    assert language.mean_kl(logits, -logits) > 0.1
    assert language.top1_agreement(logits, logits) == 1.0
    ref = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    art = np.array([[1, 2, 9, 4], [5, 6, 7, 8]])
    assert language.greedy_match(ref, art) == 7 / 8
    assert language.first_divergence(ref, art) == [2, None]


def test_default_gates_by_precision_and_the_interval_in_the_reason():
    row = {"task": "text-generation", "precision": "int4-weights", "ppl_ratio": 1.08, "ppl_ratio_ci95": [1.06, 1.10], "nonfinite": 0}
    limits = with_default_gates(Thresholds(), True, row)
    assert limits.max_ppl_ratio == 1.03 and limits.max_nonfinite == 0
    failed = [r for r in check_row(row, limits) if not r.passed]
    assert [r.metric for r in failed] == ["perplexity_ratio"]
    fp32 = {"task": "text-generation", "precision": "fp32", "greedy_match": 1.0, "nonfinite": 0}
    assert with_default_gates(Thresholds(), True, fp32).min_greedy_match == 1.0
    assert all(r.passed for r in check_row(fp32, with_default_gates(Thresholds(), True, fp32)))
    straddling = dict(row, ppl_ratio=1.02, ppl_ratio_ci95=[1.00, 1.05])
    ratio_gate = next(r for r in check_row(straddling, limits) if r.metric == "perplexity_ratio")
    assert ratio_gate.passed and "straddles" in ratio_gate.reason
