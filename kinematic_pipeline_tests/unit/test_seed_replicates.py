"""Seeds as replicates (backtest/seed_replicates.py): per-seed paired differences by hand, the two-level bootstrap
against a slow loop over the same draws, wider than the day-only one when seeds disagree and equal to it when they
are identical, the verdict's refusals, and the exposure columns by hand."""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import polars as pl
import pytest

from kinematic_pipeline.backtest import seed_replicates as sr
from kinematic_pipeline.backtest.skill import percentile_interval

NAN = float("nan")


def _sides(effects, n_days=120, noise=0.05, seed=0):
    """(k, n_days) a and b whose paired difference is effect_s + independent day noise per seed."""
    rng = np.random.default_rng(seed)
    b = rng.normal(0.0, 1.0, (len(effects), n_days))
    return b + np.asarray(effects, dtype=np.float64)[:, None] + rng.normal(0.0, noise, b.shape), b


# ------------------------------------------------------------------------------------------ the loop twins


def _loop_draws(a, b, n_boot, block_days, seed, resample_seeds):
    """Per resample: each drawn seed's day-count-weighted mean of a - b over its paired days, then their mean."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    k, n_days = a.shape
    index, counts = sr.resample_draws(k, n_days, n_boot, block_days, seed)
    out = []
    for r in range(n_boot):
        drawn = index[r] if resample_seeds else range(k)
        values = []
        for s in drawn:
            num = den = 0.0
            for t in range(n_days):
                if math.isfinite(a[s, t]) and math.isfinite(b[s, t]):
                    num += counts[r, t] * (a[s, t] - b[s, t])
                    den += counts[r, t]
            values.append(num / den if den > 0 else NAN)
        out.append(sum(values) / len(values))
    return np.array(out)


def _loop_exposure(pa, pb):
    shares_a, shares_b, weights_a, weights_b, differ, total = [], [], [], [], 0, 0
    for row_a, row_b in zip(pa, pb):
        days = [(x, y) for x, y in zip(row_a, row_b) if math.isfinite(x) and math.isfinite(y)]
        if not days:
            continue
        shares_a.append(sum(x > 0 for x, _ in days) / len(days))
        shares_b.append(sum(y > 0 for _, y in days) / len(days))
        weights_a.append(sum(x for x, _ in days) / len(days))
        weights_b.append(sum(y for _, y in days) / len(days))
        differ += sum(x != y for x, y in days)
        total += len(days)
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    return {
        "a_share_of_days_long": mean(shares_a),
        "b_share_of_days_long": mean(shares_b),
        "a_mean_weight": mean(weights_a),
        "b_mean_weight": mean(weights_b),
        "share_of_ticker_days_differing": differ / total,
        "n_tickers": len(shares_a),
        "n_ticker_days": total,
    }


# ------------------------------------------------------------------------------------------ paired_by_seed


def test_per_seed_differences_and_sign_agreement_by_hand_with_missing_days():
    a = [[1.0, 2.0, NAN, 4.0], [0.0, 1.0, 0.5, NAN], [3.0, NAN, 2.0, 2.0]]
    b = [[0.0, 0.0, 1.0, 1.0], [1.0, NAN, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]]
    # seed 0: days 0, 1, 3 -> 1, 2, 3; seed 1: days 0, 2 -> -1, 0.5; seed 2: days 0, 2, 3 -> 2, 1, 1
    want = [2.0, -0.25, 4.0 / 3.0]
    got = sr.paired_by_seed(a, b)
    assert got["per_seed"] == pytest.approx(want, rel=1e-12)
    assert got["n_days"].tolist() == [3, 2, 3]
    mean = sum(want) / 3
    assert got["mean"] == pytest.approx(mean, rel=1e-12)
    assert got["sd"] == pytest.approx(math.sqrt(sum((x - mean) ** 2 for x in want) / 2), rel=1e-12)
    assert got["n_seeds"] == 3 and got["n_disagree"] == 1
    assert got["sign_agreement"] == pytest.approx(2 / 3)


def test_one_seed_has_no_sd_and_a_seed_without_a_shared_day_is_an_error():
    one = sr.paired_by_seed([[1.0, 2.0]], [[0.0, 0.0]])
    assert one["mean"] == 1.5 and math.isnan(one["sd"]) and one["sign_agreement"] == 1.0
    with pytest.raises(ValueError, match=r"seed rows \[1\]"):
        sr.paired_by_seed([[1.0, 2.0], [NAN, 1.0]], [[0.0, 0.0], [0.0, NAN]])
    with pytest.raises(ValueError, match="shape"):
        sr.paired_by_seed(np.zeros((2, 3)), np.zeros((2, 4)))


# ------------------------------------------------------------------------------------------ the bootstraps


@pytest.mark.parametrize(("block_days", "resample_seeds"), [(1, True), (3, True), (3, False)])
def test_the_bootstrap_equals_its_loop_twin_over_the_same_draws(block_days, resample_seeds):
    a, b = _sides([0.3, -0.1, 0.2], n_days=17, noise=0.5, seed=block_days)
    a[0, 2], b[1, 5], a[2, 16] = NAN, NAN, NAN  # missing days: each seed's own paired days
    got = sr.mean_difference_draws(a, b, n_boot=60, block_days=block_days, seed=7, resample_seeds=resample_seeds)
    want = _loop_draws(a, b, 60, block_days, 7, resample_seeds)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    interval = (sr.two_level_interval if resample_seeds else sr.day_only_interval)(a, b, 60, block_days, 7, 0.1)
    assert interval == pytest.approx(percentile_interval(want, 0.1), rel=1e-12)


def test_a_resample_without_a_seeds_days_is_nan_and_left_out_of_the_interval():
    a = [[1.0, NAN, NAN, NAN, NAN, NAN], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]
    b = np.zeros((2, 6))
    draws = sr.mean_difference_draws(a, b, n_boot=200, block_days=1, seed=3, resample_seeds=False)
    np.testing.assert_array_equal(np.isnan(draws), np.isnan(_loop_draws(a, b, 200, 1, 3, False)))
    assert np.isnan(draws).any() and np.isfinite(sr.day_only_interval(a, b, 200, 1, 3)).all()


def test_the_two_level_interval_is_wider_when_seeds_disagree_and_the_same_when_they_are_identical():
    a, b = _sides([1.0, -0.8, 0.9, -0.6], n_days=150, noise=0.2)
    two, day = sr.two_level_interval(a, b, 1000, 5, 1), sr.day_only_interval(a, b, 1000, 5, 1)
    assert two[1] - two[0] > 5 * (day[1] - day[0])
    one_a, one_b = _sides([0.4], n_days=150, noise=0.3, seed=2)
    same_a, same_b = np.repeat(one_a, 3, axis=0), np.repeat(one_b, 3, axis=0)  # three identical seeds
    two, day = sr.two_level_interval(same_a, same_b, 1000, 5, 1), sr.day_only_interval(same_a, same_b, 1000, 5, 1)
    assert two == pytest.approx(day, rel=1e-12)


def test_the_intervals_are_deterministic_for_a_seed():
    a, b = _sides([0.2, 0.1, -0.05], n_days=80, noise=0.5)
    first = sr.replicated_verdict(a, b, n_boot=300, block_days=4, seed=11)
    again = sr.replicated_verdict(a, b, n_boot=300, block_days=4, seed=11)
    other = sr.replicated_verdict(a, b, n_boot=300, block_days=4, seed=12)
    assert first == again
    assert (first["ci_low"], first["ci_high"]) != (other["ci_low"], other["ci_high"])
    index, counts = sr.resample_draws(3, 80, 300, 4, 11)
    np.testing.assert_array_equal(index, sr.resample_draws(3, 80, 300, 4, 11)[0])
    assert counts.sum(axis=1).tolist() == [80] * 300 and index.min() >= 0 and index.max() <= 2


# ------------------------------------------------------------------------------------------ the verdict


def test_a_yes_is_refused_when_one_of_three_seeds_disagrees_even_if_the_day_only_interval_excludes_0():
    a, b = _sides([1.0, 1.0, -0.2], n_days=200, noise=0.1)
    row = sr.replicated_verdict(a, b, n_boot=1000, block_days=5, seed=0)
    assert row["day_only_ci_low"] > 0  # the current practice would read this as a clear effect
    assert row["answer"] == "no evidence" and row["reason"] == "1 of 3 seeds disagrees"
    assert row["n_disagree"] == 1 and row["sign_agreement"] == pytest.approx(2 / 3)


def test_a_yes_is_refused_with_two_seeds_and_given_with_three_agreeing_seeds_and_a_clear_effect():
    a, b = _sides([1.0, 1.2, 0.9], n_days=200, noise=0.1)
    two = sr.replicated_verdict(a[:2], b[:2], n_boot=1000, block_days=5, seed=0)
    assert two["answer"] == "no evidence" and two["reason"] == "fewer than 3 seeds" and two["ci_low"] > 0
    three = sr.replicated_verdict(a, b, n_boot=1000, block_days=5, seed=0)
    assert three["answer"] == "yes" and three["ci_low"] > 0.5 and three["sign_agreement"] == 1.0
    assert three["conditional_on"] == "the 3 trained models per side" and three["n_seeds"] == 3
    assert three["mean_difference"] == pytest.approx(np.mean(three["per_seed_differences"]))
    assert sr.ANSWERS == ("yes", "no evidence")


def test_one_fit_answers_as_one_fit_not_as_seeds_that_agree():
    """A probe (one deterministic fit, min_seeds 1) is judged by its day-block interval alone: the row says so
    rather than "all 1 seeds agree", and with one seed to draw the two-level interval is the day-only one."""
    a, b = _sides([1.0], n_days=200, noise=0.1)
    row = sr.replicated_verdict(a, b, n_boot=1000, block_days=5, seed=0, min_seeds=1)
    assert row["answer"] == "yes" and row["reason"] == "one fit (no training seed to vary) and the interval excludes 0"
    assert row["conditional_on"] == "the one fit per side" and "seeds agree" not in row["reason"]
    assert sr.conditional_on(3) == "the 3 trained models per side"
    assert (row["ci_low"], row["ci_high"]) == (row["day_only_ci_low"], row["day_only_ci_high"])
    assert sr.replicated_verdict(a, b, n_boot=1000, block_days=5, seed=0)["reason"] == "fewer than 3 seeds"


def test_a_seed_that_scores_no_day_answers_no_evidence_and_says_why():
    """A seed row with no day both sides score (an adapter that forecasts one value for every name has no rank IC)
    is a reason, not an error: the row answers "no evidence" with the count, the mean and intervals undefined, and
    each other seed's difference kept (it raised before, in every caller but the one that guarded itself)."""
    a, b = _sides([1.0, 1.0, 1.0], n_days=50, noise=0.1)
    a[1] = NAN
    row = sr.replicated_verdict(a, b, n_boot=200, block_days=5, seed=0)
    assert row["answer"] == "no evidence" and row["reason"] == "1 of 3 seeds scores no day that both sides score"
    assert math.isnan(row["mean_difference"]) and math.isnan(row["ci_low"]) and math.isnan(row["sign_agreement"])
    kept = row["per_seed_differences"]
    assert math.isnan(kept[1]) and kept[0] == pytest.approx(np.mean(a[0] - b[0]), rel=1e-12)
    assert row["n_days"] == 50 and row["n_seeds"] == 3 and row["conditional_on"] == "the 3 trained models per side"
    assert sr.unscored_reason(1, 1) == "1 of 1 seed scores no day that both sides score"
    assert sr.unscored_reason(3, 3) == "3 of 3 seeds score no day that both sides score"


