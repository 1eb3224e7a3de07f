"""Backtest engine (golden hand-computed paths, twin agreement, no look-ahead) and metrics (hand-built cases)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kinematic_pipeline.backtest import metrics as m
from kinematic_pipeline.backtest.engine import SIDE_TAX_SELL, buy_and_hold, run_backtest
from kinematic_pipeline.paper_conventions import PAPER, BacktestConfig
from kinematic_pipeline_tests.naive_backtest import naive_backtest

B, S, H = 0, 1, 2
RTOL = 1e-12


def _run(close, actions, cost_bps=0.0, **conventions):
    """run_backtest at cost_bps with the paper's conventions but for ``conventions`` (BacktestConfig fields)."""
    config = BacktestConfig(**conventions)
    return run_backtest(np.array(close, dtype=float), np.array(actions, dtype=np.int8), cost_bps, config)


# ---------------------------------------------------------------------------------------------- engine


def test_costs_invalid_transitions_and_a_taxed_gain_year_match_hand_arithmetic():
    c = 10 / 1e4  # 10 bps per side
    r = _run([100, 110, 121, 110, 100, 100], [B, H, B, S, S, H], cost_bps=10, tax_rate=0.32, tax_year_days=4)
    buy_notional = 10_000 / (1 + c)  # notional + c * notional = all the cash
    shares = buy_notional / 100
    proceeds = shares * 110 * (1 - c)  # sold at 110 on day 3, minus the sell cost
    gain = proceeds - 10_000  # basis = buy notional + buy cost = 10 000
    tax = 0.32 * gain  # day 3 closes the first 4-day tax year
    expected = [shares * 100, shares * 110, shares * 121, proceeds - tax, proceeds - tax, proceeds - tax]
    np.testing.assert_allclose(r.equity, expected, rtol=RTOL)
    np.testing.assert_array_equal(r.position, [1, 1, 1, 0, 0, 0])
    assert r.n_invalid == 2  # Buy while long (day 2), Sell in cash (day 4)
    assert r.taxes == [(3, pytest.approx(tax, rel=RTOL))]  # days 4-5 are a partial year: untaxed
    assert r.pending_realized_gain == 0.0
    np.testing.assert_array_equal(r.trades["day"], [0, 3])
    np.testing.assert_array_equal(r.trades["side"], [B, S])
    np.testing.assert_allclose(r.trades["cost"], [buy_notional * c, shares * 110 * c], rtol=RTOL)
    np.testing.assert_allclose(r.turnover, (buy_notional + shares * 110) / np.mean(expected), rtol=RTOL)


def test_tax_years_offset_losses_within_a_year_only_and_skip_the_partial_last_year():
    close = [100, 120, 120, 108, 100, 90, 90, 90, 90, 99, 99, 99, 100, 110]
    actions = [B, S, B, S, B, S, H, H, B, S, H, H, B, S]
    r = _run(close, actions, tax_rate=0.32, tax_year_days=4)
    # year 1: +2000 (100 sh 100 -> 120) and -1200 (100 sh 120 -> 108): net 800, tax 256
    y1 = 10_800 - 0.32 * 800  # 10 544
    # year 2: 105.44 sh bought at 100, sold at 90: loss, no tax, no refund
    y2 = y1 / 100 * 90  # 9 489.6
    # year 3: 105.44 sh bought at 90, sold at 99: +948.96, taxed in full (no carry-forward of year 2)
    g3 = y2 / 90 * 99 - y2
    y3 = y2 + g3 - 0.32 * g3
    # partial year 4: bought at 100, sold at 110, gain pending, no tax
    g4 = y3 / 100 * 110 - y3
    expected = [10_000, 12_000, 12_000, y1, y1, y2, y2, y2, y2, y2 + g3, y2 + g3, y3, y3, y3 + g4]
    np.testing.assert_allclose(r.equity, expected, rtol=RTOL)
    np.testing.assert_allclose([a for _, a in r.taxes], [256.0, 0.0, 0.32 * g3], rtol=RTOL)
    assert [d for d, _ in r.taxes] == [3, 7, 11]
    assert r.pending_realized_gain == pytest.approx(g4, rel=RTOL)
    assert r.n_invalid == 0


