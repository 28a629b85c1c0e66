import math
from dataclasses import replace

import numpy as np
import pytest

from edgekit.errors import InputMismatchError
from edgekit.metrics.compare import accuracy_percent, compare, compare_output, paired_accuracy
from edgekit.metrics.gate import DEFAULT_GATES, Thresholds, check_row, compare_latency, failures, fmt_against, with_default_gates
from edgekit.metrics.latency import LatencyStats
from edgekit.source import open_source
from edgekit.validation.benchmark import BenchSettings, bench, bench_in_process
from edgekit.validation.validate import summary_row


def test_identical_outputs_are_perfect():
    x = np.random.default_rng(0).normal(size=(50, 10)).astype(np.float32)
    f = compare_output("logits", x, x.copy())
    assert f.max_abs == 0 and f.cosine_min == 1.0 and math.isinf(f.snr_db) and f.snr_db > 0 and f.top1_agreement == 100.0
    close = compare_output("logits", x, x * np.float32(1 + 1e-6))  # cosine rounds to 1.0 in float64; still not perfect
    assert close.cosine_mean < 1.0 and close.max_abs > 0


def test_garbage_cannot_look_perfect():
    ref = np.random.default_rng(2).normal(size=(8, 10))
    zero = compare_output("y", ref, np.zeros_like(ref))
    assert zero.cosine_mean == 0.0 and zero.cosine_min == 0.0 and zero.nonfinite == 0 and zero.snr_db == pytest.approx(0.0)
    nan = ref.copy()
    nan[:2] = np.nan
    broken = compare_output("y", ref, nan)
    assert broken.nonfinite == 20 and broken.cosine_min == 0.0 and broken.snr_db == -math.inf and broken.top1_agreement == 75.0
    assert compare_output("y", np.zeros((3, 4)), np.zeros((3, 4))).cosine_min == 1.0  # identical zeros are identical


def test_non_finite_outputs_fail_every_fidelity_gate():
    row = _row(nonfinite=5, nonfinite_outputs={"logits": 5}, snr_db=30.0)
    limits = Thresholds(max_drop=0.5, min_cosine=0.99, min_agreement=98.0, min_snr_db=10.0, max_p50_ms=2)
    failed = failures(check_row(row, limits))
    assert [f.metric for f in failed] == ["accuracy_drop", "cosine", "top1_agreement", "snr_db"]
    assert all("5 non-finite value(s) in the artifact's outputs ('logits': 5)" in f.reason for f in failed)


def test_a_failure_prints_the_digits_that_differ_from_its_limit():
    (failed,) = failures(check_row(_row(cosine=0.99999986), Thresholds(min_cosine=0.9999999)))
    assert failed.reason == "cosine 0.99999986, at least 0.9999999 allowed"
    assert fmt_against(0.25, 0.25) == ("0.25", "0.25") and fmt_against(1.23456, 2.0) == ("1.235", "2")
    assert fmt_against(0.99993, 0.99999) == ("0.9999", "0.99999") and fmt_against(0.99999994, 0.9999999)[0] == "1"


def test_default_gates_apply_unless_the_user_sets_fidelity_thresholds():
    assert with_default_gates(Thresholds()) == replace(DEFAULT_GATES, max_nonfinite=0)
    assert with_default_gates(Thresholds(min_cosine=0.5)) == Thresholds(min_cosine=0.5, max_nonfinite=0)
    assert with_default_gates(Thresholds(max_p50_ms=3)) == replace(DEFAULT_GATES, max_p50_ms=3, max_nonfinite=0)
    assert with_default_gates(Thresholds(), default_gates=False) == Thresholds()


def test_noise_gives_the_expected_snr_and_cosine():
    rng = np.random.default_rng(1)
    ref = rng.normal(size=(2000, 10))
    f = compare_output("y", ref, ref + rng.normal(scale=0.1, size=ref.shape))
    assert f.snr_db == pytest.approx(20.0, abs=0.3)  # signal power 1, noise power 0.01
    assert 0.99 < f.cosine_mean < 1.0 and f.top1_agreement < 100.0