def test_a_yes_is_refused_when_agreeing_seeds_have_an_interval_that_covers_0():
    rng = np.random.default_rng(4)
    common = rng.normal(0.0, 1.0, 100)
    common -= common.mean()  # every seed's mean difference is exactly its small offset: all positive
    b = np.zeros((3, 100))
    a = common + np.array([0.01, 0.02, 0.015])[:, None]
    row = sr.replicated_verdict(a, b, n_boot=1000, block_days=5, seed=0)
    assert row["n_disagree"] == 0 and row["answer"] == "no evidence" and row["reason"] == "the interval covers 0"
    assert sr.replicated_verdict(a, b, n_boot=0)["reason"] == "no interval"
    a, b = _sides([1.0, 1.0, -1.0, -1.0, 1.5])
    assert sr.replicated_verdict(a, b, n_boot=100)["reason"] == "2 of 5 seeds disagree"


# ------------------------------------------------------------------------------------------ exposure (M-C)


def test_the_exposure_columns_by_hand():
    pa = [[1, 1, 0, 0], [1, 1, 1, 1], [0.5, 0, 0, NAN]]
    pb = [[1, 0, 0, 0], [1, 1, 1, 0], [0.5, 0.5, 0, 0]]
    got = sr.exposure_pair(pa, pb)
    # ticker 0: a long 2 of 4, b 1 of 4; ticker 1: a 4 of 4, b 3 of 4; ticker 2 (3 shared days): a 1 of 3, b 2 of 3
    assert got["a_share_of_days_long"] == pytest.approx((2 / 4 + 1 + 1 / 3) / 3)
    assert got["b_share_of_days_long"] == pytest.approx((1 / 4 + 3 / 4 + 2 / 3) / 3)
    assert got["a_mean_weight"] == pytest.approx((2 / 4 + 1 + 0.5 / 3) / 3)
    assert got["b_mean_weight"] == pytest.approx((1 / 4 + 3 / 4 + 1 / 3) / 3)
    # differing: ticker 0 day 1, ticker 1 day 3, ticker 2 day 1: 3 of 11 shared ticker-days
    assert got["share_of_ticker_days_differing"] == pytest.approx(3 / 11)
    assert (got["n_tickers"], got["n_ticker_days"]) == (3, 11) and set(got) == set(sr.EXPOSURE_KEYS)
    assert got == pytest.approx(_loop_exposure(np.array(pa, dtype=float), np.array(pb, dtype=float)))


def test_the_exposure_of_long_frames_equals_that_of_the_matrix_and_bad_weights_are_refused():
    rng = np.random.default_rng(5)
    pa, pb = (rng.random((4, 30)) < 0.6).astype(float), (rng.random((4, 30)) < 0.3).astype(float)
    pa[1, 3] = NAN
    dates = [dt.date(2021, 1, 1) + dt.timedelta(days=i) for i in range(30)]

    def frame(p):
        rows = [(f"T{i}", dates[t], p[i, t]) for i in range(4) for t in range(30) if math.isfinite(p[i, t])]
        return pl.DataFrame(rows, schema=["ticker", "date", "position"], orient="row").sample(fraction=1.0, seed=1)

    assert sr.exposure_pair(frame(pa), frame(pb)) == pytest.approx(sr.exposure_pair(pa, pb))
    assert sr.exposure_pair(pa, pb) == pytest.approx(_loop_exposure(pa, pb))
    with pytest.raises(ValueError, match=r"outside \[0, 1\]"):
        sr.exposure_pair([[1.5, 0.0]], [[1.0, 0.0]])
    with pytest.raises(ValueError, match="lacks the columns"):
        sr.exposure_pair(frame(pa), frame(pb).drop("ticker"))
