"""Volatility targeting with each forecaster of the volatility task (issue 53; Moreira & Muir 2017): what a user
trades with a variance forecast, against Buy & Hold, through the target-weight backtest (``weights.py``: the
engine's fills, costs and taxes).

For a ticker and a forecaster, the position held from the close of day t is

    w_t = min(1, sigma_target / sigma_hat_t),   sigma_hat_t = sqrt(exp(log_variance_t) / h)

(``weights.volatility_target_weights``: the forecast daily volatility; no leverage, no shorting, as the paper's
backtest), where sigma_target is the ticker's own daily volatility over the training days (the sample standard
deviation of its close-to-close log returns dated <= ``train_end``): known before any test day, so a forecaster
that always forecasts that variance holds the ticker all the time, as Buy & Hold does. Every forecaster trades the
same ticker-days (``volatility_metrics.common_rows``); Buy & Hold is weight 1 on them. A table row is the mean over
tickers of each ticker's annualized Sharpe (``metrics.sharpe``: the paper's, the annual risk-free rate subtracted),
maximum drawdown, total return, mean weight and turnover. ``policy_targeting`` is one policy's backtest per ticker
and cost (what its ``backtests`` partition writes and ``lineage`` traces to its shards), sigma_target from its own
fold's training days. Pure: frames in, a frame out; no dagster, no file I/O.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl

from kinematic_pipeline.backtest.metrics import max_drawdown, sharpe, total_return
from kinematic_pipeline.backtest.weights import run_weight_backtest, volatility_target_weights
from kinematic_pipeline.paper_conventions import PAPER, BacktestConfig

BUY_AND_HOLD = "buy_and_hold"
TARGETING_SCHEMA = {
    "forecaster": pl.String,
    "tickers": pl.Int64,
    "days": pl.Int64,
    "sharpe": pl.Float64,
    "max_drawdown": pl.Float64,
    "total_return": pl.Float64,
    "mean_weight": pl.Float64,
    "turnover": pl.Float64,
}


POLICY_TARGETING_SCHEMA = {  # one policy's volatility-targeted backtests (``policy_targeting``), one row per ticker and cost
    "variant": pl.String,
    "task": pl.String,
    "seed": pl.Int64,
    "fold": pl.String,
    "ticker": pl.String,
    "cost_bps": pl.Float64,
    "days": pl.Int64,
    "first_date": pl.Date,
    "last_date": pl.Date,
    "sigma_target": pl.Float64,  # the ticker's daily volatility over the fold's training days
    "sharpe": pl.Float64,
    "max_drawdown": pl.Float64,
    "total_return": pl.Float64,
    "mean_weight": pl.Float64,
    "turnover": pl.Float64,
    "buy_and_hold_sharpe": pl.Float64,  # Buy & Hold on the same days, costs and taxes
    "buy_and_hold_return": pl.Float64,
}


def target_volatility(bars: pl.DataFrame, train_end: dt.date) -> dict[str, float]:
    """{ticker: the sample std (ddof 1) of its close-to-close log returns dated <= ``train_end``} (tickers with at
    least two such returns)."""
    # the forecasters' module loads arch and statsmodels: here, not where the stages import this module's schema
    from kinematic_pipeline.backtest.volatility_forecasts import log_returns

    returns = log_returns(bars).filter((pl.col("date") <= train_end) & pl.col("r").is_finite())
    std = returns.group_by("ticker").agg(pl.col("r").std(ddof=1).alias("sigma"), pl.len().alias("n"))
    return {t: float(s) for t, s, n in std.iter_rows() if n >= 2 and s is not None and s > 0}


def targeting_table(
    scored: pl.DataFrame,
    bars: pl.DataFrame,
    h: int,
    train_end: dt.date,
    cost_bps: float,
    config: BacktestConfig = PAPER,
) -> pl.DataFrame:
    """One row per forecaster of ``scored`` (``volatility_metrics.scored_frame``), then Buy & Hold
    (``TARGETING_SCHEMA``): each ticker's volatility-targeted backtest at ``cost_bps`` on the common ticker-days,
    sigma_target from its training days (``target_volatility``), averaged over tickers."""
    from kinematic_pipeline.backtest.volatility_metrics import common_rows

    wide, names = common_rows(scored)
    sigma = target_volatility(bars, train_end)
    wide = wide.join(bars.select("ticker", "date", "close"), on=["ticker", "date"], how="inner").filter(
        pl.col("ticker").is_in(list(sigma))
    )
    per: dict[str, list[tuple]] = {n: [] for n in (*names, BUY_AND_HOLD)}
    for (ticker,), frame in wide.sort("ticker", "date").group_by("ticker", maintain_order=True):
        if frame.height < 2:
            continue
        close = frame["close"].to_numpy()
        for name in per:
            w = (
                np.ones(frame.height)
                if name == BUY_AND_HOLD
                else volatility_target_weights(frame[name].to_numpy(), h, sigma[ticker])
            )
            result = run_weight_backtest(close, w, cost_bps, config)
            per[name].append(
                (
                    sharpe(result.equity, config.rf_annual),
                    max_drawdown(result.equity),
                    total_return(result.equity),
                    float(np.nanmean(w)),
                    result.turnover,
                    frame.height,
                )
            )
    rows = []
    for name, values in per.items():
        if not values:
            continue
        stats = np.array(values, dtype=np.float64)
        means = np.nanmean(stats[:, :5], axis=0)
        rows.append((name, len(values), int(stats[:, 5].max()), *map(float, means)))
    return pl.DataFrame(rows, schema=TARGETING_SCHEMA, orient="row")


def policy_targeting(
    predictions: pl.DataFrame, bars: pl.DataFrame, h: int, train_end: dt.date, fold: str, config: BacktestConfig = PAPER
) -> pl.DataFrame:
    """One policy's volatility-targeted backtests (``POLICY_TARGETING_SCHEMA``): for each ticker of ``predictions``
    (its ``log_variance`` forecasts and closes, one row per test day) with a training volatility in ``bars``
    (``target_volatility`` to ``train_end``, the policy's fold's cut: known before its first test day), the weights
    ``volatility_target_weights`` through ``run_weight_backtest`` at every cost of ``config``, beside Buy & Hold on the
    same days. A ticker with fewer than two days or no training volatility has no row."""
    sigma = target_volatility(bars, train_end)
    rows = []
    keys = predictions.select("variant", "task", "seed").unique()
    if keys.height > 1:
        raise ValueError(f"policy_targeting backtests one policy's predictions, got {keys.height}: {keys.rows()}")
    for (ticker,), frame in predictions.sort("ticker", "date").group_by("ticker", maintain_order=True):
        if frame.height < 2 or ticker not in sigma:
            continue
        close, days = frame["close"].to_numpy(), frame["date"]
        w = volatility_target_weights(frame["log_variance"].to_numpy(), h, sigma[ticker])
        variant, task, seed = frame.row(0, named=True)["variant"], frame["task"][0], frame["seed"][0]
        for cost in sorted(config.costs_bps):
            result = run_weight_backtest(close, w, cost, config)
            held = run_weight_backtest(close, np.ones(frame.height), cost, config)
            rows.append(
                (variant, task, seed, fold, ticker, float(cost), frame.height, days.min(), days.max(), sigma[ticker])
                + (sharpe(result.equity, config.rf_annual), max_drawdown(result.equity), total_return(result.equity))
                + (float(np.nanmean(w)), result.turnover)
                + (sharpe(held.equity, config.rf_annual), total_return(held.equity))
            )
    return pl.DataFrame(rows, schema=POLICY_TARGETING_SCHEMA, orient="row")
