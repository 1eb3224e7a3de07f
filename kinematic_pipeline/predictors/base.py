"""What every predictor is, and the frame code its families share.

A ``Predictor`` holds its variant and answers three questions for one ``Policy``: what it decides with (``load``:
an adapter, a probe's fit, or nothing for a rule, checked against its record first), what it predicts
(``predictions``: the test tickers' test days, their validation days and, for a task the report reads, the universe,
calibrated on validation days only) and which files decide those predictions (``provenance``). No dagster and no
torch here.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import polars as pl

from kinematic_pipeline.backtest.calibration import Calibration
from kinematic_pipeline.config import Settings
from kinematic_pipeline.folds import evaluation_days
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.report.markdown import Markdown, markdown_table
from kinematic_pipeline.sources.membership import require_members
from kinematic_pipeline.tasks.base import Task
from kinematic_pipeline.variants import Variant
from kinematic_pipeline.warehouse import exact_paths as exact

N_DEFAULT_TEST_TICKERS = 6  # the paper backtests six names
# What ``Predictor.predictions`` returns: the test tickers' calibrated predictions, their validation days',
# and at the report's tau the universe's, calibrated and raw (its softmax de-weighted, uncalibrated; None, None
# elsewhere).
PolicyPredictions = tuple["Predictions", pl.DataFrame, pl.DataFrame | None, pl.DataFrame | None]


@dataclass(frozen=True)
class Predictions:
    frame: pl.DataFrame  # its task's predictions (Buy/Sell/Hold: PREDICTIONS_SCHEMA), sorted by ticker, date
    shards: list[dict]  # every shard read: asset, date, path, content_hash
    missing_tickers: list[str]  # configured test tickers with no test-period window
    task: Task  # the policy's: what its frame holds and how it is calibrated
    calibration: Calibration | None = None  # fitted on the validation days and applied to frame (rules: None)
    # the class weights [Buy, Sell, Hold] the model was trained with: its softmax q, de-weighted with them, is the
    # stored p (rules: None)
    class_weights: tuple[float, float, float] | None = None
    path: Path | None = None  # the test-period shard written (None: nothing written yet)

    def metadata(self) -> dict:
        """What the predictions asset shows: rows, days, per ticker its task's summary (``Task.per_ticker``:
        Buy/Sell/Hold's action counts) and the calibration."""

        frame = self.frame
        per_ticker = (
            frame.group_by("ticker")
            .agg(
                pl.len().alias("days"),
                pl.col("date").min().alias("first"),
                pl.col("date").max().alias("last"),
                *self.task.per_ticker(),
            )
            .sort("ticker")
        )
        return {
            "rows": frame.height,
            "test_days": frame["date"].n_unique() if frame.height else 0,
            "per_ticker": Markdown(markdown_table(per_ticker)),
            "missing_test_tickers": ", ".join(self.missing_tickers) or "none",
            **(self.calibration.metadata() if self.calibration is not None else {}),
            **({"path": self.path} if self.path is not None else {}),
        }


@dataclass(frozen=True)
class Predictor(ABC):
    """What makes the predictions of ``variant``'s policies (``Variant.predictor()``)."""

    variant: Variant  # the variant whose policies it predicts for

    calibrated: ClassVar[bool] = True  # a temperature and class biases fitted on its validation days

    @abstractmethod
    def load(self, settings: Settings, policy: Policy) -> object:
        """What ``policy`` decides with, loaded and checked against its record (a damaged file is named as such;
        other class weights than the settings' are refused naming both); None for a rule, fitted on nothing."""

    @abstractmethod
    def predictions(
        self, settings: Settings, policy: Policy, days: list[dt.date], reported: bool, fitted: object = None
    ) -> PolicyPredictions:
        """``policy``'s predictions on the test ``days`` (``PolicyPredictions``), nothing written, with the universe's
        when ``reported`` (the report reads its task: ``Task.reported``); ``fitted``: what ``load`` returns (loaded
        here when None)."""

    def provenance(self, wh, policy: Policy, add) -> None:
        """Call ``add(link, asset, path[, sha256, date=, split=])`` for each file that made ``policy``'s predictions
        beyond their inputs (a rule: none)."""
        return None


