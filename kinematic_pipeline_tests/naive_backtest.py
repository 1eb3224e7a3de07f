"""Slow, obviously correct twin of kinematic_pipeline/backtest/engine.py (plain Python, one day at a time)."""

from __future__ import annotations


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
