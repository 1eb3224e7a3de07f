"""Hand-made metrics rows and frames: the report's tables and the paper's results are tested on them."""

from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl

DATES = [dt.date(2023, 1, 2) + dt.timedelta(days=i) for i in range(60)]
NAN = float("nan")


def metric_row(variant="splinegpt", tau=0.01, seed=0, ticker="NVDA", cost_bps=0.0, **values) -> dict:
    """One metrics row with plausible defaults; Buy & Hold rows get null tau and seed."""
    if variant == "buy_and_hold":
        tau = seed = None
    row = dict(variant=variant, tau=tau, seed=seed, ticker=ticker, cost_bps=cost_bps, days=60)
    row |= dict(first_date=DATES[0], last_date=DATES[-1], final_equity=12_000.0, total_return=0.2)
    row |= dict(sharpe=1.5, sharpe_ci_low=0.5, sharpe_ci_high=2.5, sortino=2.0, max_drawdown=-0.1)
    row |= dict(turnover_annual=40.0, n_trades=10, n_invalid=3, taxes_paid=0.0, pending_realized_gain=0.0)
    row |= dict(n_buy=20, n_sell=20, n_hold=20, action_rate=2 / 3, liquidation_equilibrium=False)
    row |= dict(exposure=0.5, accuracy=0.55, brier=0.6, ece=0.05)
    return row | values


def metrics_frame(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows).with_columns(pl.col("tau").cast(pl.Float64), pl.col("seed").cast(pl.Int64))


ALWAYS_SELL = dict(
    total_return=0.0, sharpe=NAN, sortino=NAN, sharpe_ci_low=NAN, sharpe_ci_high=NAN, max_drawdown=0.0
) | dict(n_buy=0, n_sell=60, n_hold=0, action_rate=1.0, exposure=0.0, liquidation_equilibrium=True)


def policy_series(variant, tau, seed, ticker, dates, close, probs: np.ndarray, labels: np.ndarray) -> pl.DataFrame:
    """One policy's rows as the sweep reads them (``sweep.INPUT_SCHEMA``): float32 probabilities [n, 3] (Buy,
    Sell, Hold), their argmax as the action, int8 labels (-1: no label)."""
    return pl.DataFrame(
        {
            "variant": variant,
            "tau": tau,
            "seed": seed,
            "ticker": ticker,
            "date": dates,
            "close": close,
            "p_buy": probs[:, 0].astype(np.float32),
            "p_sell": probs[:, 1].astype(np.float32),
            "p_hold": probs[:, 2].astype(np.float32),
            "action": probs.argmax(axis=1).astype(np.int8),
            "label": np.asarray(labels).astype(np.int8),
        }
    ).with_columns(pl.col("date").cast(pl.Date))