def test_flipped_predictions_lower_agreement_and_accuracy():
    ref = np.eye(4)[[0, 1, 2, 3]]
    art = np.eye(4)[[0, 1, 3, 2]]
    assert compare_output("p", ref, art).top1_agreement == 50.0
    assert accuracy_percent(art, np.array([0, 1, 2, 3])) == 50.0


def test_flips_are_told_apart_from_near_ties_to_confident_answers():
    # logits: a near-tie that flips, a sure answer that stays, a sure answer that flips, a near-tie that stays
    ref = np.array([[2.0, 1.9, 0.0], [5.0, 0.0, 0.0], [0.0, 6.0, 0.0], [1.0, 1.2, 0.0]])
    art = np.array([[1.9, 2.0, 0.0], [5.0, 0.0, 0.0], [6.0, 0.0, 0.0], [1.0, 1.3, 0.0]])
    f = compare_output("logits", ref, art)
    assert (f.top1_agreement, f.top1_flips, f.confident_samples, f.top1_agreement_confident) == (50.0, 2, 2, 50.0)
    sure = np.exp(ref[2]) / np.exp(ref[2]).sum()
    assert f.flip_margin_max == pytest.approx(sure[1] - sure[0])  # the sure answer's margin, not the near-tie's
    assert [(c["sample"], c["reference_top1"], c["artifact_top1"]) for c in f.top1_changes] == [(2, 1, 0), (0, 0, 1)]  # surest first
    assert f.top1_changes[0]["reference_margin"] == f.flip_margin_max > f.top1_changes[1]["reference_margin"]
    near_tie_only = compare_output("logits", ref[:2], art[:2])
    assert near_tie_only.top1_flips == 1 and near_tie_only.flip_margin_max < 0.05
    probabilities = np.array([[0.2, 0.19, 0.61], [0.5, 0.25, 0.25], [0.2, 0.6, 0.2], [0.3, 0.4, 0.3]])  # read as they are
    as_probabilities = compare_output("p", probabilities, art)
    assert as_probabilities.flip_margin_max == pytest.approx(0.61 - 0.2) and as_probabilities.confident_samples == 3
    assert compare_output("p", np.eye(3), np.eye(3)).flip_margin_max is None
    sure = np.eye(30)[np.arange(60) % 30] * np.arange(1, 61)[:, None] / 10  # the higher the sample, the surer the reference
    many = compare_output("p", sure, np.eye(30)[(np.arange(60) + 1) % 30])
    assert many.top1_flips == 60 and [c["sample"] for c in many.top1_changes] == list(range(59, 39, -1))  # the 20 surest


def test_the_expected_top1_drop_weighs_each_change_by_the_reference_probabilities():
    ref = np.array([[2.0, 1.9, 0.0], [5.0, 0.0, 0.0], [0.0, 6.0, 0.0], [1.0, 1.2, 0.0]])
    art = np.array([[1.9, 2.0, 0.0], [5.0, 0.0, 0.0], [6.0, 0.0, 0.0], [1.0, 1.3, 0.0]])
    p = np.exp(ref) / np.exp(ref).sum(1, keepdims=True)
    near_tie, sure = p[0, 0] - p[0, 1], p[2, 1] - p[2, 0]
    f = compare_output("logits", ref, art)
    assert f.expected_top1_drop == pytest.approx((near_tie + sure) / 4 * 100)
    near_tie_only = compare_output("logits", ref[:2], art[:2]).expected_top1_drop
    assert near_tie_only == pytest.approx(near_tie / 2 * 100) and near_tie_only < 2.5  # a flipped near-tie costs its margin
    assert compare_output("logits", ref, ref).expected_top1_drop == 0.0
    broken = art.copy()
    broken[1, 2] = np.nan  # a broken answer is worth nothing: its sample costs the reference's whole top probability
    assert compare_output("logits", ref, broken).expected_top1_drop == pytest.approx((near_tie + sure + p[1, 0]) / 4 * 100)
    assert compare_output("x", ref[:, :1], art[:, :1]).expected_top1_drop is None  # not class scores


