"""The rows a baseline's policy predicts on one split of its features file, as its predictor reads them, and planted
volatility forecasts in the volatility task's prediction columns."""

from __future__ import annotations

import polars as pl

from kinematic_pipeline.predictors.families import predictor


def baseline_predictions(settings, policy, split: str, tickers: list[str] | None) -> pl.DataFrame:
    """PREDICTIONS_SCHEMA rows of ``split`` (test or validation) of a probe's or a rule's ``policy``."""
    return predictor(policy.variant).rows(settings, policy, split, tickers)


def variance_forecasts(days: pl.DataFrame, variant: str, seed: int, fold: str, log_variance: pl.Expr) -> pl.DataFrame:
    """The volatility task's prediction rows (variant, seed, fold, ticker, date, log_variance) on ``days`` (ticker,
    date, ...), ``log_variance`` an expression over them (e.g. the truth plus planted noise)."""
    return days.select(
        pl.lit(variant).alias("variant"),
        pl.lit(seed, pl.Int64).alias("seed"),
        pl.lit(fold).alias("fold"),
        "ticker",
        "date",
        log_variance.alias("log_variance"),
    )
