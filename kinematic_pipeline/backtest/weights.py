"""Long/cash backtest of daily target weights (volatility-managed positions), with the conventions of ``engine``.

Volatility targeting (Moreira & Muir 2017; ``research/volatility.md``, last section): weight_t = min(1, sigma_target
/ sigma_hat_t), no leverage, no shorting. ``volatility_target_weights`` turns a log-variance forecast into weights;
``run_weight_backtest`` trades them.

Shared with ``engine.run_backtest`` (same code shape, same numbers): market-on-close fills with fractional shares;
cost_bps / 1e4 of the traded notional on every side; the cost basis (buy notional + buy cost, sold pro rata of the
average basis), realized gain = proceeds net of sell cost - basis share; the yearly tax on the net realized gain of
each full tax year (no carry-forward, no refund), paid from cash with a forced sale of just enough shares when cash
is short (side 2, its gain in the next year), cash going negative if all shares cannot cover the bill; the partial
last year untaxed and reported as ``pending_realized_gain``; order within a day fill -> tax -> mark to close[t];
no liquidation at the end; ``turnover`` = traded notional / mean equity. ``n_invalid`` is always 0.

Weights (this module's own rules):

- weights[t] in [0, 1] uses information up to close[t] and fills at close[t]. NaN keeps the previous target (the
  target before day 0 is 0: the account starts in cash); the kept target is rebalanced to like any other.
- The fill makes the position's value equal to w x the equity after the fill's cost: with E = cash + V, V = shares
  x close[t] before the trade, a buy of notional N solves V + N = w (E - c N), a sell V - N = w (E - c N). So
  w = 1 spends all cash (N + c N = cash, as the engine's Buy) and w = 0 sells every share (as its Sell): weights of
  only 0 and 1 give the engine's result for the matching Buy/Sell/Hold actions.
- A trade whose notional is below min_trade x E is skipped, as is one at or below ``DUST`` x E (float residue, e.g.
  the ~1e-13 left in cash by a tax sale while at w = 1, which the engine also leaves uninvested). No buy
  without positive cash, no sale without shares.
- ``WeightBacktestResult.weight`` is the held weight at the end of the day (after the tax): shares x close / equity,
  NaN where equity <= 0. ``position`` is 1 when shares > 0, as in the engine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from kinematic_pipeline.backtest.engine import TRADE_DTYPE, BacktestResult
from kinematic_pipeline.paper_conventions import PAPER, BacktestConfig

DUST = 1e-12  # trades of at most this fraction of equity are float residue, never filled


@dataclass(frozen=True)
class WeightBacktestResult(BacktestResult):
    weight: np.ndarray  # (T,) float64, shares x close[t] / equity[t] at the end of day t (NaN if equity <= 0)


@njit(cache=True)
def _fills(notional, wealth, min_trade, dust):
    """A trade is filled unless it is below min_trade of equity or float residue (at most dust of equity)."""
    return notional >= min_trade * wealth and notional > dust * wealth


@njit(cache=True)
def _weight_kernel(close, weights, cost_rate, initial_cash, tax_rate, tax_year_days, min_trade, dust):
    n = close.shape[0]
    equity = np.empty(n)
    held = np.empty(n)
    position = np.zeros(n, dtype=np.int8)
    t_day = np.empty(2 * n, dtype=np.int64)  # at most one fill and one tax sale per day
    t_side = np.empty(2 * n, dtype=np.int8)
    t_vals = np.empty((2 * n, 4))  # price, shares, notional, cost
    tax_day = np.empty(n // tax_year_days + 1, dtype=np.int64)
    tax_amt = np.empty(n // tax_year_days + 1)
    cash, shares, basis, year_gain, w = initial_cash, 0.0, 0.0, 0.0, 0.0
    n_trades, n_taxes = 0, 0
    for t in range(n):
        p = close[t]
        if not np.isnan(weights[t]):
            w = weights[t]
        value = shares * p
        wealth = cash + value
        gap = w * cash - (1.0 - w) * value  # target value - value, before the cost
        if gap > 0.0 and cash > 0.0:
            notional = gap / (1.0 + w * cost_rate)
            if _fills(notional, wealth, min_trade, dust):
                cost = notional * cost_rate
                bought = notional / p
                spent = cash if w == 1.0 else notional + cost
                shares += bought
                basis += spent
                cash = 0.0 if w == 1.0 else cash - spent
                t_day[n_trades], t_side[n_trades] = t, 0
                t_vals[n_trades, 0], t_vals[n_trades, 1] = p, bought
                t_vals[n_trades, 2], t_vals[n_trades, 3] = notional, cost
                n_trades += 1
        elif gap < 0.0 and shares > 0.0:
            notional = -gap / (1.0 - w * cost_rate)
            sold = notional / p
            if w == 0.0 or notional >= value:
                notional, sold = value, shares
            if _fills(notional, wealth, min_trade, dust):
                cost = notional * cost_rate
                sold_basis = basis * (sold / shares)
                year_gain += notional - cost - sold_basis
                cash += notional - cost
                t_day[n_trades], t_side[n_trades] = t, 1
                t_vals[n_trades, 0], t_vals[n_trades, 1] = p, sold
                t_vals[n_trades, 2], t_vals[n_trades, 3] = notional, cost
                n_trades += 1
                if sold == shares:
                    shares, basis = 0.0, 0.0
                else:
                    shares -= sold
                    basis -= sold_basis
        if (t + 1) % tax_year_days == 0:
            tax = tax_rate * max(0.0, year_gain)
            year_gain = 0.0
            tax_day[n_taxes], tax_amt[n_taxes] = t, tax
            n_taxes += 1
            shortfall = tax - cash
            if shortfall > 0.0 and shares > 0.0:
                sold = min(shares, shortfall / ((1.0 - cost_rate) * p))
                notional = sold * p
                cost = notional * cost_rate
                sold_basis = basis * (sold / shares)
                year_gain += notional - cost - sold_basis  # realized in the next tax year
                cash += notional - cost
                basis -= sold_basis
                shares -= sold
                t_day[n_trades], t_side[n_trades] = t, 2
                t_vals[n_trades, 0], t_vals[n_trades, 1] = p, sold
                t_vals[n_trades, 2], t_vals[n_trades, 3] = notional, cost
                n_trades += 1
            cash -= tax
        equity[t] = cash + shares * p
        held[t] = shares * p / equity[t] if equity[t] > 0.0 else np.nan
        position[t] = 1 if shares > 0.0 else 0
    return (
        equity,
        position,
        held,
        t_day[:n_trades],
        t_side[:n_trades],
        t_vals[:n_trades],
        tax_day[:n_taxes],
        tax_amt[:n_taxes],
        year_gain,
    )


def _validate(close, weights, cost_bps, min_trade):
    close = np.ascontiguousarray(close, dtype=np.float64)
    weights = np.ascontiguousarray(weights, dtype=np.float64)
    if close.ndim != 1 or weights.ndim != 1:
        raise ValueError(f"close and weights must be 1-D, got shapes {close.shape} and {weights.shape}")
    if close.shape[0] != weights.shape[0]:
        raise ValueError(f"close has {close.shape[0]} days but weights has {weights.shape[0]}")
    if close.shape[0] == 0:
        raise ValueError("close and weights are empty")
    bad = np.flatnonzero(~np.isfinite(close) | ~(close > 0))
    if bad.size:
        raise ValueError(f"close must be finite and > 0: day {bad[0]} has close={close[bad[0]].item()!r}")
    bad = np.flatnonzero(~np.isnan(weights) & ~((weights >= 0.0) & (weights <= 1.0)))
    if bad.size:
        raise ValueError(f"weights must be in [0, 1] or NaN: day {bad[0]} has weight={weights[bad[0]].item()!r}")
    if not (np.isfinite(cost_bps) and 0 <= cost_bps < 1e4):
        raise ValueError(f"cost_bps must be in [0, 10000), got {cost_bps}")
    if not (np.isfinite(min_trade) and min_trade >= 0):
        raise ValueError(f"min_trade must be a finite fraction of equity >= 0, got {min_trade}")
    return close, weights


def run_weight_backtest(
    close: np.ndarray,
    weights: np.ndarray,
    cost_bps: float = 0.0,
    config: BacktestConfig = PAPER,
    *,
    min_trade: float = 0.0,
) -> WeightBacktestResult:
    """Rebalance to ``weights`` (fraction of equity held, NaN keeps the last target) at each close, at one cost and
    with the account and tax of ``config`` (its ``costs_bps`` are the sweep's, not read here), as
    ``engine.run_backtest``; see the module docstring. A ValueError names the first bad day."""
    close, weights = _validate(close, weights, cost_bps, min_trade)
    cash, rate, year = float(config.initial_cash), float(config.tax_rate), int(config.tax_year_days)
    out = _weight_kernel(close, weights, float(cost_bps) / 1e4, cash, rate, year, float(min_trade), DUST)
    equity, position, held, t_day, t_side, t_vals, tax_day, tax_amt, pending = out
    trades = np.empty(t_day.shape[0], dtype=TRADE_DTYPE)
    trades["day"], trades["side"] = t_day, t_side
    for j, name in enumerate(("price", "shares", "notional", "cost")):
        trades[name] = t_vals[:, j]
    mean_equity = float(equity.mean())
    turnover = float(trades["notional"].sum()) / mean_equity if mean_equity > 0 else float("nan")
    return WeightBacktestResult(
        equity=equity,
        position=position,
        trades=trades,
        taxes=[(int(d), float(a)) for d, a in zip(tax_day, tax_amt)],
        n_invalid=0,
        turnover=turnover,
        pending_realized_gain=float(pending),
        weight=held,
    )


def volatility_target_weights(log_variance: np.ndarray, h: int, sigma_target: float) -> np.ndarray:
    """min(1, sigma_target / sigma_hat) with sigma_hat = sqrt(exp(log_variance) / h), the forecast daily volatility
    of a log-variance forecast of the summed variance over h sessions (``volatility_forecasts``). A NaN forecast
    gives NaN (``run_weight_backtest`` keeps the previous target)."""
    if not (np.isfinite(sigma_target) and sigma_target > 0):
        raise ValueError(f"sigma_target must be a finite daily volatility > 0, got {sigma_target}")
    if int(h) != h or h < 1:
        raise ValueError(f"h must be an integer >= 1, got {h}")
    lv = np.asarray(log_variance, dtype=np.float64)
    with np.errstate(divide="ignore", over="ignore"):
        return np.minimum(1.0, sigma_target / np.sqrt(np.exp(lv) / int(h)))