def test_a_row_takes_its_top1_figures_from_one_output():
    # two class-score heads: one flips a near-tie of four, the other a sure answer of two; the row's sentence must
    # not join one head's flip count to the other's margin
    ref = np.array([[2.0, 1.9, 0.0], [5.0, 0.0, 0.0], [0.0, 6.0, 0.0], [1.0, 1.2, 0.0]])
    near_tie = compare_output("a", ref, np.array([[1.9, 2.0, 0.0], [5.0, 0.0, 0.0], [0.0, 6.0, 0.0], [1.0, 1.3, 0.0]]))
    sure = compare_output("b", ref[1:3], np.array([[5.0, 0.0, 0.0], [6.0, 0.0, 0.0]]))
    row = summary_row({"fidelity": [near_tie.to_dict(), sure.to_dict()]})
    assert (row["top1_agreement"], row["top1_flips"], row["confident_samples"]) == (50.0, 1, 2)
    assert (row["flip_margin_max"], row["top1_agreement_confident"]) == (sure.flip_margin_max, 50.0)
    assert row["top1_agreement_ci95"] == sure.top1_agreement_ci95
    assert summary_row({"fidelity": [near_tie.to_dict()]})["flip_margin_max"] == near_tie.flip_margin_max < 0.05


def test_compare_rejects_shape_changes():
    from edgekit.errors import EdgekitError

    with pytest.raises(EdgekitError, match="output 'y'"):
        compare([np.zeros((2, 3))], [np.zeros((2, 4))], ["y"])


def _row(**values):
    base = {
        "precision": "int8",
        "drop_points": 0.2,
        "drop_relative": 0.2,
        "cosine": 0.999,
        "top1_agreement": 99.0,
        "p50_ms": 1.0,
        "p90_ms": 1.2,
        "size_mb": 0.1,
        "speedup": 2.0,
        "npu_fallback": None,
    }
    return {**base, **values}


def test_gate_reports_each_missed_threshold():
    limits = Thresholds(max_drop=0.5, min_cosine=0.99, min_agreement=98.0, max_p50_ms=2, max_size_mb=1, min_speedup=1.5)
    assert failures(check_row(_row(), limits)) == []
    bad = _row(drop_points=1.5, cosine=0.9, top1_agreement=90.0, p50_ms=3.0, speedup=1.1)
    assert [f.metric for f in failures(check_row(bad, limits))] == ["accuracy_drop", "cosine", "top1_agreement", "p50_ms", "speedup"]
    missing = failures(check_row(_row(drop_points=None), Thresholds(max_drop=1)))
    assert missing[0].value is None and "not measured" in missing[0].reason
    assert check_row(_row(precision="fp32", speedup=1.0), Thresholds(min_speedup=1.5)) == []  # speed-up gates quantized rows


def test_reports_alone_flag_only_a_change_beyond_their_recorded_spread(fashion_onnx):
    source = open_source(str(fashion_onnx["fp32"]))
    runs = [bench_in_process(source, BenchSettings(threads=1, warmup=5, runs=60)).times_ms for _ in range(2)]
    same = compare_latency(runs[1], runs[0])
    assert not same["regressed"] and same["verdict"] == "INCONCLUSIVE" and "cannot tell a 10% regression" in same["reason"]
    factor = 1.2 * max(runs[0]) / min(runs[1])  # slower than the whole recorded spread
    slower = compare_latency([t * factor for t in runs[1]], runs[0])
    assert slower["regressed"] and slower["verdict"] == "REGRESSION" and slower["ratio"] > 1.1
    rng = np.random.default_rng(0)
    noisy_old, noisy_new = rng.lognormal(0, 0.5, 40), rng.lognormal(0.3, 0.5, 40)
    assert not compare_latency(list(noisy_new), list(noisy_old))["regressed"]  # 35% inside a wide spread is not flagged