def test_a_tax_bill_while_fully_invested_sells_just_enough_shares():
    r = _run([100, 120, 120, 130], [B, S, B, H], tax_rate=0.32, tax_year_days=3)
    tax = 0.32 * 2_000  # gain of the round trip 100 -> 120 on 100 shares
    sold = tax / 120  # cash is 0 after the re-entry at 120
    np.testing.assert_allclose(r.equity, [10_000, 12_000, 12_000 - tax, (100 - sold) * 130], rtol=RTOL)
    np.testing.assert_array_equal(r.position, [1, 0, 1, 1])
    assert r.trades["side"][-1] == SIDE_TAX_SELL
    assert r.trades["shares"][-1] == pytest.approx(sold, rel=RTOL)
    assert r.pending_realized_gain == pytest.approx(0.0, abs=1e-9)  # sold at its cost price


def test_buy_and_hold_pays_the_buy_cost_only_and_no_tax():
    close = np.array([100.0, 110.0, 90.0, 120.0, 130.0])
    r = buy_and_hold(close, cost_bps=10, config=BacktestConfig(tax_rate=0.32, tax_year_days=2))
    np.testing.assert_allclose(r.equity, 10_000 / 1.001 * close / 100, rtol=RTOL)
    np.testing.assert_array_equal(r.position, [1, 1, 1, 1, 1])
    assert r.taxes == [(1, 0.0), (3, 0.0)]
    assert len(r.trades) == 1 and r.n_invalid == 0


@pytest.mark.parametrize(
    ("close", "actions", "message"),
    [
        ([100, 101], [B], "2 days but actions has 1"),
        ([100, 101, 102], [B, H, 3], "day 2 has action=3"),
        ([100, np.nan, 102], [B, H, H], "day 1 has close=nan"),
        ([100, 0.0, 102], [B, H, H], "day 1 has close=0.0"),
        ([100, 101], [B, -1], "day 1 has action=-1"),
    ],
)
def test_invalid_inputs_raise_naming_the_day(close, actions, message):
    with pytest.raises(ValueError, match=message):
        run_backtest(np.array(close, dtype=float), np.array(actions))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("costs_bps", (), "costs_bps is empty"),
        ("costs_bps", (5, 5), "costs_bps has duplicates"),
        ("costs_bps", (-1,), r"costs_bps must be in \[0, 10000\)"),
        ("initial_cash", 0.0, "initial_cash must be > 0"),
        ("initial_cash", math.inf, "initial_cash must be > 0"),
        ("tax_rate", 1.5, r"tax_rate must be in \[0, 1\]"),
        ("tax_year_days", 0, "tax_year_days must be >= 1"),
        ("bootstrap_resamples", -1, "bootstrap_resamples=-1"),
    ],
)
def test_bad_conventions_raise_naming_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        BacktestConfig(**{field: value})


def test_conventions_keep_costs_as_floats_and_default_to_the_papers():
    assert BacktestConfig(costs_bps=[10, 0]).costs_bps == (10.0, 0.0)
    assert PAPER == BacktestConfig() and PAPER.tax_rate == 0.32 and PAPER.initial_cash == 10_000.0


def _random_path(rng, n):
    close = 100 * np.exp(np.cumsum(rng.normal(0.0005, 0.03, n)))
    actions = rng.choice(3, size=n, p=[0.3, 0.3, 0.4]).astype(np.int8)
    return close, actions


