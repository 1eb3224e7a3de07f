"""The trailing-volatility reference (backtest/volatility_reference.py, issue 38 item 3), the skill beyond it
(skill_seeds.seed_mean_skill_difference, policy_frames.skill_beyond_reference_frame) and the block bootstrap of the
skill intervals: a loop twin of vol20, a frame computed by hand, the future perturbed (no look-ahead), the scored p
equal to the hand value, and block intervals wider than single-day ones on autocorrelated days."""

from __future__ import annotations

import datetime as dt
import math
import statistics

import numpy as np
import polars as pl
import pytest

from kinematic_pipeline.backtest import skill as s
from kinematic_pipeline.backtest.policy_frames import (
    BEYOND,
    SkillOptions,
    seed_mean_skill_frame,
    skill_beyond_reference_frame,
)
from kinematic_pipeline.backtest.skill_seeds import seed_mean_skill_difference
from kinematic_pipeline.backtest.sweep import bootstrap_seed
from kinematic_pipeline.backtest.volatility_reference import (
    REFERENCE,
    REFERENCE_CLASS_WEIGHTS,
    normal_class_probabilities,
    reference_predictions,
    trailing_volatility,
)
from kinematic_pipeline.tasks.actions import SOFTMAX_COLUMNS, stored_probabilities, unweighted_probabilities
from kinematic_pipeline.tasks.buy_sell_hold import PREDICTIONS_SCHEMA
from kinematic_pipeline_tests.naive_skill import naive_resampled_days

DAY0 = dt.date(2023, 1, 2)
W = (2.0, 10.0, 1.0)


def _day(k: int) -> dt.date:
    return DAY0 + dt.timedelta(k)


def _bars(rng, tickers=("A", "B", "C"), n=60) -> pl.DataFrame:
    rows = []
    for t in tickers:
        close = 50.0 * np.exp(np.cumsum(rng.normal(0, 0.02, n)))
        rows += [(t, _day(k), float(close[k])) for k in range(n)]
    return pl.DataFrame(rows, schema={"ticker": pl.String, "date": pl.Date, "close": pl.Float64}, orient="row")


# ------------------------------------------------------------------------------------------ the twin


def naive_vol20(bars: pl.DataFrame) -> dict[tuple[str, dt.date], float]:
    """{(ticker, date): the sample std of the ticker's 20 log returns ending that day} by a plain loop; a day with
    fewer than 20 returns behind it, or a missing / non-positive close among them, has no entry."""
    out = {}
    for ticker in sorted(set(bars["ticker"].to_list())):
        mine = sorted((d, c) for t, d, c in bars.select("ticker", "date", "close").iter_rows() if t == ticker)
        for i in range(20, len(mine)):
            closes = [c for _, c in mine[i - 20 : i + 1]]  # 21 closes: days i-20 .. i
            if any(c is None or not c > 0 for c in closes):
                continue
            returns = [math.log(closes[k + 1]) - math.log(closes[k]) for k in range(20)]
            out[(ticker, mine[i][0])] = statistics.stdev(returns)
    return out


def naive_class_probabilities(vol: float, tau: float) -> list[float]:
    """P(r > tau), P(r < -tau), the rest, of r ~ N(0, vol^2), with math.erfc."""
    if vol == 0:
        return [0.0, 0.0, 1.0]
    up = 0.5 * math.erfc(tau / vol / math.sqrt(2))
    return [up, up, 1 - 2 * up]


def test_trailing_volatility_equals_its_loop_twin_on_shuffled_bars_with_gaps_and_bad_closes():
    rng = np.random.default_rng(3)
    bars = _bars(rng)
    bars = bars.with_columns(  # a non-positive and a missing close in B: the windows holding them get no value
        pl.when((pl.col("ticker") == "B") & (pl.col("date") == _day(30)))
        .then(0.0)
        .otherwise(pl.col("close"))
        .alias("close")
    ).filter(~((pl.col("ticker") == "C") & (pl.col("date") == _day(40))))  # C skips a day: its return spans two
    bars = bars.sample(fraction=1.0, shuffle=True, seed=1)
    got = trailing_volatility(bars)
    want = naive_vol20(bars)
    values = {(t, d): v for t, d, v in got.select("ticker", "date", "vol").iter_rows() if np.isfinite(v)}
    assert values.keys() == want.keys()
    for key, v in want.items():
        assert values[key] == pytest.approx(v, rel=1e-12), key
    assert len(values) == 3 * 40 - 21 - 1  # 40 per ticker; B loses the 21 windows over day 30, C one day
    assert got.select("ticker", "date").rows() == sorted(got.select("ticker", "date").rows())