def test_latency_stats_percentiles():
    stats = LatencyStats.from_times(np.arange(1, 101, dtype=float), batch=4)
    assert (stats.p50, stats.min, stats.max, stats.runs) == (50.5, 1.0, 100.0, 100)
    assert stats.p90 == pytest.approx(90.1) and stats.throughput == pytest.approx(4000 / 50.5)


def test_bench_runs_in_a_fresh_process_with_recorded_threads(fashion_onnx):
    source = open_source(str(fashion_onnx["fp32"]))
    result = bench(source, BenchSettings(threads=1, batch=2, warmup=2, runs=15))
    assert result.threads == 1 and result.target == "onnxruntime:cpu" and result.latency.batch == 2
    assert len(result.times_ms) == 15 and result.latency.min <= result.latency.p50 <= result.latency.p99
    assert result.peak_rss_mb > 10 and result.size_bytes == source.path.stat().st_size
    assert bench_in_process(source, BenchSettings(threads=1, warmup=0, runs=3)).latency.runs == 3


def test_a_spawned_process_that_dies_gives_one_clear_error():
    """A process that ends with neither a result nor an exception (killed, out of memory, or a script without a
    `__main__` guard running again in it) is one EdgekitError naming the guard, not BrokenProcessPool's traceback."""
    import os

    from edgekit.errors import EdgekitError
    from edgekit.machine import in_fresh_process

    with pytest.raises(EdgekitError, match="ended before it finished") as caught:
        in_fresh_process(os._exit, 3)
    assert 'if __name__ == "__main__":' in caught.value.hint


def test_accuracy_drop_and_agreement_carry_a_paired_interval():
    from edgekit.metrics.compare import bootstrap_ci95, paired_accuracy

    labels = np.arange(1000) % 10
    ref = np.eye(10)[labels]
    art = ref.copy()
    art[:20] = np.eye(10)[(labels[:20] + 1) % 10]  # 20 of 1,000 samples now wrong: a 2-point drop
    acc = paired_accuracy(ref, art, labels)
    assert acc["drop_points"] == pytest.approx(2.0) and acc["discordant"] == 20
    low, high = acc["drop_ci95"]
    assert 0.9 < low < 2.0 < high < 3.2  # paired: the binomial spread of 20 discordant samples, about +-0.9
    assert bootstrap_ci95(np.full(50, 100.0)) == [100.0, 100.0]
    agree = compare_output("p", ref, art, classification=True)
    assert agree.top1_agreement == 98.0 and agree.top1_agreement_ci95[0] < 98.0 < agree.top1_agreement_ci95[1]


def test_accuracy_names_the_classes_that_lost_most():
    labels = np.array([0, 0, 0, 0, 1, 1, 1, 2, 2, 2, -1])  # -1: no class
    ref = np.eye(3)[[0, 0, 0, 1, 1, 1, 1, 2, 2, 0, 0]]
    art = np.eye(3)[[1, 1, 0, 0, 1, 1, 0, 2, 2, 2, 1]]  # class 0: 2 lost, 1 gained; class 1: 1 lost; class 2: 1 gained
    lost = paired_accuracy(ref, art, labels)["classes_lost"]
    assert [(r["class"], r["samples"], r["lost"], r["gained"]) for r in lost] == [(0, 4, 2, 1), (1, 3, 1, 0)]
    assert (lost[0]["reference"], lost[0]["artifact"]) == (75.0, 50.0)
    assert paired_accuracy(ref, art, np.eye(3, dtype=bool)[labels.clip(0)])["classes_lost"] is None  # label sets: no one class