@pytest.mark.parametrize("seed", range(8))
def test_kernel_agrees_with_the_naive_twin_on_random_paths(seed):
    rng = np.random.default_rng(seed)
    close, actions = _random_path(rng, 300)
    kw = dict(cost_bps=float(rng.choice([0.0, 5.0, 25.0])), tax_rate=0.32, tax_year_days=int(rng.integers(3, 40)))
    fast, slow = _run(close, actions, **kw), naive_backtest(close, actions, **kw)
    np.testing.assert_allclose(fast.equity, slow["equity"], rtol=1e-10)
    np.testing.assert_array_equal(fast.position, slow["position"])
    assert fast.n_invalid == slow["n_invalid"]
    assert len(fast.trades) == len(slow["trades"])
    for field in ("day", "side", "price", "shares", "notional", "cost"):
        np.testing.assert_allclose(fast.trades[field], [t[field] for t in slow["trades"]], rtol=1e-10)
    np.testing.assert_allclose(np.array(fast.taxes), np.array(slow["taxes"]), rtol=1e-10, atol=1e-9)
    assert fast.pending_realized_gain == pytest.approx(slow["pending"], rel=1e-9, abs=1e-6)


def test_tax_sales_are_exercised_by_the_random_twin_paths():
    rng = np.random.default_rng(3)
    close, actions = _random_path(rng, 300)
    r = _run(close, actions, cost_bps=5.0, tax_year_days=7)
    assert np.any(r.trades["side"] == SIDE_TAX_SELL)


def test_equity_does_not_change_when_future_closes_and_actions_change():
    rng = np.random.default_rng(11)
    close, actions = _random_path(rng, 200)
    base = _run(close, actions, cost_bps=10.0, tax_year_days=20)
    for t in (0, 19, 57, 150):
        close2, actions2 = close.copy(), actions.copy()
        close2[t + 1 :] *= rng.uniform(0.5, 2.0, close2.size - t - 1)
        actions2[t + 1 :] = rng.integers(0, 3, actions2.size - t - 1)
        other = _run(close2, actions2, cost_bps=10.0, tax_year_days=20)
        np.testing.assert_array_equal(other.equity[: t + 1], base.equity[: t + 1])
        np.testing.assert_array_equal(other.position[: t + 1], base.position[: t + 1])


def test_always_sell_is_a_liquidation_equilibrium_with_no_sharpe():
    close = np.linspace(100, 150, 50)
    r = run_backtest(close, np.full(50, S, dtype=np.int8))
    assert m.liquidation_equilibrium(r.position)
    assert math.isnan(m.sharpe(r.equity))
    assert math.isnan(m.sortino(r.equity))  # N/A, as the Sharpe (the formula alone would give -sqrt(252))
    np.testing.assert_array_equal(r.equity, 10_000.0)
    assert r.n_invalid == 50
    assert not m.liquidation_equilibrium(buy_and_hold(close).position)


# --------------------------------------------------------------------------------------------- metrics

RETURNS = np.array([0.01, -0.01, 0.02, 0.0])
EQUITY = 100 * np.cumprod(np.r_[1.0, 1 + RETURNS])


def test_returns_and_total_return_by_hand():
    np.testing.assert_allclose(m.daily_returns([100, 110, 99]), [0.1, -0.1], rtol=RTOL)
    assert m.total_return([100, 110, 99]) == pytest.approx(-0.01, rel=RTOL)


def test_sharpe_by_hand():
    mean = 0.005  # (0.01 - 0.01 + 0.02 + 0) / 4
    std = math.sqrt((0.005**2 + 0.015**2 + 0.015**2 + 0.005**2) / 3)  # ddof = 1
    expected = (mean * 252 - 0.04) / (std * math.sqrt(252))
    assert m.sharpe(EQUITY) == pytest.approx(expected, rel=1e-10)


def test_sortino_by_hand_uses_full_sample_downside_deviation():
    rf_d = 0.04 / 252
    downside = math.sqrt(((-0.01 - rf_d) ** 2 + (0.0 - rf_d) ** 2) / 4) * math.sqrt(252)  # 2 of 4 days below rf
    assert m.sortino(EQUITY) == pytest.approx((0.005 * 252 - 0.04) / downside, rel=1e-10)


def test_constant_growth_has_no_sharpe_and_no_sortino():
    equity = 100 * 1.001 ** np.arange(300)
    assert math.isnan(m.sharpe(equity))  # std is 0 up to rounding
    assert math.isnan(m.sortino(equity))  # every day beats rf/252 = 0.0159%


def test_max_drawdown_of_a_known_path():
    assert m.max_drawdown([100, 120, 90, 130, 104]) == pytest.approx(-0.25, rel=RTOL)  # 120 -> 90
    assert m.max_drawdown([1, 2, 3]) == 0.0


