"""predictions: one fine-tuned policy's Buy/Sell/Hold probabilities over the test period (and its validation days).

Rolling protocol (paper "Experimental Setup & Protocol"): the action of day t comes from the token shard of
day t, whose window was fitted on bars up to t only, so nothing after t enters a decision. Test days are
the token shards of the policy's fold's test period (``folds.py``; a single cut: every day after
``split.train_end``). Models' and probes' probabilities are then calibrated (``backtest.calibration``: a
temperature and class biases fitted on the fold's validation days only) before anything is written; the raw
universe predictions are kept beside the calibrated ones. No dagster here.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from kinematic_pipeline.backtest.calibration import Calibration, calibrate_frames
from kinematic_pipeline.backtest.sweep import PREDICTIONS_SCHEMA, predictions_frame
from kinematic_pipeline.config import Settings
from kinematic_pipeline.folds import Fold, evaluation_days
from kinematic_pipeline.model_pins import WEIGHT_COLUMNS, check_class_weights, model_files_frame
from kinematic_pipeline.pins import check_token_inputs, fold_stats, verified_labels
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.report.markdown import Markdown, markdown_table
from kinematic_pipeline.run_keys import membership_columns
from kinematic_pipeline.sources.membership import require_members
from kinematic_pipeline.tasks.actions import ACTION_KEYS, UNKNOWN_LABEL
from kinematic_pipeline.tasks.buy_sell_hold import same_tau
from kinematic_pipeline.variants import ModelVariant, Variant
from kinematic_pipeline.warehouse import LABELS, PREDICTIONS, RAW_OHLCV, Warehouse
from kinematic_pipeline.warehouse import exact_paths as exact
from kinematic_pipeline.warehouse.atomic import file_sha256
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
from kinematic_pipeline.window_store import validation_days
from kinematic_pipeline.windows import N_CHANNELS, N_TOKENS

N_DEFAULT_TEST_TICKERS = 6  # the paper backtests six names
FOLD_PREDICTIONS_SCHEMA = {**PREDICTIONS_SCHEMA, "fold": pl.String}  # the view: every fold's rows, named


def evaluation_tickers(settings: Settings, asset: str, days: list[dt.date]) -> list[str]:
    """The configured test tickers, or the first six names with a test-period window."""
    if settings.evaluate.test_tickers is not None:
        return list(settings.evaluate.test_tickers)
    if not days:
        return []
    paths = [settings.warehouse.shard(asset, d) for d in days]
    names = exact.read_parquet(paths, columns=["ticker"])["ticker"].unique().sort()
    return names.head(N_DEFAULT_TEST_TICKERS).to_list()


def predict_probabilities(classifier, x: np.ndarray, batch_size: int) -> np.ndarray:
    """Softmax class probabilities [n, 3] (Buy, Sell, Hold) of normalized windows x [n, 64, C], in batches."""
    import torch

    out = np.empty((x.shape[0], 3), dtype=np.float32)
    classifier.eval()
    with torch.inference_mode():
        for start in range(0, x.shape[0], batch_size):
            logits = classifier(torch.from_numpy(np.ascontiguousarray(x[start : start + batch_size])))
            out[start : start + batch_size] = torch.softmax(logits.float(), dim=-1).numpy()
    return out


@dataclass(frozen=True)
class Predictions:
    frame: pl.DataFrame  # PREDICTIONS_SCHEMA, sorted by ticker, date
    shards: list[dict]  # every shard read: asset, date, path, content_hash
    missing_tickers: list[str]  # configured test tickers with no test-period window
    calibration: Calibration | None = None  # fitted on the validation days and applied to frame (rules: None)
    # the class weights [Buy, Sell, Hold] the model was trained with: what its probabilities mean (rules: None)
    class_weights: tuple[float, float, float] | None = None
    path: Path | None = None  # the test-period shard written (None: nothing written yet)

    def metadata(self) -> dict:
        """What the predictions asset shows: rows, days, per-ticker action counts and the calibration."""

        frame = self.frame
        per_ticker = (
            frame.group_by("ticker")
            .agg(
                pl.len().alias("days"),
                pl.col("date").min().alias("first"),
                pl.col("date").max().alias("last"),
                *[(pl.col("action") == code).sum().alias(name) for code, name in enumerate(ACTION_KEYS)],
                pl.col("p_buy").mean().alias("mean_p_buy"),
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


def predict(
    settings: Settings,
    policy: Policy,
    classifier,
    days: list[dt.date] | None = None,
    tickers: list[str] | None = None,
) -> Predictions:
    """Actions and probabilities of one fine-tuned classifier on every test day (or ``days``) and ticker."""
    wh, variant = settings.warehouse, policy.variant
    asset = variant.token_asset
    days = evaluation_days(settings, asset, policy.fold) if days is None else days
    tickers = evaluation_tickers(settings, asset, days) if tickers is None else tickers
    stats = fold_stats(settings, variant.tokenization, policy.fold) if variant.normalized else None
    normalize = variant.tokenization.normalizer(stats, variant.channels)
    label_col = policy.task.label_column
    check_token_inputs(settings, asset, days)  # windows of the raw days as they are now, or nothing is predicted
    frame = _test_windows(wh, asset, days, tickers, label_col)
    hashes = {a: wh.content_hashes(a, days) for a in (asset, RAW_OHLCV)}
    shards = [
        dict(asset=a, date=day, path=wh.shard(a, day), content_hash=hashes[a][i])
        for i, day in enumerate(days)
        for a in (asset, RAW_OHLCV)
    ]
    if frame["close"].is_null().any():
        bad = frame.filter(pl.col("close").is_null()).row(0, named=True)
        raise ValueError(f"{bad['ticker']} has a test window on {bad['date']} but no raw close that day")
    tokens = frame["tokens"].to_numpy() if frame.height else np.empty((0, N_TOKENS, N_CHANNELS), np.float32)
    probs = predict_probabilities(classifier, normalize(tokens), settings.evaluate.predict_batch_size)
    out = predictions_frame(frame, (policy.variant.name, policy.task.tau, policy.seed), probs, label_col)
    present = set(out["ticker"].unique().to_list())
    return Predictions(out, shards, [t for t in tickers if t not in present])


def _test_windows(wh: Warehouse, asset: str, days: list[dt.date], tickers: list[str], label_col: str) -> pl.DataFrame:
    """The ``tickers``' windows of ``days`` with the day's close and label (null where none yet): one scan per
    asset over the days' files, not one read per day (a day's token shard holds every ticker's window)."""
    if not days:  # no test day: an empty frame (tokens are then not read)
        return pl.DataFrame(schema={"ticker": pl.String, "date": pl.Date, "close": pl.Float64, label_col: pl.Int8})
    wanted = pl.col("ticker").is_in(tickers)
    wh.verified_shards(RAW_OHLCV, days)  # a test day's bytes are its manifest's, or nothing is predicted
    windows = exact.scan_parquet(wh.verified_shards(asset, days)).select("ticker", "date", "tokens").filter(wanted)
    # a raw_ohlcv day's bars: its partition is the folder's date (join on the file, not on the bar's date)
    day_of = pl.LazyFrame({"_file": [str(wh.shard(RAW_OHLCV, d)) for d in days], "date": days})
    closes = (
        exact.scan_parquet([wh.shard(RAW_OHLCV, d) for d in days], include_file_paths="_file")
        .filter(wanted)
        .select("ticker", "close", "_file")
        .join(day_of, on="_file")
        .drop("_file")
    )
    frame = windows.join(closes, on=["ticker", "date"], how="left")
    label_files = verified_labels(wh, [d for d in days if wh.shard(LABELS, d).exists()])
    if label_files:
        labels = exact.scan_parquet(label_files).filter(wanted).select("ticker", "date", label_col)
        frame = frame.join(labels, on=["ticker", "date"], how="left")
    else:
        frame = frame.with_columns(pl.lit(None, pl.Int8).alias(label_col))
    # one order: the joins' row order varies from call to call, and with it the model's batches (and so the
    # float32 probabilities in their last bits)
    return frame.collect().sort("ticker", "date")


