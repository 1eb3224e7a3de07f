"""The rows a baseline's policy predicts on one split of its features file, as its predictor reads them."""

from __future__ import annotations

import polars as pl

from kinematic_pipeline.predictors.families import predictor


def baseline_predictions(settings, policy, split: str, tickers: list[str] | None) -> pl.DataFrame:
    """PREDICTIONS_SCHEMA rows of ``split`` (test or validation) of a probe's or a rule's ``policy``."""
    return predictor(policy.variant).rows(settings, policy, split, tickers)
