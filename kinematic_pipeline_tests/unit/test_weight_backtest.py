"""Target-weight backtest (backtest.weights): the engine's result on 0/1 weights, a plain-Python twin of the kernel,
hand-computed rebalancing, the cash/cost ledger, no look-ahead, and volatility-target weights by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kinematic_pipeline.backtest.engine import SIDE_TAX_SELL, run_backtest
from kinematic_pipeline.backtest.weights import DUST, run_weight_backtest, volatility_target_weights
from kinematic_pipeline.paper_conventions import BacktestConfig

B, S, H = 0, 1, 2
FIELDS = ("day", "side", "price", "shares", "notional", "cost")


def _run(close, weights, cost_bps=0.0, min_trade=0.0, **conventions):
    config = BacktestConfig(**conventions)
    return run_weight_backtest(np.array(close, float), np.array(weights, float), cost_bps, config, min_trade=min_trade)


def naive_weight_backtest(
    close, weights, cost_bps=0.0, min_trade=0.0, initial_cash=10_000.0, tax_rate=0.32, tax_year_days=252
):
    """Plain-Python twin: each day hold target w of the post-cost equity, then the engine's yearly tax."""
    c = cost_bps / 10_000.0
    cash, shares, basis, gain, target = float(initial_cash), 0.0, 0.0, 0.0, 0.0
    equity, held, trades, taxes = [], [], [], []
    for day, (price, weight) in enumerate(zip(close, weights)):
        price = float(price)
        target = target if math.isnan(weight) else float(weight)
        value = shares * price
        wealth = cash + value
        want = target * cash - (1 - target) * value  # target x wealth - value
        if want > 0 and cash > 0:  # buy N: value + N = target x (wealth - c N)
            notional = want / (1 + target * c)
            if notional >= min_trade * wealth and notional > DUST * wealth:
                spent = cash if target == 1 else notional * (1 + c)
                trades.append(
                    dict(day=day, side=0, price=price, shares=notional / price, notional=notional, cost=notional * c)
                )
                shares, basis, cash = shares + notional / price, basis + spent, cash - spent
        elif want < 0 and shares > 0:  # sell N: value - N = target x (wealth - c N)
            notional = -want / (1 - target * c)
            to_sell = shares if (target == 0 or notional >= value) else notional / price
            notional = value if to_sell == shares else notional
            if notional >= min_trade * wealth and notional > DUST * wealth:
                sold_basis = basis * to_sell / shares
                trades.append(dict(day=day, side=1, price=price, shares=to_sell, notional=notional, cost=notional * c))
                gain += notional * (1 - c) - sold_basis
                cash += notional * (1 - c)
                shares, basis = shares - to_sell, basis - sold_basis
        if (day + 1) % tax_year_days == 0:
            tax = tax_rate * gain if gain > 0 else 0.0
            taxes.append((day, tax))
            gain = 0.0
            if cash < tax and shares > 0:
                to_sell = min(shares, (tax - cash) / (price * (1 - c)))
                notional = to_sell * price
                sold_basis = basis * to_sell / shares
                trades.append(dict(day=day, side=2, price=price, shares=to_sell, notional=notional, cost=notional * c))
                gain += notional * (1 - c) - sold_basis
                cash += notional * (1 - c)
                shares, basis = shares - to_sell, basis - sold_basis
            cash -= tax
        equity.append(cash + shares * price)
        held.append(shares * price / equity[-1] if equity[-1] > 0 else math.nan)
    return dict(equity=equity, weight=held, trades=trades, taxes=taxes, pending=gain)


def _assert_same(fast, equity, trades, taxes, pending):
    np.testing.assert_allclose(fast.equity, equity, rtol=1e-9)
    assert len(fast.trades) == len(trades)
    for field in FIELDS:
        np.testing.assert_allclose(
            fast.trades[field],
            trades[field] if isinstance(trades, np.ndarray) else [t[field] for t in trades],
            rtol=1e-9,
        )
    np.testing.assert_allclose(
        np.array(fast.taxes).reshape(-1, 2), np.array(taxes).reshape(-1, 2), rtol=1e-9, atol=1e-9
    )
    assert fast.pending_realized_gain == pytest.approx(pending, rel=1e-9, abs=1e-6)


def _actions_of(weights):
    """Buy where the target goes 0 -> 1 (the start is 0), Sell where 1 -> 0, Hold else (NaN keeps the target)."""
    actions, target = [], 0.0
    for w in weights:
        new = target if math.isnan(w) else w
        actions.append(B if (target, new) == (0.0, 1.0) else S if (target, new) == (1.0, 0.0) else H)
        target = new
    return np.array(actions, dtype=np.int8)


def _path(rng, n, vol=0.03):
    return 100 * np.exp(np.cumsum(rng.normal(0.0005, vol, n)))


def _binary_weights(rng, n):
    w = (np.cumsum(rng.random(n) < 0.15) % 2).astype(float)  # runs of 0 and 1
    w[rng.random(n) < 0.1] = np.nan
    return w


