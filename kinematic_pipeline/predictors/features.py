"""The baselines' predictions, on the rows of their tokenization's features file: a probe's softmax (fitted by
``stages.baselines``) or a fixed rule's one-hot action, in the models' schema and files (the backtested tickers' test
days, their validation days and the universe at the report's tau). A probe is calibrated on its validation days as a
model is; a rule's one-hot action is not. No dagster and no torch here.
"""

from __future__ import annotations

import datetime as dt
from abc import abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import polars as pl

from kinematic_pipeline.config import Settings
from kinematic_pipeline.model_pins import check_class_weights, recorded_file
from kinematic_pipeline.pins import features_path, load_probe
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.predictors.base import (
    PolicyPredictions,
    Predictions,
    Predictor,
    calibrated,
    evaluation_tickers,
    purge_labels,
    universe_tickers,
)
from kinematic_pipeline.stages.baselines import probe_probabilities
from kinematic_pipeline.stages.features import read_features
from kinematic_pipeline.warehouse import exact_paths as exact
from kinematic_pipeline.warehouse.atomic import file_sha256


@dataclass(frozen=True)
class FeaturesPredictor(Predictor):
    """A baseline deciding on the rows of its features file."""

    @abstractmethod
    def probabilities(self, policy: Policy, frame: pl.DataFrame, fitted: object) -> np.ndarray:
        """The task's outputs on the rows of ``frame`` (``Task.outputs``: [n, 3] Buy, Sell, Hold; [n, 1] a log
        variance), with ``fitted`` (what ``load`` returns)."""

    @abstractmethod
    def class_weights(self, fitted: object) -> tuple[float, float, float] | None:
        """The class weights its probabilities carry (its fit's record), None for a rule."""

    def rows(
        self, settings: Settings, policy: Policy, split: str, tickers: list[str] | None, fitted: object = None
    ) -> pl.DataFrame:
        """The task's prediction rows (``Task.predictions_frame``) of ``split`` (``test`` or ``validation``) of the
        features file, for ``tickers`` (None: every ticker), sorted by ticker and date. Buy/Sell/Hold's: the action
        is the argmax of the softmax (the paper's weighted argmax, as the models'), the rule's own action for a
        rule; p the softmax de-weighted with the probe's class weights (a rule's one-hot action as it is)."""
        label = policy.task.label_column
        frame = read_features(settings, policy.variant.name, policy.fold, (split,), ("close", label))
        if tickers is not None:
            frame = frame.filter(pl.col("ticker").is_in(tickers))
        frame = frame.sort("ticker", "date")
        fitted = self.load(settings, policy) if fitted is None else fitted
        outputs = self.probabilities(policy, frame, fitted)
        return policy.task.predictions_frame(frame, policy, outputs, self.class_weights(fitted))

    def predictions(
        self, settings: Settings, policy: Policy, days: list[dt.date], reported: bool, fitted: object = None
    ) -> PolicyPredictions:
        variant, wh = policy.variant, settings.warehouse
        fitted = self.load(settings, policy) if fitted is None else fitted
        asset = variant.token_asset
        tickers = evaluation_tickers(settings, asset, days)
        frame = self.rows(settings, policy, "test", tickers, fitted)
        present = set(frame["ticker"].unique().to_list())
        validation = purge_labels(self.rows(settings, policy, "validation", sorted(present), fitted), policy)
        files = [features_path(settings, policy.variant.name, part) for part in ("training", "test")]
        tok = variant.tokenization
        inputs = exact.read_parquet(wh.features_inputs_file(tok.name))
        shards = [dict(asset=tok.features_asset, date="", path=f, content_hash=file_sha256(f)) for f in files]
        shards += [  # the features' inputs as files of this warehouse (recorded relative to the one they were built in)
            {**row, "path": recorded_file(wh, row["asset"], row["date"], row["path"])}
            for row in inputs.iter_rows(named=True)
        ]
        weights = self.class_weights(fitted)
        missing = [t for t in tickers if t not in present]
        result = Predictions(frame, shards, missing, policy.task, class_weights=weights)
        fitting, universe = (validation if self.calibrated else None), None
        if reported:
            names = universe_tickers(settings, asset, days)
            universe = self.rows(settings, policy, "test", names, fitted)
            others = [t for t in names if t not in present]
            if fitting is not None and others:
                more = self.rows(settings, policy, "validation", others, fitted)
                fitting = pl.concat([validation, purge_labels(more, policy)])
        result, validation, universe_calibrated = calibrated(result, validation, universe, fitting)
        return result, validation, universe_calibrated, universe


@dataclass(frozen=True)
class ProbePredictor(FeaturesPredictor):
    """A ``ProbeVariant``'s: its fitted model and fit record (``pins.load_probe``)."""

    def load(self, settings: Settings, policy: Policy) -> tuple[object, dict]:
        probe = load_probe(settings, policy)
        check_class_weights(settings, policy)
        return probe

    def probabilities(self, policy: Policy, frame: pl.DataFrame, fitted: object) -> np.ndarray:
        return probe_probabilities(fitted, frame)

    def class_weights(self, fitted: object) -> tuple[float, float, float] | None:
        weights = fitted[1]["class_weights"]  # its fit's record: none for a regression
        return tuple(float(w) for w in weights) if weights is not None else None

    def provenance(self, wh, policy: Policy, add) -> None:
        """A fitted probe: its model and fit record (the features file is an input)."""
        for path in self.variant.model_files(wh, policy):
            add("probe", self.variant.asset("probe"), path)


@dataclass(frozen=True)
class RulePredictor(FeaturesPredictor):
    """A ``RuleVariant``'s: fitted on nothing; its "probabilities" are its one-hot action, never calibrated."""

    calibrated: ClassVar[bool] = False

    def load(self, settings: Settings, policy: Policy) -> None:
        return None

    def probabilities(self, policy: Policy, frame: pl.DataFrame, fitted: object) -> np.ndarray:
        return np.eye(3)[policy.variant.actions(frame, policy.task.tau)]

    def class_weights(self, fitted: object) -> None:
        return None