def _shards_frame(wh: Warehouse, shards: list[dict]) -> pl.DataFrame:
    """The files a prediction read, each path relative to the warehouse root (``model_pins.warehouse_path``): a
    copied or moved warehouse traces its own files."""
    from kinematic_pipeline.model_pins import warehouse_path

    rows = [{**s, "date": str(s["date"]), "path": warehouse_path(wh, s["path"])} for s in shards]
    return pl.DataFrame(rows, schema=INPUTS_SCHEMA)


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


def _calibrated(
    result: Predictions, validation: pl.DataFrame, universe: pl.DataFrame | None, fitting: pl.DataFrame | None
) -> tuple[Predictions, pl.DataFrame, pl.DataFrame | None]:
    """The test, validation and universe predictions with the calibration (``backtest.calibration``) fitted on
    ``fitting``, validation-day rows only (never a test day's), applied and the actions recomputed, the class
    weights the model was trained with (``result.class_weights``) undone; unchanged where ``fitting`` is None (a
    rule: its probabilities are its one-hot action)."""
    if fitting is None:
        return result, validation, universe
    (test, validation, universe), calibration = calibrate_frames(
        fitting, [result.frame, validation, universe], result.class_weights
    )
    return dataclasses.replace(result, frame=test, calibration=calibration), validation, universe


