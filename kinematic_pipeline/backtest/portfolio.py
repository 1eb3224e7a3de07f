"""One bounded Sharpe convention for the evidence tables and the verdict: cash credited with the risk-free rate.

The engine's cash earns nothing, while the paper's Sharpe subtracts rf = 4% a year from every day's return, so
a policy in cash almost all the time has a Sharpe near -rf / (its tiny daily std x sqrt(252)): 1,008 days flat
but one day at +0.026% give -307 (``metrics.sharpe``), a number that means nothing and swamps any average. Here
a day's excess return is r_t - rf/252 while the policy was long at the previous close and r_t itself in cash
(cash credited with rf: its excess is 0, or the cost of a buy filled that close):

    excess_t = r_t - invested_{t-1} rf / 252,     Sharpe = mean(excess) / std(excess) x sqrt(252)

so a flat record is undefined (N/A) and a nearly flat one bounded (the 1,008-day case: +0.50). The paper's tables
keep the paper's convention (they reproduce its published numbers) and print N/A below
``evaluate.min_days_in_market`` days long; these tables name their convention. ``portfolio_returns`` builds what
the verdict tests and the evidence tables report: per group (variant, tau, seed, ...), the equal-weight
portfolio of its tickers' excess returns, day by day, with how many ticker-days it was in the market.

Pure polars / numpy; no dagster, no file I/O.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from kinematic_pipeline.backtest.metrics import PERIODS_PER_YEAR

CONVENTION = "cash credited with the risk-free rate: excess = r - rf/252 on days long, r in cash"
_ZERO_STD = 1e-12


def excess_returns(equity, position, rf_annual: float, periods: int = PERIODS_PER_YEAR) -> np.ndarray:
    """(T-1,) excess returns of one equity curve: r_t - rf/periods on days whose previous close was long."""
    equity, position = np.asarray(equity, dtype=np.float64), np.asarray(position)
    r = equity[1:] / equity[:-1] - 1.0
    return r - (position[:-1] == 1) * rf_annual / periods


def bounded_sharpe(excess, periods: int = PERIODS_PER_YEAR) -> float:
    """mean / std (ddof 1) of excess returns, annualized; NaN (N/A) for a flat record or fewer than 2 days."""
    x = np.asarray(excess, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size < 2 or x.std(ddof=1) <= _ZERO_STD:
        return float("nan")
    return float(x.mean() / x.std(ddof=1) * np.sqrt(periods))


def ticker_excess(equity: pl.DataFrame, rf_annual: float, periods: int = PERIODS_PER_YEAR) -> pl.DataFrame:
    """Each equity curve's daily excess return (``excess``) and whether it was long at the previous close
    (``invested``), by (variant, tau, seed, ticker, cost_bps, fold when present), from its second day."""
    keys = [k for k in ("variant", "tau", "seed", "ticker", "cost_bps", "fold") if k in equity.columns]
    by = pl.col("equity").shift(1).over(keys)
    held = pl.col("position").shift(1).over(keys) == 1
    rows = equity.sort(*keys, "date", nulls_last=True).with_columns(
        (pl.col("equity") / by - 1 - pl.when(held).then(rf_annual / periods).otherwise(0.0)).alias("excess"),
        held.alias("invested"),
    )
    return rows.filter(pl.col("excess").is_not_null()).select(*keys, "date", "excess", "invested")


def portfolio_returns(excess: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """The equal-weight portfolio of each ``by`` group's tickers, day by day: ``excess`` (the mean over its
    tickers and anything else not in ``by``, e.g. seeds) and ``invested`` (the number of ticker-days long)."""
    return (
        excess.group_by(*by, "date")
        .agg(pl.col("excess").mean(), pl.col("invested").sum())
        .sort(*by, "date", nulls_last=True)
    )


def portfolio_summary(excess: pl.DataFrame, by: list[str], periods: int = PERIODS_PER_YEAR) -> pl.DataFrame:
    """Per ``by`` group: the bounded Sharpe of its equal-weight portfolio (``sharpe``), its days, the mean days in
    the market per ticker (``days_in_market``), its tickers and how many of them never were (``tickers_na``:
    their own Sharpe is N/A)."""
    series = [*by, "ticker", *(k for k in ("seed",) if k in excess.columns and k not in by)]
    per_series = excess.group_by(series).agg(pl.col("invested").sum().alias("long_days"))
    per_ticker = per_series.group_by(*by, "ticker").agg(pl.col("long_days").mean())  # seeds averaged
    tickers = per_ticker.group_by(by).agg(
        pl.len().alias("tickers"),
        (pl.col("long_days") == 0).sum().alias("tickers_na"),
        pl.col("long_days").mean().round(0).cast(pl.Int64).alias("days_in_market"),
    )
    daily = portfolio_returns(excess, by)
    sharpes = daily.group_by(by).agg(
        pl.col("excess")
        .map_batches(lambda s: pl.Series([bounded_sharpe(s.to_numpy(), periods)]), returns_scalar=True)
        .alias("sharpe"),
        pl.len().alias("days"),
    )
    return sharpes.join(tickers, on=by, how="left", nulls_equal=True).sort(by, nulls_last=True)