def evaluation_tickers(settings: Settings, asset: str, days: list[dt.date]) -> list[str]:
    """The configured test tickers, or the first six names with a test-period window."""
    if settings.evaluate.test_tickers is not None:
        return list(settings.evaluate.test_tickers)
    if not days:
        return []
    paths = [settings.warehouse.shard(asset, d) for d in days]
    names = exact.read_parquet(paths, columns=["ticker"])["ticker"].unique().sort()
    return names.head(N_DEFAULT_TEST_TICKERS).to_list()


def universe_tickers(settings: Settings, asset: str, days: list[dt.date]) -> list[str]:
    """The tickers of the universe signal on a fold's test ``days``: every ticker with a window of ``asset`` on
    them, or, with ``evaluate.universe_tickers`` = n, those of one seeded sample of n drawn once from the tickers
    of every fold's test period (the same names in every fold and for every variant), which always holds the
    backtested tickers. With ``evaluate.membership_file``, only the names that were members on the first of
    ``days`` (point in time)."""
    if not days:
        return []
    ev = settings.evaluate
    present = _tickers(settings, asset, days)
    if ev.universe_tickers is not None:
        every = _tickers(settings, asset, evaluation_days(settings, asset))
        if ev.universe_tickers < len(every):
            backtested = [t for t in evaluation_tickers(settings, asset, days) if t in set(every)]
            rest = [t for t in every if t not in set(backtested)]
            rng = np.random.default_rng(ev.universe_seed)
            drawn = rng.choice(len(rest), size=max(0, ev.universe_tickers - len(backtested)), replace=False)
            sample = set(backtested) | {rest[i] for i in drawn}
            present = [t for t in present if t in sample]
    if ev.membership_file is not None:  # never an empty universe in silence: one line naming the file
        present = require_members(ev.membership_file, present, min(days), f"{asset} on {min(days)} .. {max(days)}")
    return present


def _tickers(settings: Settings, asset: str, days: list[dt.date]) -> list[str]:
    frame = exact.scan_parquet(settings.warehouse.verified_shards(asset, days)).select("ticker").unique().collect()
    return frame["ticker"].sort().to_list()


def union(first: list[str], then: list[str]) -> list[str]:
    """``first``, then the names of ``then`` not in it, in their order."""
    return first + [t for t in then if t not in set(first)]


def purge_labels(validation: pl.DataFrame, policy: Policy) -> pl.DataFrame:
    """Validation-day predictions with the labels of days after the policy's ``fold.label_end`` unknown (its task's
    ``unknown``): a label there reads a close the fold may not see (with a single cut, the first test day's), so
    neither the calibration nor a rule's parameter is fitted on it (the fine-tuning's own rows are purged the same
    way)."""
    task, late = policy.task, pl.col("date") > policy.fold.label_end
    return validation.with_columns(
        pl.when(late).then(pl.lit(task.unknown)).otherwise(pl.col("label")).cast(task.target_dtype).alias("label")
    )


def calibrated(
    result: Predictions, validation: pl.DataFrame, universe: pl.DataFrame | None, fitting: pl.DataFrame | None
) -> tuple[Predictions, pl.DataFrame, pl.DataFrame | None]:
    """The test, validation and universe predictions recalibrated by their task (``Task.calibrate``: Buy/Sell/Hold's
    temperature and class biases, ``backtest.calibration``) fitted on ``fitting``, validation-day rows only (never
    a test day's), with what the model was trained with (``result.class_weights``); unchanged where ``fitting`` is
    None (a rule: its probabilities are its one-hot action)."""
    if fitting is None:
        return result, validation, universe
    (test, validation, universe), calibration = result.task.calibrate(
        fitting, [result.frame, validation, universe], result.class_weights
    )
    return dataclasses.replace(result, frame=test, calibration=calibration), validation, universe