def test_a_frame_computed_by_hand():
    # 21 closes of A whose log returns alternate +1%, -1%: 20 returns with mean 0 and sample std
    # sqrt(20 * 0.01^2 / 19) = 0.0102598; at tau = 1%, z = sqrt(19/20) = 0.974679 and P(r > tau) = 1 - Phi(z)
    # = 0.16486 (tables: Phi(0.97) = 0.83398, Phi(0.98) = 0.83646, interpolated at 0.9747: 0.83514).
    a = 0.01
    closes = 100.0 * np.exp(np.cumsum([0.0] + [a if k % 2 == 0 else -a for k in range(20)]))
    bars = pl.DataFrame({"ticker": ["A"] * 21, "date": [_day(k) for k in range(21)], "close": closes})
    rows = pl.DataFrame({"ticker": ["A"] * 21, "date": [_day(k) for k in range(21)], "label": [0] * 20 + [1]})
    frame = reference_predictions(bars, rows, 0.01)
    assert frame.schema == pl.Schema(PREDICTIONS_SCHEMA)
    assert frame.height == 1 and frame["date"].item() == _day(20)  # days 0-19 have fewer than 20 returns
    row = frame.row(0, named=True)
    assert trailing_volatility(bars)["vol"][20] == pytest.approx(0.0102598, abs=1e-7)
    assert row["p_buy"] == pytest.approx(0.16486, abs=1e-5) and row["p_sell"] == row["p_buy"]
    assert row["p_hold"] == pytest.approx(1 - 2 * 0.16486, abs=2e-5)
    assert (row["variant"], row["tau"], row["seed"], row["label"], row["action"]) == (REFERENCE, 0.01, 0, 1, 2)
    assert row["close"] == pytest.approx(closes[20])


def test_normal_probabilities_match_erfc_sum_to_one_and_tie_buy_and_sell():
    vol = np.array([0.0, 0.001, 0.01, 0.02, 0.05, 0.3])
    for tau in (0.0, 0.0025, 0.01, 0.03):
        p = normal_class_probabilities(vol, tau)
        want = np.array([naive_class_probabilities(v, tau) for v in vol])
        np.testing.assert_allclose(p, want, rtol=1e-12, atol=1e-15)
        assert (p[:, 0] == p[:, 1]).all()  # one number: the score p_buy - p_sell is exactly 0
        np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="vol must be"):
        normal_class_probabilities(np.array([-0.01]), 0.01)


@pytest.mark.parametrize("t", [20, 35, 59])
def test_perturbing_the_future_never_changes_a_forecast_and_the_window_is_the_last_20_returns(t):
    """Day t's forecast reads the closes of days t-20 .. t (20 returns, today's included) and nothing else."""
    rng = np.random.default_rng(t)
    bars = _bars(rng)
    rows = bars.select("ticker", "date").with_columns(label=pl.lit(0))
    base = reference_predictions(bars, rows, 0.01)

    def perturbed(day: int) -> pl.DataFrame:
        changed = bars.with_columns(
            pl.when(pl.col("date") == _day(day)).then(pl.col("close") * 1.37).otherwise(pl.col("close")).alias("close")
        )
        return reference_predictions(changed, rows, 0.01)

    def upto(frame: pl.DataFrame, day: int) -> pl.DataFrame:
        return frame.filter(pl.col("date") <= _day(day))

    for later in range(t + 1, 60):  # any future close, one at a time
        assert upto(perturbed(later), t).equals(upto(base, t))
    future = bars.filter(pl.col("date") <= _day(t))  # every future bar gone at once
    assert reference_predictions(future, rows, 0.01).equals(upto(base, t))
    on_t = base.filter(pl.col("date") == _day(t))
    assert not perturbed(t).filter(pl.col("date") == _day(t))["p_buy"].equals(on_t["p_buy"])  # today's return counts
    assert not perturbed(t - 20).filter(pl.col("date") == _day(t))["p_buy"].equals(on_t["p_buy"])  # the oldest
    if t - 21 >= 0:
        assert perturbed(t - 21).filter(pl.col("date") == _day(t)).equals(on_t)  # older than the window


