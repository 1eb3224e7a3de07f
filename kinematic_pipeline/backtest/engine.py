"""Long/cash backtest of a daily Buy/Sell/Hold policy, filled market-on-close, with costs and yearly tax.

Conventions (the paper's "Backtest Constraints" and "Trading Policy & State Machine"; also in
``metrics.CONVENTIONS``):

- Actions: 0 = Buy, 1 = Sell, 2 = Hold. The action of day t uses information up to close[t] and fills at
  close[t] (MOC). Fractional shares.
- State machine: Buy in cash -> all-in; Sell while long -> all out; anything else keeps the state. Buy
  while long and Sell in cash count as invalid transitions (Hold is not invalid). A Buy with no positive
  cash (only possible after a tax bill larger than the account) is also a no-op counted as invalid.
- Costs: cost_bps / 1e4 of the traded notional, on every side. A Buy spends all cash: notional N and cost
  c*N with N + c*N = cash. A Sell receives notional*(1 - c).
- Taxes: at the end of each full tax year (day indices tax_year_days-1, 2*tax_year_days-1, ...) pay
  tax_rate * max(0, net realized gains of that year). Losses offset gains of the same year only; no
  carry-forward, no refund. A partial last year is NOT taxed; its realized gain is reported as
  ``pending_realized_gain``. Realized gain of a sale = proceeds net of sell cost - cost basis (buy
  notional + buy cost, pro rata for partial sales).
- Tax from a long position: taxes are paid from cash; when cash is short the shortfall is raised by
  selling just enough shares at that close (paying the sell cost; side 2 in ``trades``). That forced
  sale's realized gain belongs to the next tax year (it happens after this year's bill is fixed). If all
  shares cannot cover the bill, cash goes negative (the account owes the remainder).
- Order within a day: fill the action, then pay tax (on a tax date), then mark equity to close[t].
- End of period: positions are left open (no forced liquidation) and marked to the last close.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from kinematic_pipeline.paper_conventions import PAPER, BacktestConfig
from kinematic_pipeline.tasks.actions import BUY, HOLD, SELL

SIDE_BUY, SIDE_SELL, SIDE_TAX_SELL = 0, 1, 2  # trade sides (tax sale: shares sold to pay a tax bill)

TRADE_DTYPE = np.dtype(
    [
        ("day", np.int64),
        ("side", np.int8),
        ("price", np.float64),
        ("shares", np.float64),
        ("notional", np.float64),
        ("cost", np.float64),
    ]
)


@dataclass(frozen=True)
class BacktestResult:
    equity: np.ndarray  # (T,) float64, marked to close[t] after the day's fill and tax
    position: np.ndarray  # (T,) int8, 1 when long at the end of day t
    trades: np.ndarray  # structured array of TRADE_DTYPE, in time order
    taxes: list[tuple[int, float]]  # (day, amount) for every full tax year, amount may be 0
    n_invalid: int  # Buy while long + Sell in cash (+ Buy with no cash)
    turnover: float  # total traded notional / mean equity (not annualized; see metrics)
    pending_realized_gain: float  # realized gain of the untaxed partial last year


@njit(cache=True)
def _backtest_kernel(close, actions, cost_rate, initial_cash, tax_rate, tax_year_days):
    n = close.shape[0]
    equity = np.empty(n)
    position = np.zeros(n, dtype=np.int8)
    t_day = np.empty(2 * n, dtype=np.int64)  # at most one fill and one tax sale per day
    t_side = np.empty(2 * n, dtype=np.int8)
    t_vals = np.empty((2 * n, 4))  # price, shares, notional, cost
    tax_day = np.empty(n // tax_year_days + 1, dtype=np.int64)
    tax_amt = np.empty(n // tax_year_days + 1)
    cash, shares, basis, year_gain = initial_cash, 0.0, 0.0, 0.0
    n_trades, n_taxes, n_invalid = 0, 0, 0
    for t in range(n):
        p, a = close[t], actions[t]
        long = shares > 0.0
        if a == 0 and not long and cash > 0.0:
            notional = cash / (1.0 + cost_rate)
            cost = notional * cost_rate
            shares, basis, cash = notional / p, cash, 0.0
            t_day[n_trades], t_side[n_trades] = t, 0
            t_vals[n_trades, 0], t_vals[n_trades, 1] = p, shares
            t_vals[n_trades, 2], t_vals[n_trades, 3] = notional, cost
            n_trades += 1
        elif a == 1 and long:
            notional = shares * p
            cost = notional * cost_rate
            year_gain += notional - cost - basis
            cash += notional - cost
            t_day[n_trades], t_side[n_trades] = t, 1
            t_vals[n_trades, 0], t_vals[n_trades, 1] = p, shares
            t_vals[n_trades, 2], t_vals[n_trades, 3] = notional, cost
            n_trades += 1
            shares, basis = 0.0, 0.0
        elif a != 2:
            n_invalid += 1
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
        position[t] = 1 if shares > 0.0 else 0
    return (
        equity,
        position,
        t_day[:n_trades],
        t_side[:n_trades],
        t_vals[:n_trades],
        tax_day[:n_taxes],
        tax_amt[:n_taxes],
        n_invalid,
        year_gain,
    )


def _validate(close, actions, cost_bps):
    close = np.ascontiguousarray(close, dtype=np.float64)
    actions_raw = np.asarray(actions)
    if close.ndim != 1 or actions_raw.ndim != 1:
        raise ValueError(f"close and actions must be 1-D, got shapes {close.shape} and {actions_raw.shape}")
    if close.shape[0] != actions_raw.shape[0]:
        raise ValueError(f"close has {close.shape[0]} days but actions has {actions_raw.shape[0]}")
    if close.shape[0] == 0:
        raise ValueError("close and actions are empty")
    bad = np.flatnonzero(~np.isfinite(close) | ~(close > 0))
    if bad.size:
        raise ValueError(f"close must be finite and > 0: day {bad[0]} has close={close[bad[0]].item()!r}")
    bad = np.flatnonzero(~np.isin(actions_raw, (BUY, SELL, HOLD)))
    if bad.size:
        raise ValueError(f"actions must be in {{0, 1, 2}}: day {bad[0]} has action={actions_raw[bad[0]].item()!r}")
    if not (np.isfinite(cost_bps) and 0 <= cost_bps < 1e4):
        raise ValueError(f"cost_bps must be in [0, 10000), got {cost_bps}")
    return close, actions_raw.astype(np.int8)


def run_backtest(
    close: np.ndarray, actions: np.ndarray, cost_bps: float = 0.0, config: BacktestConfig = PAPER
) -> BacktestResult:
    """Simulate the long/cash state machine on daily closes at one cost, with the account and tax of ``config``
    (checked when it was built; its ``costs_bps`` are the sweep's, not read here); see the module docstring."""
    close, actions = _validate(close, actions, cost_bps)
    cash, rate, year = float(config.initial_cash), float(config.tax_rate), int(config.tax_year_days)
    out = _backtest_kernel(close, actions, float(cost_bps) / 1e4, cash, rate, year)
    equity, position, t_day, t_side, t_vals, tax_day, tax_amt, n_invalid, pending = out
    trades = np.empty(t_day.shape[0], dtype=TRADE_DTYPE)
    trades["day"], trades["side"] = t_day, t_side
    for j, name in enumerate(("price", "shares", "notional", "cost")):
        trades[name] = t_vals[:, j]
    mean_equity = float(equity.mean())
    turnover = float(trades["notional"].sum()) / mean_equity if mean_equity > 0 else float("nan")
    return BacktestResult(
        equity=equity,
        position=position,
        trades=trades,
        taxes=[(int(d), float(a)) for d, a in zip(tax_day, tax_amt)],
        n_invalid=int(n_invalid),
        turnover=turnover,
        pending_realized_gain=float(pending),
    )


def buy_and_hold(close: np.ndarray, cost_bps: float = 0.0, config: BacktestConfig = PAPER) -> BacktestResult:
    """The paper's benchmark: Buy at close[0], Hold to the end.

    Never sold, so no gain is ever realized and no tax is paid (the yearly tax dates are listed with
    amount 0); the final position is marked to the last close, not liquidated, so the benchmark carries
    an unpaid tax on its unrealized gain. Only the buy cost is charged.
    """
    actions = np.full(np.shape(close)[0] if np.ndim(close) == 1 else 0, HOLD, dtype=np.int8)
    if actions.size:
        actions[0] = BUY
    return run_backtest(close, actions, cost_bps, config)