@pytest.mark.parametrize("seed", range(6))
def test_zero_one_weights_give_the_engines_result_for_the_mapped_actions(seed):
    rng = np.random.default_rng(seed)
    close, weights = _path(rng, 400), _binary_weights(rng, 400)
    cost, year = float(rng.choice([0.0, 5.0, 25.0])), int(rng.integers(5, 40))
    cfg = BacktestConfig(tax_year_days=year)
    fast = run_weight_backtest(close, weights, cost, cfg)
    ref = run_backtest(close, _actions_of(weights), cost, cfg)
    _assert_same(fast, ref.equity, ref.trades, ref.taxes, ref.pending_realized_gain)
    np.testing.assert_array_equal(fast.position, ref.position)
    assert ref.n_invalid == fast.n_invalid == 0
    assert sum(a > 0 for _, a in ref.taxes) >= 2  # several tax years paid


def test_zero_one_weights_match_the_engine_through_forced_tax_sales():
    close = np.array([100, 120, 120, 125, 130, 400, 400, 20, 20, 25, 30, 31], float)
    weights = np.array([1, 0, 1, 1, np.nan, 0, 1, 1, 1, 0, 1, np.nan])
    for cost in (0.0, 10.0):
        cfg = BacktestConfig(tax_year_days=4)
        fast, ref = run_weight_backtest(close, weights, cost, cfg), run_backtest(close, _actions_of(weights), cost, cfg)
        # day 3: the bill sells part of the position and leaves float dust in cash, kept at w = 1 on day 4 as the
        # engine keeps it; day 7: the bill takes every share
        np.testing.assert_array_equal(ref.trades["day"][ref.trades["side"] == SIDE_TAX_SELL], [3, 7])
        assert ref.equity[7] < 0 and ref.n_invalid == 2  # the engine's Sell in cash, then Buy without cash
        _assert_same(fast, ref.equity, ref.trades, ref.taxes, ref.pending_realized_gain)
        np.testing.assert_array_equal(fast.position, ref.position)
        assert fast.n_invalid == 0


@pytest.mark.parametrize("seed", range(6))
def test_kernel_agrees_with_the_loop_twin_on_random_weights(seed):
    rng = np.random.default_rng(100 + seed)
    n = 300
    close, weights = _path(rng, n), rng.uniform(0, 1, n)
    weights[rng.random(n) < 0.15] = np.nan
    weights[rng.random(n) < 0.1] = rng.choice([0.0, 1.0])
    kw = dict(cost_bps=(0.0, 5.0, 25.0)[seed % 3], min_trade=(0.0, 0.02)[seed // 3])
    kw |= dict(tax_rate=0.32, tax_year_days=int(rng.integers(3, 40)))
    fast, slow = _run(close, weights, **kw), naive_weight_backtest(close, weights, **kw)
    _assert_same(fast, slow["equity"], slow["trades"], slow["taxes"], slow["pending"])
    np.testing.assert_allclose(fast.weight, slow["weight"], rtol=1e-9)
    assert np.any(fast.trades["side"] == SIDE_TAX_SELL)  # the weight-1 days meet a tax bill


def test_constant_half_weight_rebalances_by_hand():
    r = _run([100, 200, 100], [0.5, 0.5, 0.5])
    # day 0: 5 000 in 50 sh; day 1: 50 sh worth 10 000, equity 15 000, target 7 500: sell 12.5 sh (2 500);
    # day 2: 37.5 sh worth 3 750, equity 11 250, target 5 625: buy 18.75 sh (1 875)
    np.testing.assert_allclose(r.equity, [10_000, 15_000, 11_250], rtol=1e-12)
    np.testing.assert_array_equal(r.trades["side"], [B, S, B])
    np.testing.assert_allclose(r.trades["shares"], [50, 12.5, 18.75], rtol=1e-12)
    np.testing.assert_allclose(r.trades["notional"], [5_000, 2_500, 1_875], rtol=1e-12)
    np.testing.assert_allclose(r.weight, 0.5, rtol=1e-12)
    assert r.taxes == [] and r.pending_realized_gain == pytest.approx(2_500 - 12.5 * 100, rel=1e-12)  # basis 100/sh
    assert r.turnover == pytest.approx(9_375 / np.mean([10_000, 15_000, 11_250]), rel=1e-12)


def test_with_costs_the_post_trade_value_is_the_target_exactly():
    c = 10 / 1e4
    r = _run([100, 150], [0.5, 0.2], cost_bps=10)
    n0 = 5_000 / (1 + 0.5 * c)  # N = 0.5 (10 000 - c N)
    assert r.trades["notional"][0] == pytest.approx(n0, rel=1e-12)
    assert n0 == pytest.approx(0.5 * (10_000 - c * n0), rel=1e-12)
    value, cash = n0 * 1.5, 10_000 - n0 * (1 + c)
    n1 = (value - 0.2 * (cash + value)) / (1 - 0.2 * c)  # value - N = 0.2 (equity - c N)
    assert r.trades["notional"][1] == pytest.approx(n1, rel=1e-12)
    np.testing.assert_allclose(r.equity, [10_000 - c * n0, cash + value - c * n1], rtol=1e-12)
    np.testing.assert_allclose(r.weight, [0.5, 0.2], rtol=1e-12)


def _ledger(r, close, initial_cash=10_000.0):
    """Cash and shares at each close rebuilt from the trades and taxes alone."""
    cash, shares = np.zeros(len(close)), np.zeros(len(close))
    for t in r.trades:
        sign = 1.0 if t["side"] == B else -1.0
        cash[t["day"]] -= sign * t["notional"] + t["cost"]
        shares[t["day"]] += sign * t["shares"]
    for day, amount in r.taxes:
        cash[day] -= amount
    return initial_cash + np.cumsum(cash), np.cumsum(shares)


def test_equity_is_cash_plus_shares_and_only_costs_and_taxes_leak():
    rng = np.random.default_rng(7)
    close, weights = _path(rng, 250), rng.uniform(0, 1, 250)
    frictionless = _run(close, weights, tax_rate=0.0)
    cash, shares = _ledger(frictionless, close)
    np.testing.assert_allclose(frictionless.equity, cash + shares * close, rtol=1e-10)
    pnl = np.r_[0.0, shares[:-1] * np.diff(close)]  # rebalancing at the close creates or destroys nothing
    np.testing.assert_allclose(frictionless.equity, 10_000 + np.cumsum(pnl), rtol=1e-10)
    r = _run(close, weights, cost_bps=20, tax_year_days=30)
    cash, shares = _ledger(r, close)
    np.testing.assert_allclose(r.equity, cash + shares * close, rtol=1e-10)
    pnl = np.r_[0.0, shares[:-1] * np.diff(close)]
    leak = r.trades["cost"].sum() + sum(a for _, a in r.taxes)
    assert r.trades["cost"].sum() == pytest.approx(20 / 1e4 * r.trades["notional"].sum(), rel=1e-12)
    assert r.equity[-1] == pytest.approx(10_000 + pnl.sum() - leak, rel=1e-10)


def test_min_trade_skips_small_rebalances():
    rng = np.random.default_rng(3)
    close = _path(rng, 200, vol=0.01)
    every, sparse = _run(close, np.full(200, 0.6)), _run(close, np.full(200, 0.6), min_trade=0.01)
    assert len(every.trades) == 200 and 1 < len(sparse.trades) < 50
    wealth = sparse.equity[sparse.trades["day"]]  # no cost, no tax: the equity of the fill
    assert np.all(sparse.trades["notional"] >= 0.01 * wealth)


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ([0.5, 1.2, 0.3], "day 1 has weight=1.2"),
        ([0.5, 0.3, -0.1], "day 2 has weight=-0.1"),
        ([np.inf, 0.3, 0.2], "day 0 has weight=inf"),
        ([0.5, 0.5], "3 days but weights has 2"),
    ],
)
def test_bad_weights_raise_naming_the_day(weights, message):
    with pytest.raises(ValueError, match=message):
        run_weight_backtest(np.array([100.0, 101.0, 102.0]), np.array(weights))


