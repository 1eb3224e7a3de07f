"""Slow, obviously correct twins of kinematic_pipeline/backtest: the engine (plain Python, one day at a time)
and the block bootstrap of metrics (numpy, the whole index matrix at once)."""

from __future__ import annotations

import numpy as np


def naive_backtest(close, actions, cost_bps=0.0, initial_cash=10_000.0, tax_rate=0.32, tax_year_days=252):
    """Same rules as run_backtest; returns a dict of plain lists.

    Per day: fill the action (Buy in cash -> all-in, Sell while long -> all-out, else no-op), then on
    the last day of each full tax year pay tax_rate * max(0, that year's realized gain), selling just
    enough shares if cash is short (that sale's gain counts in the next year), then mark to close.
    """
    c = cost_bps / 10_000.0
    cash, shares, basis, gain_this_year = float(initial_cash), 0.0, 0.0, 0.0
    equity, position, trades, taxes, n_invalid = [], [], [], [], 0
    for day, (price, action) in enumerate(zip(close, actions)):
        price, action = float(price), int(action)
        is_long = shares > 0
        if action == 0 and not is_long and cash > 0:
            notional = cash / (1 + c)  # notional + cost = all the cash
            trades.append(
                dict(day=day, side=0, price=price, shares=notional / price, notional=notional, cost=notional * c)
            )
            shares, basis, cash = notional / price, cash, 0.0
        elif action == 1 and is_long:
            notional = shares * price
            proceeds = notional - notional * c
            trades.append(dict(day=day, side=1, price=price, shares=shares, notional=notional, cost=notional * c))
            gain_this_year += proceeds - basis
            cash += proceeds
            shares, basis = 0.0, 0.0
        elif action != 2:
            n_invalid += 1
        if (day + 1) % tax_year_days == 0:
            tax = tax_rate * gain_this_year if gain_this_year > 0 else 0.0
            taxes.append((day, tax))
            gain_this_year = 0.0
            if cash < tax and shares > 0:
                to_sell = min(shares, (tax - cash) / (price * (1 - c)))
                notional = to_sell * price
                proceeds = notional - notional * c
                sold_basis = basis * to_sell / shares
                trades.append(dict(day=day, side=2, price=price, shares=to_sell, notional=notional, cost=notional * c))
                gain_this_year += proceeds - sold_basis
                cash += proceeds
                basis -= sold_basis
                shares -= to_sell
            cash -= tax
        equity.append(cash + shares * price)
        position.append(1 if shares > 0 else 0)
    return dict(
        equity=equity, position=position, trades=trades, taxes=taxes, n_invalid=n_invalid, pending=gain_this_year
    )


def naive_block_bootstrap_sharpe_ci(equity, block=20, n_boot=2000, seed=0, alpha=0.05, rf_annual=0.04, periods=252):
    """Twin of metrics.block_bootstrap_sharpe_ci: materializes the (n_boot, n) index matrix and takes
    numpy's mean/std of every resample. Same block starts for the same seed."""
    equity = np.asarray(equity, dtype=np.float64)
    r = equity[1:] / equity[:-1] - 1.0
    n = r.shape[0]
    if n < 2:
        return float("nan"), float("nan")
    block = max(1, min(int(block), n))
    n_blocks = -(-n // block)
    starts = np.random.default_rng(seed).integers(0, n, size=(n_boot, n_blocks))
    idx = (starts[:, :, None] + np.arange(block)).reshape(n_boot, -1)[:, :n] % n  # (n_boot, n)
    resampled = r[idx]
    sd = resampled.std(axis=1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = (resampled.mean(axis=1) * periods - rf_annual) / (sd * np.sqrt(periods))
    s = s[(sd > 1e-12) & np.isfinite(s)]
    if s.size == 0:
        return float("nan"), float("nan")
    low, high = np.quantile(s, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)