def test_label_sets_count_any_of_their_classes_as_right():
    from edgekit.metrics.compare import accuracy_percent, paired_accuracy

    sets = np.zeros((5, 5), bool)
    sets[0, [1, 2]] = sets[1, 3] = sets[2, [0, 4]] = sets[3, 2] = True  # ImageNet-ReaL-style: several classes may be right
    ref, art = np.eye(5)[[2, 3, 1, 2, 0]], np.eye(5)[[1, 0, 4, 2, 0]]  # ref: right, right, wrong, right; art: right, wrong, right, right
    acc = paired_accuracy(ref, art, sets)  # the 5th sample's set is empty: left out, as ReaL leaves out unlabelled images
    assert (acc["reference"], acc["artifact"], acc["drop_points"], acc["discordant"], acc["samples"]) == (75.0, 75.0, 0.0, 2, 4)
    assert accuracy_percent(art, sets) == 75.0 and accuracy_percent(art[:4], np.array([1, 0, 0, 2])) == 75.0  # one class each
    with pytest.raises(InputMismatchError, match="the label sets name 5 classes, the model's output scores 3"):
        paired_accuracy(ref[:, :3], art[:, :3], sets)
    narrow = sets[:, :3]  # as a class index below the class count: the classes past its width are never right
    assert accuracy_percent(art, narrow) == accuracy_percent(art, np.pad(narrow, ((0, 0), (0, 2)))) == pytest.approx(200 / 3)


def test_a_gate_says_when_its_interval_straddles_the_limit():
    row = _row(drop_points=0.4, drop_points_ci95=[0.1, 0.7], samples=2000)
    (result,) = check_row(row, Thresholds(max_drop=0.5))
    assert result.passed and "the 95% CI 0.1 to 0.7 straddles the limit: about 18,000 samples would settle it" in result.reason
    (clear,) = check_row(_row(drop_points=0.1, drop_points_ci95=[0.0, 0.2], samples=2000), Thresholds(max_drop=0.5))
    assert "straddles" not in clear.reason


def test_a_missed_agreement_limit_says_which_answers_changed():
    row = _row(top1_agreement=96.33, top1_flips=22, flip_margin_max=0.049, top1_agreement_confident=100.0, confident_samples=184)
    (missed,) = check_row(row, Thresholds(min_agreement=97))
    assert not missed.passed and missed.reason.endswith(
        "; 22 top-1 answers changed where the reference's top-1 led its top-2 by at most 0.049 of probability; "
        "100.00% agree on the 184 samples the reference gives >= 50%"
    )
    (met,) = check_row(row, Thresholds(min_agreement=96))
    assert met.passed and "margin" not in met.reason
    (priced,) = check_row({**row, "expected_top1_drop": 0.044}, Thresholds(min_agreement=97))
    assert "0.049 of probability, an expected 0.044 points of top-1 by the reference's own probabilities; 100.00%" in priced.reason
    (tiny,) = check_row({**row, "expected_top1_drop": 2.8e-6}, Thresholds(min_agreement=97))
    assert "an expected under 0.001 points of top-1" in tiny.reason


def test_p99_is_reported_for_what_it_is():
    assert (
        LatencyStats.from_times(np.arange(1, 101, dtype=float), batch=1).tail_note
        == "p99 from 100 runs is the maximum; 1000+ runs for a p99"
    )
    assert "among the 3 slowest" in LatencyStats.from_times(np.arange(1, 301, dtype=float), batch=1).tail_note
    assert LatencyStats.from_times(np.arange(1, 1001, dtype=float), batch=1).tail_note is None


def _rounds(*ratios, aa=0.01):
    return [{"ratio": r, "aa": aa, "bb": aa, "busy": False} for r in ratios]


def test_rounds_decide_regression_same_or_inconclusive():
    from edgekit.validation.regression import decide

    assert decide(_rounds(1.0, 1.01, 0.99), 0.10)["verdict"] == "SAME"
    regression = decide(_rounds(1.30, 1.28, 1.31), 0.10)
    assert regression["verdict"] == "REGRESSION" and regression["ci95"][0] > 1.2
    assert decide(_rounds(1.0, 1.4, 0.8), 0.10)["verdict"] == "INCONCLUSIVE"  # the rounds disagree: more are needed
    assert decide(_rounds(1.12, 1.13, 1.12), 0.20)["verdict"] == "SAME"  # slower, but by less than the tolerance