def _write(
    settings: Settings,
    policy: Policy,
    result: Predictions,
    validation: pl.DataFrame,
    universe: pl.DataFrame | None,
    raw_universe: pl.DataFrame | None,
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
    path = wh.evaluation_file(PREDICTIONS, policy)
    label = policy.fold.label
    fold = pl.lit(label).alias("fold")
    wh.write(result.frame.with_columns(fold), path)
    wh.write(validation.with_columns(fold), wh.predictions_extra(VALIDATION_PREDICTIONS, policy))
    wh.write(_shards_frame(wh, result.shards), wh.predictions_extra(PREDICTION_INPUTS, policy))
    wh.write(model_files_frame(settings, policy), wh.predictions_extra(PREDICTION_MODEL, policy))
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
    wh.refresh_view(PREDICTIONS, FOLD_PREDICTIONS_SCHEMA)
    return path


def _check_test_period(settings: Settings, asset: str, fold: Fold) -> list[dt.date]:
    days = evaluation_days(settings, asset, fold)
    if not days:
        raise ValueError(
            f"no {asset} shard is dated in the test period of fold {fold.label} ({fold.describe()}): it is "
            f"empty (the paper tests 2023-01-01 onward; load bars after the cut, e.g. KP_SOURCE_PATH with newer data)"
        )
    return days


def materialize_predictions(settings: Settings, policy: Policy) -> Predictions:
    """Predict the test period with the policy; calibrate it (models and probes: a temperature and class biases
    fitted on the validation days, ``backtest.calibration``); write its shard, its validation-day predictions,
    the shards it read, the calibration and, at the report's tau, its predictions on the universe (every
    ticker-day of the test period, or the seeded sample of ``universe_tickers``), calibrated and raw; refresh the
    ``predictions`` view. Models load their adapter; probes and rules read the features file
    (``stages.baselines``)."""
    days = _check_test_period(settings, policy.variant.token_asset, policy.fold)
    at_report_tau = same_tau(policy.task.tau, settings.evaluate.report_tau)
    result, validation, calibrated, universe = policy_predictions(policy.variant, settings, policy, days, at_report_tau)
    return dataclasses.replace(result, path=_write(settings, policy, result, validation, calibrated, universe))


@functools.singledispatch
def policy_predictions(
    variant: Variant, settings: Settings, policy: Policy, days: list[dt.date], at_report_tau: bool
) -> tuple[Predictions, pl.DataFrame, pl.DataFrame | None, pl.DataFrame | None]:
    """What ``materialize_predictions`` writes for ``policy`` on ``days`` (``model_predictions``), nothing written,
    by its variant's class: a model predicts from its adapter, a probe and a rule from the features files. Each
    checks the model's files first (a damaged one is named as such), then its class weights against the settings'
    (refused naming both), before a row is written."""
    from kinematic_pipeline.stages.baselines import fitted_probe

    out = baseline_policy_predictions(settings, policy, days, at_report_tau, fitted_probe(variant, settings, policy))
    check_class_weights(settings, policy)
    return out


@policy_predictions.register
def _(
    variant: ModelVariant, settings: Settings, policy: Policy, days: list[dt.date], at_report_tau: bool
) -> tuple[Predictions, pl.DataFrame, pl.DataFrame | None, pl.DataFrame | None]:
    from kinematic_pipeline.training.run import load_classifier  # torch and PEFT: only when predicting

    classifier = load_classifier(settings, policy)
    weights = check_class_weights(settings, policy)
    return model_predictions(settings, policy, classifier, days, at_report_tau, weights)


def model_predictions(
    settings: Settings, policy: Policy, classifier, days: list[dt.date], at_report_tau: bool, class_weights
) -> tuple[Predictions, pl.DataFrame, pl.DataFrame | None, pl.DataFrame | None]:
    """What ``materialize_predictions`` writes for a model fine-tuned with ``class_weights``, nothing written: its
    calibrated predictions of the test
    tickers on ``days``, of those tickers on the fold's validation days and (``at_report_tau``) of the universe, and
    the universe's raw predictions (None, None otherwise). Two forward passes: the test days and the validation days,
    each over the test tickers and (``at_report_tau``) the universe's at once (a ticker-day is predicted once)."""
    from kinematic_pipeline.models.heads import for_inference

    fold = policy.fold
    asset = policy.variant.token_asset
    classifier = for_inference(classifier)  # LoRA merged once for both passes
    wanted = evaluation_tickers(settings, asset, days)
    names = universe_tickers(settings, asset, days) if at_report_tau else []
    test = predict(settings, policy, classifier, days, _union(wanted, names))
    frame = test.frame.filter(pl.col("ticker").is_in(wanted))
    tickers = sorted(frame["ticker"].unique().to_list())
    missing = [t for t in wanted if t not in set(tickers)]
    result = dataclasses.replace(test, frame=frame, missing_tickers=missing, class_weights=tuple(class_weights))
    # The same policy on the validation days of the training period (the fine-tuning's own split), for the
    # test tickers: what the calibration is fitted on and the second decision rule's margin is chosen on
    # (never on test days); at the report's tau the calibration also fits on the other universe tickers'
    # validation days (more rows, the same days).
    fit_days = validation_days(settings, asset, fold)
    fitting = purge_labels(predict(settings, policy, classifier, fit_days, _union(tickers, names)).frame, fold)
    validation = fitting.filter(pl.col("ticker").is_in(tickers))
    universe = test.frame.filter(pl.col("ticker").is_in(names)) if at_report_tau else None
    result, validation, calibrated = _calibrated(result, validation, universe, fitting)
    return result, validation, calibrated, universe


def _union(first: list[str], then: list[str]) -> list[str]:
    return first + [t for t in then if t not in set(first)]


def purge_labels(validation: pl.DataFrame, fold: Fold) -> pl.DataFrame:
    """Validation-day predictions with the labels of days after ``fold.label_end`` unknown (-1): a label there
    reads a close the fold may not see (with a single cut, the first test day's), so neither the calibration nor
    the margin rule's m is fitted on it (the fine-tuning's own rows are purged the same way)."""
    late = pl.col("date") > fold.label_end
    return validation.with_columns(
        pl.when(late).then(UNKNOWN_LABEL).otherwise(pl.col("label")).cast(pl.Int8).alias("label")
    )


def baseline_policy_predictions(
    settings: Settings, policy: Policy, days: list[dt.date], at_report_tau: bool, probe: tuple | None = None
) -> tuple[Predictions, pl.DataFrame, pl.DataFrame | None, pl.DataFrame | None]:
    """``model_predictions`` of a probe or a rule (from the features files): a probe's fit is ``probe`` (a
    ``(model, fit)`` pair as ``pins.load_probe`` returns it; ``baselines.fitted_probe``), a rule's None."""
    from kinematic_pipeline.model_pins import recorded_file
    from kinematic_pipeline.pins import features_path
    from kinematic_pipeline.stages.baselines import baseline_predictions

    variant, wh = policy.variant, settings.warehouse
    asset = variant.token_asset
    tickers = evaluation_tickers(settings, asset, days)
    frame = baseline_predictions(settings, policy, "test", tickers, probe)
    present = set(frame["ticker"].unique().to_list())
    fold = policy.fold
    validation = purge_labels(baseline_predictions(settings, policy, "validation", sorted(present), probe), fold)
    files = [features_path(settings, policy.variant.name, part) for part in ("training", "test")]
    tok = variant.tokenization
    inputs = exact.read_parquet(wh.features_inputs_file(tok.name))
    shards = [dict(asset=tok.features_asset, date="", path=f, content_hash=file_sha256(f)) for f in files]
    shards += [  # the features' inputs as files of this warehouse (recorded relative to the one they were built in)
        {**row, "path": recorded_file(wh, row["asset"], row["date"], row["path"])}
        for row in inputs.iter_rows(named=True)
    ]
    weights = None if probe is None else tuple(float(w) for w in probe[1]["class_weights"])  # its fit's record
    result = Predictions(frame, shards, [t for t in tickers if t not in present], class_weights=weights)
    # a probe is calibrated on its validation days as a model is; a rule's one-hot action is not
    fitting, universe = (validation if variant.calibrated else None), None
    if at_report_tau:
        names = universe_tickers(settings, asset, days)
        universe = baseline_predictions(settings, policy, "test", names, probe)
        others = [t for t in names if t not in present]
        if fitting is not None and others:
            more = baseline_predictions(settings, policy, "validation", others, probe)
            fitting = pl.concat([validation, purge_labels(more, fold)])
    result, validation, calibrated = _calibrated(result, validation, universe, fitting)
    return result, validation, calibrated, universe