def test_the_scored_probabilities_are_the_hand_values_and_the_action_their_argmax():
    rng = np.random.default_rng(5)
    bars = _bars(rng, n=45)
    labels = rng.integers(-1, 3, bars.height)
    rows = bars.select("ticker", "date").with_columns(label=pl.Series(labels, dtype=pl.Int8))
    frame = reference_predictions(bars, rows, 0.01)
    vol = naive_vol20(bars)
    hand = np.array([naive_class_probabilities(vol[k], 0.01) for k in frame.select("ticker", "date").iter_rows()])
    scored = frame.select("p_buy", "p_sell", "p_hold").to_numpy()  # its softmax (p, float32) renormalized
    np.testing.assert_array_equal(
        scored, unweighted_probabilities(frame.select(SOFTMAX_COLUMNS).to_numpy(), REFERENCE_CLASS_WEIGHTS)
    )
    np.testing.assert_allclose(scored, hand, rtol=2e-7)  # float32 storage
    assert (frame["action"].to_numpy() == hand.argmax(axis=1)).all()
    # the skill machinery scores exactly these p: its log loss is that of the hand values
    y = frame["label"].to_numpy()
    row = seed_mean_skill_frame(frame, {0.01: np.array([0.3, 0.3, 0.4])}, SkillOptions(n_boot=0))
    known = y >= 0
    want = -np.log(hand[known, y[known]]).mean()
    assert row["log_loss"].item() == pytest.approx(want, rel=1e-6)
    assert row["n_rows"].item() == int(known.sum())
    # its softmax de-weighted with the models' weights instead would be another forecast: the unit weights matter
    assert not np.allclose(unweighted_probabilities(frame.select(SOFTMAX_COLUMNS).to_numpy(), W), hand)


# ------------------------------------------------------------------------------------------ skill beyond it


def _paired_case(rng, n_days=40, per_day=6):
    days = np.repeat(np.arange(n_days), per_day)
    labels = rng.integers(0, 3, days.size)
    labels[rng.random(days.size) < 0.1] = -1
    model = rng.dirichlet([2, 2, 2], days.size)
    reference = rng.dirichlet([3, 3, 3], days.size)
    return model, reference, labels, days


def naive_difference(model, reference, labels, days, rates, n_boot, block_days, seed, alpha=0.05):
    """The twin: per resample, the rows of the drawn days listed one by one, each forecaster's log-loss skill
    against the base rates over them, and the difference."""
    keep = [i for i, y in enumerate(labels) if y >= 0]
    distinct = sorted({days[i] for i in keep})

    def skill(p, rows):
        loss = sum(-math.log(max(p[i][labels[i]], 1e-15)) for i in rows) / len(rows)
        base = sum(-math.log(rates[labels[i]]) for i in rows) / len(rows)
        return 1 - loss / base

    point = skill(model, keep) - skill(reference, keep)
    draws = []
    for picked in naive_resampled_days(len(distinct), n_boot, block_days, seed):
        rows = [i for d in picked for i in keep if days[i] == distinct[d]]
        draws.append(skill(model, rows) - skill(reference, rows))
    low, high = np.quantile(draws, [alpha / 2, 1 - alpha / 2])
    return point, low, high