def test_a_tolerance_inside_the_aa_spread_is_refused():
    from edgekit.errors import EdgekitError
    from edgekit.validation.regression import _refuse_small_tolerance, aa_spread

    spread = aa_spread(_rounds(1.0, 1.0, 1.0, aa=0.06))
    assert spread == pytest.approx(0.0618, abs=1e-3)
    with pytest.raises(EdgekitError, match="below the A/A spread") as info:
        _refuse_small_tolerance(0.05, spread)
    assert "--tolerance 0.07" in info.value.hint
    _refuse_small_tolerance(0.07, spread)  # beyond the spread: accepted
    from edgekit.validation.regression import _settled, decide

    # retime() adds rounds until the verdict is settled, and refuses a tolerance inside the noise only at the cap
    regression = decide(_rounds(1.33, 1.35, 1.31, aa=0.06), 0.10)
    assert regression["verdict"] == "REGRESSION" and _settled(regression, 0.05, spread)  # x1.33 is beyond the noise
    same = decide(_rounds(1.00, 1.01, 0.99, aa=0.06), 0.05)
    assert same["verdict"] == "SAME" and not _settled(same, 0.05, spread)  # a 5% tolerance inside 6.2% noise
    assert _settled(decide(_rounds(1.00, 1.01, 0.99, aa=0.06), 0.10), 0.10, spread)
    assert not _settled(decide(_rounds(1.02, 1.25, 0.95, aa=0.06), 0.10), 0.10, spread)  # INCONCLUSIVE
    small = decide(_rounds(1.02, 1.02, 1.02, aa=0.06), 0.001)  # an order effect of 2% against a 0.1% tolerance
    assert small["verdict"] == "REGRESSION" and not _settled(small, 0.001, spread)
    same_file = decide(_rounds(1.012, 1.016, 1.013, aa=0.01), 0.0001)  # the same artifact: an order effect past 1x
    assert same_file["verdict"] == "REGRESSION" and not _settled(same_file, 0.0001, aa_spread(_rounds(1, 1, 1, aa=0.01)))
    assert _settled(decide(_rounds(1.03, 1.03, 1.03, aa=0.01), 0.0001), 0.0001, 0.01)  # 3% is past twice the 1% noise
    faster = decide(_rounds(0.97, 0.98, 0.97, aa=0.06), 0.0001)  # SAME against a 0.01% tolerance: only order effects
    assert faster["verdict"] == "SAME" and not _settled(faster, 0.0001, spread)


def test_a_regression_needs_the_fastest_processes_to_agree():
    """Each side's per-round value (the faster of its two processes): a new artifact slower in every round's pair but
    whose fastest process matches the baseline's fastest lost a speed-mode lottery; it is not a REGRESSION yet."""
    from edgekit.validation.regression import decide

    sides = ((0.075, 0.077), (0.087, 0.122), (0.087, 0.121), (0.086, 0.122))  # (a, b): B's fast process in round 1
    lottery = [{"ratio": b / a, "a": a, "b": b, "aa": 0.01, "bb": 0.01} for a, b in sides]
    rounds_alone = [{k: v for k, v in r.items() if k not in ("a", "b")} for r in lottery]
    assert decide(rounds_alone, 0.10)["verdict"] == "REGRESSION"  # x1.30 in the rounds, 95% CI above 1
    assert decide(lottery, 0.10)["verdict"] == "INCONCLUSIVE"  # yet its fastest process ran at the baseline's speed
    slower = [{"ratio": 1.3, "a": a, "b": a * 1.3, "aa": 0.01, "bb": 0.01} for a in (0.08, 0.09, 0.081)]
    assert decide(slower, 0.10)["verdict"] == "REGRESSION"


def test_machine_state_is_recorded_with_each_run():
    from edgekit.validation.regression import machine_state

    state = machine_state()
    assert set(state) == {"load1", "governor", "temperature_c", "busy"} and isinstance(state["busy"], bool)


