"""Skill of the mean over seeds (backtest/skill_seeds.py): one seed is skill_table under the same draws, the
interval equals the brute-force twin (per resample: every seed's naive metrics, then their mean), and it is
not the mean of the per-seed interval ends."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kinematic_pipeline.backtest import skill as s
from kinematic_pipeline.backtest.skill_seeds import SUFFIXES, seed_mean_skill
from kinematic_pipeline_tests.naive_skill import naive_seed_mean_skill

REFERENCE = np.array([0.25, 0.23, 0.52])


def _seed(rng, n, days_pool, p_unknown=0.1):
    probs = rng.dirichlet([1.0, 1.0, 1.0], n)
    labels = rng.integers(0, 3, n)
    labels[rng.random(n) < p_unknown] = -1
    return probs, labels, rng.choice(days_pool, n), rng.integers(0, 3, n)


def _assert_close(got: dict, want: dict, keys) -> None:
    for k in keys:
        if isinstance(want[k], float) and math.isnan(want[k]):
            assert math.isnan(got[k]), k
        else:
            assert got[k] == pytest.approx(want[k], rel=1e-10, abs=1e-12), k


def test_with_one_seed_it_is_skill_table_under_the_same_draws():
    rng = np.random.default_rng(0)
    probs, labels, days, actions = _seed(rng, 90, np.arange(20))
    table = s.skill_table(probs, labels, days, REFERENCE, actions=actions, n_boot=150, block_days=3, seed=9)
    mean = seed_mean_skill([probs], [labels], [days], REFERENCE, actions=[actions], n_boot=150, block_days=3, seed=9)
    _assert_close(mean, table, table.keys())
    assert mean["n_seeds"] == 1 and all(math.isnan(mean[f"{k}_seed_std"]) for k in s.SKILL_METRICS)


@pytest.mark.parametrize("block_days", [1, 4])
def test_the_seed_mean_interval_equals_the_brute_force_loop_over_resamples_and_seeds(block_days):
    rng = np.random.default_rng(block_days)
    one = _seed(rng, 40, np.arange(12))
    two = _seed(rng, 30, np.arange(3, 15))  # the seeds' days overlap only in part: the union is resampled
    got = seed_mean_skill(
        [one[0], two[0]], [one[1], two[1]], [one[2], two[2]], REFERENCE,
        actions=[one[3], two[3]], n_boot=40, block_days=block_days, seed=5,
    )  # fmt: skip
    want = naive_seed_mean_skill([one, two], REFERENCE, 40, block_days, 5)
    _assert_close(got, want, want.keys())
    assert set(got) == {"n_seeds", "n_rows", "n_days"} | {f"{k}{x}" for k in s.SKILL_METRICS for x in SUFFIXES}
    own = [set(d[y >= 0].tolist()) for _, y, d, _ in (one, two)]
    assert got["n_days"] == len(own[0] | own[1]) > max(map(len, own)) and got["n_seeds"] == 2


def test_seeds_that_err_on_different_days_have_a_steady_mean_unlike_the_mean_of_their_interval_ends():
    # Ten days, one Buy row each. Seed A is sure and right on days 0-4 and sure and wrong on days 5-9
    # (Brier 0 or 2 a row); seed B the opposite. Each seed's Brier moves with how many early days a resample
    # draws, but their mean is 1 on every resample: the interval of the seed mean is [1, 1].
    days, labels = np.arange(10), np.zeros(10, dtype=int)
    right, wrong = np.eye(3)[[0] * 5], np.eye(3)[[1] * 5]
    seed_a, seed_b = np.vstack([right, wrong]), np.vstack([wrong, right])
    kw = dict(n_boot=400, block_days=1, seed=3)  # single days (a 20-day block would cover all ten every time)
    mean = seed_mean_skill([seed_a, seed_b], [labels, labels], [days, days], REFERENCE, **kw)
    assert mean["brier"] == 1.0 and mean["brier_seed_std"] == pytest.approx(0.0)
    assert mean["brier_ci_low"] == pytest.approx(1.0) and mean["brier_ci_high"] == pytest.approx(1.0)
    per_seed = [s.skill_table(p, labels, days, REFERENCE, **kw) for p in (seed_a, seed_b)]
    averaged_low = np.mean([t["brier_ci_low"] for t in per_seed])
    averaged_high = np.mean([t["brier_ci_high"] for t in per_seed])
    assert averaged_low < 0.7 and averaged_high > 1.3  # the old cell's "interval": wide, and of nothing


def test_a_seed_without_labelled_rows_or_a_bad_input_is_handled():
    probs = np.full((3, 3), 1 / 3)
    empty = seed_mean_skill([probs], [[-1, -1, -1]], [[0, 1, 2]], REFERENCE, n_boot=10)
    assert empty["n_rows"] == 0 and math.isnan(empty["auc_buy"]) and math.isnan(empty["brier_ci_low"])
    with pytest.raises(ValueError, match="one entry per seed"):
        seed_mean_skill([probs, probs], [[0, 1, 2]], [[0, 1, 2]], REFERENCE)
    with pytest.raises(ValueError, match="at least one seed"):
        seed_mean_skill([], [], [], REFERENCE)


def test_each_row_can_be_scored_against_its_own_folds_base_rates():
    # Two walk-forward folds: days 0-9 are fold 1's test days, 10-19 fold 2's, each with its training base rates.
    rng = np.random.default_rng(21)
    folds = np.array([[0.25, 0.23, 0.52], [0.40, 0.35, 0.25]])
    one, two = _seed(rng, 50, np.arange(20)), _seed(rng, 45, np.arange(20))
    per_row = [folds[(d >= 10).astype(int)] for _, _, d, _ in (one, two)]
    got = seed_mean_skill(
        [one[0], two[0]], [one[1], two[1]], [one[2], two[2]], per_row,
        actions=[one[3], two[3]], n_boot=30, block_days=2, seed=4,
    )  # fmt: skip
    want = naive_seed_mean_skill([one, two], per_row, 30, block_days=2, seed=4)
    _assert_close(got, want, want.keys())
    shared = seed_mean_skill(
        [one[0], two[0]], [one[1], two[1]], [one[2], two[2]], REFERENCE, actions=[one[3], two[3]], n_boot=30, seed=4
    )
    assert got["brier_reference"] != shared["brier_reference"]  # the folds' references, not one
    # every row given the same reference: the same numbers, bit for bit, as the shared (3,) reference
    same = [np.tile(REFERENCE, (len(y), 1)) for y in (one[1], two[1])]
    again = seed_mean_skill(
        [one[0], two[0]], [one[1], two[1]], [one[2], two[2]], same, actions=[one[3], two[3]], n_boot=30, seed=4
    )
    assert again.keys() == shared.keys()
    assert all(again[k] == shared[k] or (math.isnan(again[k]) and math.isnan(shared[k])) for k in shared)
    with pytest.raises(ValueError, match="per-seed references for 2 seeds"):
        seed_mean_skill([one[0], two[0]], [one[1], two[1]], [one[2], two[2]], per_row[:1], n_boot=0)
    with pytest.raises(ValueError, match=r"or \(50, 3\), one row per label"):
        seed_mean_skill([one[0], two[0]], [one[1], two[1]], [one[2], two[2]], [per_row[1], per_row[1]], n_boot=0)