def test_the_skill_difference_equals_its_loop_twin_and_the_difference_of_skill_tables():
    rng = np.random.default_rng(8)
    model, reference, labels, days = _paired_case(rng)
    rates = np.array([0.3, 0.25, 0.45])
    got = seed_mean_skill_difference([model], [reference], [labels], [days], rates, n_boot=60, block_days=5, seed=4)
    point, low, high = naive_difference(model, reference, labels, days, rates, 60, 5, 4)
    assert got["difference"] == pytest.approx(point, rel=1e-10)
    assert got["ci_low"] == pytest.approx(low, rel=1e-10) and got["ci_high"] == pytest.approx(high, rel=1e-10)
    tables = [s.skill_table(p, labels, days, rates, n_boot=0)["log_loss_skill"] for p in (model, reference)]
    assert got["difference"] == pytest.approx(tables[0] - tables[1], rel=1e-10)
    assert got["n_rows"] == int((labels >= 0).sum()) and got["n_days"] == 40 and got["n_seeds"] == 1
    same = seed_mean_skill_difference([model], [model], [labels], [days], rates, n_boot=50, seed=1)
    assert (same["difference"], same["ci_low"], same["ci_high"]) == (0.0, 0.0, 0.0)


def test_two_seeds_average_their_differences_under_one_draw():
    rng = np.random.default_rng(9)
    a, reference, labels, days = _paired_case(rng)
    b = rng.dirichlet([2, 2, 2], labels.size)
    rates = np.array([0.3, 0.25, 0.45])
    kw = dict(n_boot=0, block_days=5, seed=2)
    both = seed_mean_skill_difference([a, b], [reference, reference], [labels] * 2, [days] * 2, rates, **kw)
    one = [seed_mean_skill_difference([p], [reference], [labels], [days], rates, **kw)["difference"] for p in (a, b)]
    assert both["difference"] == pytest.approx(np.mean(one), rel=1e-12)
    assert both["seed_std"] == pytest.approx(np.std(one, ddof=1), rel=1e-10) and both["n_seeds"] == 2


def _frame(variant, seed, rows, probs) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "variant": variant,
            "tau": 0.01,
            "seed": seed,
            "ticker": [t for t, _, _ in rows],
            "date": [d for _, d, _ in rows],
            "close": 100.0,
            "p_buy": probs[:, 0],
            "p_sell": probs[:, 1],
            "p_hold": probs[:, 2],
            "action": probs.argmax(axis=1).astype(np.int8),
            "label": np.array([y for _, _, y in rows], dtype=np.int8),
        }
    )


def test_the_frame_pairs_each_model_row_with_the_reference_of_its_ticker_day_and_drops_the_rest():
    rng = np.random.default_rng(10)
    rows = [(t, _day(k), int(rng.integers(-1, 3))) for k in range(30) for t in ("A", "B", "C", "D")]
    q = rng.dirichlet([2, 2, 2], len(rows))
    p_ref = rng.dirichlet([3, 3, 3], len(rows))
    model = _frame("splinegpt", 7, rows, stored_probabilities(q, W))  # as the predictions store them
    reference = _frame(REFERENCE, 0, rows, stored_probabilities(p_ref, REFERENCE_CLASS_WEIGHTS))
    reference = reference.filter(~((pl.col("ticker") == "A") & (pl.col("date") < _day(10))))
    rates = {0.01: np.array([0.3, 0.25, 0.45])}
    options = SkillOptions(n_boot=40, block_days=5, boot_seed=3)
    got = skill_beyond_reference_frame(model, reference, rates, options).row(0, named=True)
    # by hand: the rows the reference covers, the model de-weighted, the reference as it is, in (date, ticker) order
    kept = [i for i, (t, d, _) in enumerate(rows) if not (t == "A" and d < _day(10))]
    order = sorted(kept, key=lambda i: (rows[i][1], rows[i][0]))
    y = np.array([rows[i][2] for i in order])
    days = np.array([(rows[i][1] - DAY0).days for i in order])
    p_model = unweighted_probabilities(q[order].astype(np.float32).astype(np.float64), W)
    p_reference = p_ref[order].astype(np.float32).astype(np.float64)
    p_reference = p_reference / p_reference.sum(axis=1, keepdims=True)
    want = seed_mean_skill_difference(
        [p_model],
        [p_reference],
        [y],
        [days],
        rates[0.01],
        n_boot=40,
        block_days=5,
        seed=bootstrap_seed(3, ("splinegpt", 0.01)),
    )
    assert got["variant"] == "splinegpt" and got["paired_rows"] == int((y >= 0).sum()) == want["n_rows"]
    assert got[BEYOND] == pytest.approx(want["difference"], rel=1e-6)
    assert got[f"{BEYOND}_ci_low"] == pytest.approx(want["ci_low"], rel=1e-6)
    assert got[f"{BEYOND}_ci_high"] == pytest.approx(want["ci_high"], rel=1e-6)
    # the reference itself is not paired with itself
    both = pl.concat([model.cast(reference.schema), reference])
    assert skill_beyond_reference_frame(both, reference, rates, options)["variant"].to_list() == ["splinegpt"]


