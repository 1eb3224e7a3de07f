"""predictions: one policy's Buy/Sell/Hold probabilities over the test period (and its validation days), written.

Its variant's predictor (``predictors/``: a fine-tuned model, a fitted probe or a fixed rule) makes them; this stage
checks the test period, writes the shard, the validation-day predictions, the files read, the model files and the
calibration, and at the report's tau the universe's predictions, calibrated and raw, and refreshes the ``predictions``
view. No dagster here.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

import polars as pl

from kinematic_pipeline.config import Settings
from kinematic_pipeline.folds import Fold, evaluation_days
from kinematic_pipeline.model_pins import WEIGHT_COLUMNS, model_files_frame, warehouse_path
from kinematic_pipeline.pins import StalePairError
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.predictors.base import Predictions
from kinematic_pipeline.predictors.families import predictor
from kinematic_pipeline.run_keys import membership_columns
from kinematic_pipeline.warehouse import Warehouse
from kinematic_pipeline.warehouse.layout import (
    INPUTS_SCHEMA,
    PREDICTION_CALIBRATION,
    PREDICTION_CLASS_WEIGHTS,
    PREDICTION_INPUTS,
    PREDICTION_MODEL,
    UNIVERSE_PREDICTIONS,
    UNIVERSE_RAW_PREDICTIONS,
    VALIDATION_PREDICTIONS,
)


def materialize_predictions(settings: Settings, policy: Policy) -> Predictions:
    """Predict the test period with the policy; calibrate it (models and probes: a temperature and class biases
    fitted on the validation days, ``backtest.calibration``); write its shard, its validation-day predictions,
    the shards it read, the calibration and, for a task the report reads (``Task.reported``), its predictions on the universe (every
    ticker-day of the test period, or the seeded sample of ``universe_tickers``), calibrated and raw; refresh the
    ``predictions`` view. The variant's predictor makes them (``predictors/``): models load their adapter; probes and
    rules read the features file."""
    days = _check_test_period(settings, policy.variant.token_asset, policy.fold)
    reported = policy.task.reported(settings)  # the report reads it: its universe's predictions too
    made_by = predictor(policy.variant)
    pinned = model_files_frame(settings, policy)  # hashed before the load; the same after it, or refused
    result, validation, calibrated, universe = made_by.predictions(settings, policy, days, reported)
    if not model_files_frame(settings, policy).equals(pinned):  # another run retrained a model file meanwhile
        raise StalePairError(
            f"the model files of {policy} changed while its predictions were made: retry "
            f"(re-materialize {policy.variant.name}_predictions partition {policy.key})"
        )
    path = _write(settings, policy, result, validation, calibrated, universe, pinned)
    return dataclasses.replace(result, path=path)


def _shards_frame(wh: Warehouse, shards: list[dict]) -> pl.DataFrame:
    """The files a prediction read, each path relative to the warehouse root (``model_pins.warehouse_path``): a
    copied or moved warehouse traces its own files."""
    rows = [{**s, "date": str(s["date"]), "path": warehouse_path(wh, s["path"])} for s in shards]
    return pl.DataFrame(rows, schema=INPUTS_SCHEMA)


def _write(
    settings: Settings,
    policy: Policy,
    result: Predictions,
    validation: pl.DataFrame,
    universe: pl.DataFrame | None,
    raw_universe: pl.DataFrame | None,
    model_files: pl.DataFrame,
) -> Path:
    """The predictions shard, the validation-day predictions, the shards read, the model files, the calibration
    (``predictions/calibration/``, one row) and at the report's tau the universe predictions, calibrated
    (``predictions/universe/``) and not (``predictions/universe_raw/``); refresh the ``predictions`` view."""
    wh, asset = settings.warehouse, policy.variant.token_asset
    if result.frame.height == 0:
        raise ValueError(
            f"none of the test tickers {result.missing_tickers} has a {asset} window in the test period of "
            f"{policy} ({policy.fold.describe()})"
        )
    path = wh.predictions_file(policy)
    label = policy.fold.label
    fold = pl.lit(label).alias("fold")
    wh.write(result.frame.with_columns(fold), path)
    wh.write(validation.with_columns(fold), wh.predictions_extra(VALIDATION_PREDICTIONS, policy))
    wh.write(_shards_frame(wh, result.shards), wh.predictions_extra(PREDICTION_INPUTS, policy))
    wh.write(model_files, wh.predictions_extra(PREDICTION_MODEL, policy))
    if result.class_weights is not None:  # what the probabilities mean: evaluation reads them (model_pins)
        weights = pl.DataFrame(
            [dict(zip(WEIGHT_COLUMNS, result.class_weights))], schema=dict.fromkeys(WEIGHT_COLUMNS, pl.Float64)
        )
        wh.write(weights, wh.predictions_extra(PREDICTION_CLASS_WEIGHTS, policy))
    if result.calibration is not None:
        row = result.calibration.to_frame(policy.variant.name, policy.task.tau, policy.seed, label)
        wh.write(row, wh.predictions_extra(PREDICTION_CALIBRATION, policy))
    if universe is not None and raw_universe is not None:  # with the membership file drawn under (run_keys)
        member = membership_columns(settings)
        wh.write(universe.with_columns(fold, *member), wh.predictions_extra(UNIVERSE_PREDICTIONS, policy))
        wh.write(raw_universe.with_columns(fold, *member), wh.predictions_extra(UNIVERSE_RAW_PREDICTIONS, policy))
    task = policy.task  # its own view, over its own folder (Buy/Sell/Hold's: the predictions asset's)
    wh.refresh_view(task.predictions_view, {**task.predictions_schema, "fold": pl.String}, path.parent)
    return path


def _check_test_period(settings: Settings, asset: str, fold: Fold) -> list[dt.date]:
    days = evaluation_days(settings, asset, fold)
    if not days:
        raise ValueError(
            f"no {asset} shard is dated in the test period of fold {fold.label} ({fold.describe()}): it is "
            f"empty (the paper tests 2023-01-01 onward; load bars after the cut, e.g. KP_SOURCE_PATH with newer data)"
        )
    return days