def test_nan_keeps_the_previous_target_and_a_leading_nan_stays_in_cash():
    close = [100, 110, 90, 95]
    kept = _run(close, [np.nan, 0.4, np.nan, np.nan], cost_bps=5)
    explicit = _run(close, [0.0, 0.4, 0.4, 0.4], cost_bps=5)
    np.testing.assert_array_equal(kept.equity, explicit.equity)
    np.testing.assert_array_equal(kept.trades, explicit.trades)
    assert kept.equity[0] == 10_000 and kept.trades["day"][0] == 1


def test_volatility_target_weights_by_hand():
    sigma = np.array([0.02, 0.005, np.nan, 0.01])
    lv = np.log(5 * sigma**2)  # the summed variance over h = 5 sessions
    np.testing.assert_allclose(volatility_target_weights(lv, 5, 0.01), [0.5, 1.0, np.nan, 1.0], rtol=1e-12)
    assert volatility_target_weights(np.array([np.log(4 * 0.04**2)]), 4, 0.01)[0] == pytest.approx(0.25)
    for bad in (0.0, -0.01, np.nan):
        with pytest.raises(ValueError, match="sigma_target"):
            volatility_target_weights(lv, 5, bad)
    with pytest.raises(ValueError, match="h must be"):
        volatility_target_weights(lv, 0, 0.01)


def test_no_look_ahead():
    rng = np.random.default_rng(11)
    close, weights = _path(rng, 200), rng.uniform(0, 1, 200)
    base = _run(close, weights, cost_bps=10.0, tax_year_days=20)
    for t in (0, 19, 57, 150):
        close2, weights2 = close.copy(), weights.copy()
        close2[t + 1 :] *= rng.uniform(0.5, 2.0, close2.size - t - 1)
        weights2[t + 1 :] = rng.uniform(0, 1, weights2.size - t - 1)
        other = _run(close2, weights2, cost_bps=10.0, tax_year_days=20)
        np.testing.assert_array_equal(other.equity[: t + 1], base.equity[: t + 1])
        np.testing.assert_array_equal(other.trades[other.trades["day"] <= t], base.trades[base.trades["day"] <= t])