# ------------------------------------------------------------------------------------------ block bootstrap


def _ar1_days(phi: float, n_days=400, per_day=2, seed=0):
    """Days whose rows are all right or all wrong together, with an AR(1) day effect of autocorrelation phi: each
    day the model's p of the true label is 0.25 + 0.5 * sigmoid(x_d)."""
    rng = np.random.default_rng(seed)
    x = np.zeros(n_days)
    for d in range(1, n_days):
        x[d] = phi * x[d - 1] + rng.normal() * math.sqrt(1 - phi**2)
    days = np.repeat(np.arange(n_days), per_day)
    labels = rng.integers(0, 3, days.size)
    right = 0.25 + 0.5 / (1 + np.exp(-2 * x[days]))
    probs = np.tile(((1 - right) / 2)[:, None], (1, 3))
    probs[np.arange(days.size), labels] = right
    return probs, labels, days


def _width(table: dict) -> float:
    return table["log_loss_skill_ci_high"] - table["log_loss_skill_ci_low"]


def test_on_autocorrelated_days_the_block_interval_is_wider_than_the_single_day_one():
    probs, labels, days = _ar1_days(0.9)
    kw = dict(n_boot=400, seed=1)
    single = s.skill_table(probs, labels, days, [1 / 3] * 3, block_days=1, **kw)
    block = s.skill_table(probs, labels, days, [1 / 3] * 3, block_days=20, **kw)
    assert single["log_loss_skill"] == block["log_loss_skill"]  # the same point, other intervals
    assert _width(block) > 2.0 * _width(single)  # sqrt((1 + 0.9) / (1 - 0.9)) = 4.4 for long blocks
    # the control: on independent days the block changes little
    probs, labels, days = _ar1_days(0.0)
    single = s.skill_table(probs, labels, days, [1 / 3] * 3, block_days=1, **kw)
    block = s.skill_table(probs, labels, days, [1 / 3] * 3, block_days=20, **kw)
    assert 0.7 < _width(block) / _width(single) < 1.4
    default = s.skill_table(probs, labels, days, [1 / 3] * 3, **kw)  # 50-day blocks unless told
    block = s.skill_table(probs, labels, days, [1 / 3] * 3, block_days=50, **kw)
    assert all(default[k] == block[k] or (math.isnan(default[k]) and math.isnan(block[k])) for k in block)
    assert SkillOptions().block_days == s.DEFAULT_BLOCK_DAYS == 50


def test_the_frames_and_the_difference_use_the_block_they_are_given():
    probs, labels, days = _ar1_days(0.9, n_days=200, per_day=5)
    reference = np.full_like(probs, 1 / 3)
    kw = dict(n_boot=300, seed=2)
    single = seed_mean_skill_difference([probs], [reference], [labels], [days], [1 / 3] * 3, block_days=1, **kw)
    block = seed_mean_skill_difference([probs], [reference], [labels], [days], [1 / 3] * 3, block_days=20, **kw)
    assert block["ci_high"] - block["ci_low"] > 2.0 * (single["ci_high"] - single["ci_low"])