def test_annualized_turnover_by_hand():
    equity = np.full(126, 10_000.0)  # half a year
    assert m.annualized_turnover(np.array([10_000.0, 10_000.0]), equity) == pytest.approx(4.0, rel=RTOL)
    r = run_backtest(np.full(252, 50.0), np.r_[B, S, np.full(250, H)].astype(np.int8))
    assert m.annualized_turnover(r) == pytest.approx(2.0, rel=RTOL)  # one round trip of 10 000 in a year


def test_action_distribution_and_rate():
    actions = np.array([B, B, S, H, H, H, H, H])
    assert m.action_distribution(actions) == {"Buy": 2, "Sell": 1, "Hold": 5}
    assert m.action_rate(actions) == pytest.approx(3 / 8)


def test_confusion_matrix_two_classes_ignores_unlabelled_days():
    cm = m.confusion_matrix([B, B, S, S, B], [B, S, S, S, -1])
    np.testing.assert_array_equal(cm, [[1, 0, 0], [1, 2, 0], [0, 0, 0]])


def test_brier_score_one_hot_and_uniform():
    labels = np.array([0, 1, 2, -1])
    right = np.eye(3)[[0, 1, 2, 0]]
    assert m.brier_score(right, labels) == 0.0
    assert m.brier_score(np.eye(3)[[1, 2, 0, 0]], labels) == pytest.approx(2.0)  # every one-hot wrong
    uniform = np.full((4, 3), 1 / 3)
    assert m.brier_score(uniform, labels) == pytest.approx((2 / 3) ** 2 + 2 * (1 / 3) ** 2)


def test_ece_is_zero_for_a_calibrated_toy_and_known_when_miscalibrated():
    probs = np.tile([0.6, 0.3, 0.1], (10, 1))
    calibrated = np.array([0] * 6 + [1] * 4)  # 60% correct at confidence 0.6
    assert m.expected_calibration_error(probs, calibrated) == pytest.approx(0.0, abs=1e-12)
    probs = np.vstack([np.tile([0.9, 0.05, 0.05], (4, 1)), np.tile([0.55, 0.45, 0.0], (4, 1))])
    labels = np.array([0, 0, 0, 0, 0, 0, 1, 1])  # 100% correct at 0.9, 50% at 0.55
    assert m.expected_calibration_error(probs, labels) == pytest.approx(0.5 * 0.1 + 0.5 * 0.05, rel=1e-10)


def test_reliability_curve_bins():
    p = np.array([0.05, 0.15, 0.15, 0.95, 1.0])
    y = np.array([0, 1, 0, 1, 1])
    mean_p, freq, count = m.reliability_curve(p, y, n_bins=10)
    np.testing.assert_array_equal(count, [1, 2, 0, 0, 0, 0, 0, 0, 0, 2])
    np.testing.assert_allclose(mean_p[[0, 1, 9]], [0.05, 0.15, 0.975])
    np.testing.assert_allclose(freq[[0, 1, 9]], [0.0, 0.5, 1.0])
    assert np.isnan(freq[2])


def test_block_bootstrap_ci_is_deterministic_and_covers_the_point_estimate():
    rng = np.random.default_rng(0)
    equity = 10_000 * np.cumprod(1 + rng.normal(0.0006, 0.012, 1500))
    ci = m.block_bootstrap_sharpe_ci(equity, seed=7)
    assert ci == m.block_bootstrap_sharpe_ci(equity, seed=7)
    assert ci != m.block_bootstrap_sharpe_ci(equity, seed=8)
    assert ci[0] < m.sharpe(equity) < ci[1]
    assert ci[1] - ci[0] < 2.0  # ~6 years of data: the interval is informative


def test_conventions_state_every_choice():
    for phrase in (
        "252",
        "4%",
        "ddof=1",
        "downside deviation",
        "cost_bps/1e4",
        "32%",
        "no carry-forward",
        "market-on-close",
        "partial",
    ):
        assert phrase in m.conventions(PAPER)
