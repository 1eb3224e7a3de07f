"""Predictive skill (backtest/skill.py): hand-made cases with known answers, and agreement with the
loop twins of naive_skill.py on random, tied, one-class and absent-class inputs (with and without the
policy's actions)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kinematic_pipeline.backtest import skill as s
from kinematic_pipeline_tests.naive_skill import (
    naive_auc,
    naive_balanced_accuracy,
    naive_base_rates,
    naive_brier,
    naive_log_loss,
    naive_macro_f1,
    naive_skill_table,
)

B, S, H = 0, 1, 2


def _random_case(rng, n, n_days, p_unknown=0.1, classes=(0, 1, 2), quantize=None):
    probs = rng.dirichlet([1.0, 1.0, 1.0], n)
    if quantize:  # coarse probabilities: many tied scores and argmax ties
        probs = np.round(probs * quantize) / quantize
    labels = rng.choice(classes, n)
    labels[rng.random(n) < p_unknown] = -1
    days = rng.integers(0, n_days, n)
    return probs, labels, days


def _assert_same(a, b, rtol=1e-10):
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], float) and math.isnan(a[k]):
            assert math.isnan(b[k]), k
        else:
            assert a[k] == pytest.approx(b[k], rel=rtol, abs=1e-12), k


# ------------------------------------------------------------------------------------------ known answers


def test_base_rates_ignore_unknown_labels_and_refuse_an_empty_sample():
    np.testing.assert_allclose(s.base_rates([0, 0, 1, 2, -1, -1, 2, 2]), [2 / 6, 1 / 6, 3 / 6])
    np.testing.assert_allclose(s.base_rates([2, 2]), [0, 0, 1])
    with pytest.raises(ValueError, match="no known label"):
        s.base_rates([-1, -1])
    with pytest.raises(ValueError, match="labels must be"):
        s.base_rates([0, 3])


def test_a_perfect_predictor_has_skill_one_and_auc_one():
    labels = np.array([0, 1, 2, 2, 0, 1, 2])
    probs = np.eye(3)[labels]
    t = s.skill_table(probs, labels, np.arange(7), s.base_rates(labels), n_boot=50)
    assert t["log_loss"] == 0 and t["log_loss_skill"] == 1.0 and t["brier_skill"] == 1.0
    assert t["auc_buy"] == 1.0 and t["auc_sell"] == 1.0
    assert t["balanced_accuracy"] == 1.0 and t["macro_f1"] == 1.0
    assert t["log_loss_skill_ci_low"] == 1.0 and t["auc_sell_ci_high"] == 1.0


def test_the_training_base_rate_predictor_scores_exactly_zero_skill():
    rng = np.random.default_rng(3)
    train = rng.choice(3, 500, p=[0.25, 0.23, 0.52])
    rates = s.base_rates(train)
    test_labels = rng.choice(3, 200, p=[0.4, 0.1, 0.5])  # a different test mix: still no information
    probs = np.tile(rates, (200, 1))
    t = s.skill_table(probs, test_labels, rng.integers(0, 40, 200), rates, n_boot=100, seed=1)
    for name in ("log_loss_skill", "brier_skill"):
        assert t[name] == 0.0
        assert t[f"{name}_ci_low"] == 0.0 and t[f"{name}_ci_high"] == 0.0
    assert t["auc_buy"] == 0.5 and t["auc_sell"] == 0.5  # one constant score: all ties
    assert t["balanced_accuracy"] == pytest.approx(1 / 3)  # always Hold: recall 1, 0, 0


def test_reversed_scores_have_auc_zero_and_ties_count_half():
    assert s.auc_one_vs_rest([0.1, 0.2, 0.8, 0.9], [True, True, False, False]) == 0.0
    assert s.auc_one_vs_rest([0.9, 0.8, 0.2, 0.1], [True, True, False, False]) == 1.0
    assert s.auc_one_vs_rest([0.5, 0.5, 0.5], [True, False, False]) == 0.5
    # member 0.5 vs non-members 0.5 (tie) and 0.2 (win); member 0.1 loses both: (0.5 + 1 + 0 + 0) / 4
    assert s.auc_one_vs_rest([0.5, 0.1, 0.5, 0.2], [True, True, False, False]) == 0.375


def test_auc_is_nan_when_a_class_is_absent_or_everything_is_in_it():
    assert math.isnan(s.auc_one_vs_rest([0.1, 0.4], [False, False]))
    assert math.isnan(s.auc_one_vs_rest([0.1, 0.4], [True, True]))
    t = s.skill_table(np.full((4, 3), 1 / 3), [0, 2, 2, 0], [0, 0, 1, 1], [1 / 3] * 3, n_boot=20)
    assert math.isnan(t["auc_sell"]) and math.isnan(t["auc_sell_ci_low"])


def test_a_known_confusion_gives_known_balanced_accuracy_and_macro_f1():
    # true Buy: 3 predicted Buy, 1 Hold; true Sell: 1 Buy, 1 Sell; true Hold: 2 Hold, 2 Sell
    labels = [B, B, B, B, S, S, H, H, H, H, -1]
    predicted = [B, B, B, H, B, S, H, H, S, S, B]
    assert s.balanced_accuracy(predicted, labels) == pytest.approx((3 / 4 + 1 / 2 + 2 / 4) / 3)
    f1_buy, f1_sell, f1_hold = 2 * 3 / (6 + 1 + 1), 2 * 1 / (2 + 2 + 1), 2 * 2 / (4 + 1 + 2)
    assert s.macro_f1(predicted, labels) == pytest.approx((f1_buy + f1_sell + f1_hold) / 3)


def test_a_class_neither_labelled_nor_predicted_is_left_out_of_the_averages():
    labels, predicted = [B, B, H, H], [B, H, H, H]
    assert s.balanced_accuracy(predicted, labels) == pytest.approx((1 / 2 + 1) / 2)
    assert s.macro_f1(predicted, labels) == pytest.approx((2 / 3 + 2 * 2 / 5) / 2)
    assert s.balanced_accuracy([S, S], [S, S]) == 1.0 and s.macro_f1([S, S], [S, S]) == 1.0


def test_policy_balanced_accuracy_is_of_the_actions_while_the_argmax_rows_are_of_the_probabilities():
    # p says Hold on every row (argmax Hold); the policy Sells on every row but row 0, where it Buys
    labels = np.array([B, B, B, B, S, S, H, H, H, H])
    probs = np.tile([0.25, 0.2, 0.55], (10, 1))
    actions = np.array([B] + [S] * 9)
    t = s.skill_table(probs, labels, np.arange(10), [0.25, 0.2, 0.55], actions=actions, n_boot=0)
    assert t["policy_balanced_accuracy"] == pytest.approx((1 / 4 + 2 / 2 + 0 / 4) / 3)  # recall B, S, H
    assert t["balanced_accuracy"] == pytest.approx((0 + 0 + 4 / 4) / 3)
    assert t["macro_f1"] == pytest.approx((0 + 0 + 2 * 4 / (2 * 4 + 6)) / 3)  # Hold: TP 4, FP 6, FN 0
    without = s.skill_table(probs, labels, np.arange(10), [0.25, 0.2, 0.55], n_boot=0)
    assert math.isnan(without["policy_balanced_accuracy"]) and without["balanced_accuracy"] == t["balanced_accuracy"]
    with pytest.raises(ValueError, match="actions"):
        s.skill_table(probs, labels, np.arange(10), [0.25, 0.2, 0.55], actions=actions[:3])


def test_skill_score_is_one_minus_the_ratio_and_nan_without_a_reference():
    assert s.skill_score(0.5, 1.0) == 0.5
    assert s.skill_score(1.2, 1.0) == pytest.approx(-0.2)
    assert math.isnan(s.skill_score(0.3, 0.0))
    np.testing.assert_allclose(s.skill_score(np.array([0.0, 2.0]), np.array([1.0, 1.0])), [1.0, -1.0])


def test_log_loss_clips_zero_probabilities_instead_of_returning_inf():
    assert s.log_loss([[0.0, 1.0, 0.0]], [0]) == pytest.approx(-math.log(1e-15))
    assert math.isnan(s.log_loss([[0.2, 0.3, 0.5]], [-1]))


def test_bad_inputs_are_refused_with_what_is_wrong():
    with pytest.raises(ValueError, match=r"shape \(n, 3\)"):
        s.skill_table(np.ones((3, 2)), [0, 1, 2], [0, 1, 2], [1 / 3] * 3)
    with pytest.raises(ValueError, match="finite"):
        s.skill_table([[np.nan, 0.5, 0.5]], [0], [0], [1 / 3] * 3)
    with pytest.raises(ValueError, match="days"):
        s.skill_table(np.full((2, 3), 1 / 3), [0, 1], [0], [1 / 3] * 3)


# ------------------------------------------------------------------------------------------ twins


@pytest.mark.parametrize("seed", range(6))
def test_point_metrics_match_the_loop_twins_on_random_and_tied_inputs(seed):
    rng = np.random.default_rng(seed)
    probs, labels, _ = _random_case(rng, 80, 10, quantize=4 if seed % 2 else None)
    predicted = rng.integers(0, 3, 80)
    np.testing.assert_allclose(s.base_rates(labels), naive_base_rates(labels), rtol=1e-14)
    assert s.log_loss(probs, labels) == pytest.approx(naive_log_loss(probs, labels), rel=1e-12)
    assert s.brier_score(probs, labels) == pytest.approx(naive_brier(probs, labels), rel=1e-12)
    assert s.balanced_accuracy(predicted, labels) == pytest.approx(naive_balanced_accuracy(predicted, labels))
    assert s.macro_f1(predicted, labels) == pytest.approx(naive_macro_f1(predicted, labels))
    for k in range(3):
        assert s.auc_one_vs_rest(probs[:, k], labels == k) == pytest.approx(naive_auc(probs[:, k], labels == k))


@pytest.mark.parametrize(
    "case",
    [
        dict(seed=0, n=60, n_days=12, block_days=1),
        dict(seed=1, n=60, n_days=12, block_days=5, quantize=3),  # ties in scores and argmax
        dict(seed=2, n=40, n_days=40, block_days=1, classes=(0, 2)),  # Sell absent: AUC NaN
        dict(seed=3, n=30, n_days=6, block_days=2, classes=(2,)),  # one class only
        dict(seed=4, n=50, n_days=3, block_days=7, p_unknown=0.5),  # block longer than the period
    ],
)
def test_skill_table_matches_the_row_by_row_bootstrap_twin(case):
    rng = np.random.default_rng(case["seed"])
    kw = {k: case[k] for k in ("quantize", "classes", "p_unknown") if k in case}
    probs, labels, days = _random_case(rng, case["n"], case["n_days"], **kw)
    actions = rng.integers(0, 3, labels.size) if case["seed"] % 2 == 0 else None  # with and without a policy
    reference = np.array([0.25, 0.23, 0.52])
    got = s.skill_table(
        probs, labels, days, reference, actions=actions, n_boot=60, block_days=case["block_days"], seed=7
    )
    want = naive_skill_table(probs, labels, days, reference, 60, case["block_days"], 7, actions=actions)
    _assert_same(got, want)
    assert math.isnan(got["policy_balanced_accuracy"]) == (actions is None)


def test_skill_table_scores_each_row_against_its_own_reference_as_the_twin_does():
    rng = np.random.default_rng(31)
    probs, labels, days = _random_case(rng, 80, 16)
    folds = np.array([[0.25, 0.23, 0.52], [0.5, 0.1, 0.4]])  # two walk-forward folds' training base rates
    per_row = folds[(days >= 8).astype(int)]
    got = s.skill_table(probs, labels, days, per_row, n_boot=40, block_days=3, seed=2)
    _assert_same(got, naive_skill_table(probs, labels, days, per_row, 40, 3, 2))
    shared = s.skill_table(probs, labels, days, folds[0], n_boot=40, block_days=3, seed=2)
    assert got["log_loss_reference"] != shared["log_loss_reference"] and got["log_loss"] == shared["log_loss"]
    same = s.skill_table(probs, labels, days, np.tile(folds[0], (80, 1)), n_boot=40, block_days=3, seed=2)
    assert same.keys() == shared.keys()
    assert all(same[k] == shared[k] or (math.isnan(same[k]) and math.isnan(shared[k])) for k in shared)
    with pytest.raises(ValueError, match=r"or \(80, 3\), one row per label"):
        s.skill_table(probs, labels, days, per_row[:-1], n_boot=0)


def test_skill_table_is_deterministic_for_a_seed_and_resamples_whole_days():
    rng = np.random.default_rng(11)
    probs, labels, days = _random_case(rng, 120, 30)
    acts = rng.integers(0, 3, 120)  # with actions every metric is finite, so == compares numbers, not NaNs
    kw = dict(actions=acts, n_boot=200, block_days=5)  # 30 days: a block of 30 or more would hold them all
    a = s.skill_table(probs, labels, days, [0.3, 0.3, 0.4], seed=5, **kw)
    assert a == s.skill_table(probs, labels, days, [0.3, 0.3, 0.4], seed=5, **kw)
    assert a != s.skill_table(probs, labels, days, [0.3, 0.3, 0.4], seed=6, **kw)
    assert a["n_days"] == len(set(days[labels >= 0].tolist())) and a["n_rows"] == int((labels >= 0).sum())
    assert a["auc_buy_ci_low"] <= a["auc_buy"] <= a["auc_buy_ci_high"]
    counts = s.day_resample_counts(30, 200, block_days=4, seed=5)
    assert counts.shape == (200, 30) and (counts.sum(axis=1) == 30).all()
    # a chunked evaluation (tiny chunks) gives the same intervals, up to the order of float sums
    old, s._CHUNK_CELLS = s._CHUNK_CELLS, 1
    try:
        _assert_same(s.skill_table(probs, labels, days, [0.3, 0.3, 0.4], seed=5, **kw), a, rtol=1e-12)
    finally:
        s._CHUNK_CELLS = old


def test_a_block_longer_than_a_quarter_of_the_days_is_cut_so_a_short_period_still_resamples():
    # science-6 L-D: 50-day blocks on a 31-day test period held every day; each resample was a rotation of them
    assert s.effective_block_days(50, 31) == 7 and s.effective_block_days(50, 1003) == 50
    assert s.effective_block_days(50, 3) == 1 and s.effective_block_days(5, 30) == 5
    counts = s.day_resample_counts(31, 300, block_days=50, seed=3)
    assert (counts.sum(axis=1) == 31).all()
    assert len({tuple(row) for row in counts.tolist()}) > 250  # resamples differ: not one rotation of every day
    assert (counts == s.day_resample_counts(31, 300, block_days=7, seed=3)).all()
    # so the interval of a mean over those days has a width, which a block of every day would not give
    x = np.random.default_rng(0).normal(size=31)
    means = counts @ x / 31
    assert np.percentile(means, 97.5) - np.percentile(means, 2.5) > 0.2
    uncut = np.ones(31) @ x / 31  # a rotation's mean: the point
    assert abs(np.median(means) - uncut) < 0.2


def test_day_order_and_day_labels_do_not_matter_only_the_grouping():
    rng = np.random.default_rng(2)
    probs, labels, days = _random_case(rng, 90, 15)
    perm = rng.permutation(90)
    a = s.skill_table(probs, labels, days, [0.3, 0.3, 0.4], n_boot=100, seed=1)
    b = s.skill_table(probs[perm], labels[perm], days[perm] * 10 + 3, [0.3, 0.3, 0.4], n_boot=100, seed=1)
    _assert_same(a, b, rtol=1e-9)


def test_without_labels_or_resamples_the_table_is_nan_not_an_error():
    t = s.skill_table(np.full((2, 3), 1 / 3), [-1, -1], [0, 1], [1 / 3] * 3)
    assert t["n_rows"] == 0 and t["n_days"] == 0 and math.isnan(t["auc_buy"])
    t = s.skill_table(np.full((2, 3), 1 / 3), [0, 1], [0, 1], [1 / 3] * 3, n_boot=0)
    assert t["brier_skill"] == 0.0 and math.isnan(t["brier_skill_ci_low"])
    assert set(t) == {"n_rows", "n_days"} | {f"{k}{x}" for k in s.SKILL_METRICS for x in ("", "_ci_low", "_ci_high")}
