"""The base rates the skill tables are scored against and start from: per walk-forward fold, the shares of the labels
of its training days (the reference of every skill) and of its validation days (what calibration makes of a model that
learned nothing: the calibrated prior, printed as its own row). No dagster here.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from kinematic_pipeline.backtest.policy_frames import PRIOR, FoldRates
from kinematic_pipeline.backtest.skill import base_rates
from kinematic_pipeline.config import Settings
from kinematic_pipeline.pins import verified_labels
from kinematic_pipeline.tasks.actions import class_weight_vector
from kinematic_pipeline.tasks.buy_sell_hold import labels_from_returns, predictions_frame, tau_column
from kinematic_pipeline.warehouse import LABELS
from kinematic_pipeline.warehouse import exact_paths as exact
from kinematic_pipeline.window_store import validation_days

TRAINED, CLOSE = "trained", "close"  # the outcomes: the trained-on label columns; labels of r_close


def close_labels(r_close, tau: float) -> np.ndarray:
    """Close-to-close labels of next-day returns (``tasks.buy_sell_hold.labels_from_returns``; null/NaN -> -1)."""
    r = pl.Series(r_close, dtype=pl.Float64).fill_null(float("nan")).to_numpy()
    return labels_from_returns(r, tau)


def base_rates_by_outcome(labels: pl.DataFrame, taus) -> dict[str, dict[float, np.ndarray]]:
    """{outcome: {tau: Buy/Sell/Hold shares}} of labels shards' rows: the trained-on label columns, and
    the close-to-close labels of their ``r_close``."""
    return {
        TRAINED: {t: base_rates(labels[tau_column(t)].to_numpy()) for t in taus},
        CLOSE: {t: base_rates(close_labels(labels["r_close"], t)) for t in taus},
    }


def train_base_rates(settings: Settings) -> dict[str, dict[float, FoldRates]]:
    """{outcome: {tau: ``FoldRates``}}: per walk-forward fold, ``base_rates_by_outcome`` of the labels on its
    training days (on or before its ``label_end``, the purge), so that each test day is scored against the
    base rates its own fold's models were trained on. One read of the labels up to the last fold's end."""
    wh, folds = settings.warehouse, settings.folds
    last = max(f.label_end for f in folds)
    days = wh.shard_days(LABELS, until=last)
    if not days:
        raise FileNotFoundError(f"no labels on or before {last}: materialize labels first")
    taus = settings.tokenize.taus
    columns = ["date", *(tau_column(t) for t in taus), "r_close"]
    labels = exact.read_parquet(verified_labels(settings, days), columns=columns)
    per_fold = []
    for fold in folds:
        seen = labels.filter(pl.col("date") <= fold.label_end)
        if seen.height == 0:
            raise FileNotFoundError(f"fold {fold.label}: no labels on or before {fold.label_end}")
        per_fold.append(base_rates_by_outcome(seen, taus))
    starts = tuple(f.test_start for f in folds)
    return {
        outcome: {t: FoldRates(starts, tuple(r[outcome][t] for r in per_fold)) for t in taus} for outcome in per_fold[0]
    }


def validation_base_rates(settings: Settings, asset: str) -> dict[str, dict[float, FoldRates]] | None:
    """{outcome: {tau: ``FoldRates``}} of the labels of each fold's validation days (on or before its ``label_end``:
    the purge), every ticker: the probabilities a model that learned nothing is calibrated to (its head starts at the
    training prior; the calibration moves that constant to the validation days' rates, up to its ridge). None when a
    fold has no validation day of ``asset``."""
    taus, per_fold = settings.tokenize.taus, []
    columns = ["date", *(tau_column(t) for t in taus), "r_close"]
    for fold in settings.folds:
        days = [d for d in validation_days(settings, asset, fold) if d <= fold.label_end]
        if not days:
            return None
        per_fold.append(
            base_rates_by_outcome(exact.read_parquet(verified_labels(settings, days), columns=columns), taus)
        )
    starts = tuple(f.test_start for f in settings.folds)
    return {
        outcome: {t: FoldRates(starts, tuple(r[outcome][t] for r in per_fold)) for t in taus} for outcome in per_fold[0]
    }


def calibrated_prior_rows(rows: pl.DataFrame, rates: FoldRates, tau: float, class_weights, label: str) -> pl.DataFrame:
    """The calibrated prior's predictions on the ticker-days of ``rows`` (ticker, date, close, ``label``; one per
    ticker-day): each day its fold's validation-day base rates p, stored as a weighted-CE model's are: its softmax
    q ∝ w ⊙ p and that q de-weighted (p again, up to float32; ``buy_sell_hold.predictions_frame``). A model at its prior
    scores this row's skill after calibration, not 0."""

    days = rows.unique(subset=["ticker", "date"], keep="first", maintain_order=True).sort("ticker", "date")
    q = rates.rows(days["date"]) * class_weight_vector(class_weights)
    return predictions_frame(days, (PRIOR, float(tau), 0), q / q.sum(axis=1, keepdims=True), label, class_weights)