def test_a_round_timed_under_interference_is_set_aside():
    """A neighbour whose load changes inside a round, steal, or an A/A spread far beyond the counted rounds' sets the
    round aside; a neighbour that holds the cores alike through the round (a constant hog) does not."""
    import os

    from edgekit.validation.regression import _neighbours, interference

    quiet = _rounds(1.0, 1.01, 0.99)
    assert interference({**_rounds(1.0)[0], "others_change": 0.02, "steal": 0.0}, quiet, 0.10) is None  # constant hog
    assert "moved by 40%" in interference({**_rounds(1.3)[0], "others_change": 0.40, "steal": 0.0}, quiet, 0.10)
    assert "stole 8%" in interference({**_rounds(1.0)[0], "others_change": 0.0, "steal": 0.08}, quiet, 0.10)
    jumped = {"ratio": 1.2, "aa": 0.18, "bb": 0.01}
    assert "A/A spread 20%" in interference(jumped, quiet, 0.10)
    assert interference(jumped, quiet[:1], 0.10) is None  # too few counted rounds to know what is typical
    assert interference({**jumped, "aa": 0.04}, quiet, 0.10) is None  # within half the tolerance
    # /proc/stat deltas: 1000 jiffies, 200 idle, 50 stolen, this process 3 s at 100 jiffies/s -> others 450
    window = _neighbours((10_000, 5_000, 100), (11_000, 5_200, 150), 300 / os.sysconf("SC_CLK_TCK"))
    assert window == {"others": 0.45, "steal": 0.05}
    assert _neighbours(None, (1, 1, 0), 0.0) == {}


def test_every_other_round_times_the_new_artifact_first_so_a_place_in_the_round_cancels(monkeypatch):
    """A machine whose second and third processes of each round run 2% slower (CI's 2-core EPYC beside the suite's
    other worker read x1.007-1.017 for one artifact against itself in A B B A rounds): the rounds alternate A B B A and
    B A A B, the place effect reads x1.02 then x0.98, and no REGRESSION is called, even at a 1% tolerance."""
    from edgekit.validation import regression

    timed = []

    def place_effect(source, _settings):
        timed.append(source)
        slow = len(timed) % 4 in (2, 3)
        return {"p50_ms": 1.0, "min_ms": 1.02 if slow else 1.0, "busy": False}

    monkeypatch.setattr(regression, "_timed", place_effect)
    result = regression.retime("old", "new", regression.RetimeSettings(tolerance=0.01, min_rounds=4, max_rounds=4))
    orders = ["".join("A" if s == "old" else "B" for s in timed[i : i + 4]) for i in range(0, len(timed), 4)]
    assert orders == ["ABBA", "BAAB", "ABBA", "BAAB"]
    assert [r["order"] for r in result["round_details"]] == orders
    assert [round(r["ratio"], 3) for r in result["round_details"]] == [1.02, 0.98, 1.02, 0.98]
    assert result["verdict"] != "REGRESSION" and result["ratio"] == pytest.approx(1.0, abs=1e-3)


def test_a_gate_that_cannot_get_quiet_rounds_refuses(monkeypatch):
    """Every round under interference: no verdict, one line saying why (the rounds themselves are recorded numbers)."""
    from edgekit.errors import EdgekitError
    from edgekit.validation import regression

    noisy = {"ratio": 1.4, "a": 1.0, "b": 1.4, "aa": 0.01, "bb": 0.01, "busy": False, "others_change": 0.5, "steal": 0.0}
    monkeypatch.setattr(regression, "timing_round", lambda *args: dict(noisy))
    with pytest.raises(EdgekitError, match="not quiet enough to time on: 3 of 3 A-B-B-A rounds") as info:
        regression.retime(None, None, regression.RetimeSettings(min_rounds=2, max_rounds=3))
    assert "moved by 50%" in info.value.message and "dedicated" in info.value.hint
    quiet = {**noisy, "ratio": 1.0, "b": 1.0, "aa": 0.06, "bb": 0.06, "others_change": 0.0}
    sequence = iter([dict(quiet), dict(quiet)] + [dict(noisy)] * 10)
    monkeypatch.setattr(regression, "timing_round", lambda *args: next(sequence))
    with pytest.raises(EdgekitError, match="below the A/A spread"):  # the tolerance inside the counted rounds' noise, first
        regression.retime(None, None, regression.RetimeSettings(tolerance=0.01, min_rounds=3, max_rounds=4))
