"""The trailing-volatility reference on the evidence tables' rows (``backtest.volatility_reference``): its predictions on
the ticker-days of the scored rows, from the raw bars up to each day, and its rows beside the universe's. No dagster
here.
"""

from __future__ import annotations

from bisect import bisect_left

import polars as pl

from kinematic_pipeline.backtest.volatility_reference import VOL_DAYS, reference_predictions
from kinematic_pipeline.config import Settings
from kinematic_pipeline.warehouse import RAW_OHLCV
from kinematic_pipeline.warehouse import exact_paths as exact

HISTORY_DAYS = 3 * VOL_DAYS  # raw shards read before the first forecast day: the reference's 20 returns, and gaps


def volatility_reference(settings: Settings, rows: pl.DataFrame, tau: float) -> pl.DataFrame:
    """The trailing-volatility reference's predictions (``volatility_reference.reference_predictions``) on the
    distinct ticker-days of ``rows`` (ticker, date, label: the label of a ticker-day must be one), from the raw bars
    of those tickers on the ``HISTORY_DAYS`` raw shards before the first of those days through the last (no bar
    after a day enters its forecast: the vol20 of day t reads the closes up to t). Empty without rows."""
    days = rows.select("ticker", "date", "label").unique(maintain_order=True)
    if days.select(pl.struct("ticker", "date").is_duplicated().any()).item():
        raise ValueError("rows give one ticker-day two labels: the reference needs one per ticker-day")
    if days.height == 0:
        no_bars = pl.DataFrame(schema={"ticker": pl.String, "date": pl.Date, "close": pl.Float64})
        return reference_predictions(no_bars, days, tau)
    wh, first, last = settings.warehouse, days["date"].min(), days["date"].max()
    shards = wh.shard_days(RAW_OHLCV, until=last)
    shards = shards[max(0, bisect_left(shards, first) - HISTORY_DAYS) :]
    tickers = days["ticker"].unique().to_list()
    bars = exact.read_parquet(wh.verified_shards(RAW_OHLCV, shards), columns=["ticker", "date", "close"])
    return reference_predictions(bars.filter(pl.col("ticker").is_in(tickers)), days, tau)


def with_reference_scores(universe: pl.DataFrame, reference: pl.DataFrame) -> pl.DataFrame:
    """``universe`` (``universe_predictions``) with the reference's rows added: their r_close and r_spline from the
    universe's ticker-days, their score p_buy - p_sell (0 on every row: p_buy and p_sell are one number)."""
    if reference.height == 0:
        return universe
    returns = universe.select("ticker", "date", "r_close", "r_spline").unique(["ticker", "date"], maintain_order=True)
    rows = reference.join(returns, on=["ticker", "date"], how="left").with_columns(
        (pl.col("p_buy").cast(pl.Float64) - pl.col("p_sell").cast(pl.Float64)).alias("score")
    )
    return pl.concat(
        [universe, rows.select([c for c in universe.columns if c in rows.columns])], how="diagonal_relaxed"
    )
