"""A fine-tuned transformer's predictions: its adapter on the foundation it was fine-tuned from, over the token
windows of the test days, calibrated on its fold's validation days.

Rolling protocol (paper "Experimental Setup & Protocol"): the action of day t comes from the token shard of day t,
whose window was fitted on bars up to t only, so nothing after t enters a decision. torch and PEFT are imported
when a model is loaded or predicts, never when this module is. No dagster here.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass

import numpy as np
import polars as pl

from kinematic_pipeline.config import Settings
from kinematic_pipeline.folds import evaluation_days
from kinematic_pipeline.model_pins import check_class_weights, recorded_file
from kinematic_pipeline.pins import check_token_inputs, fold_stats, verified_labels
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.predictors.base import (
    PolicyPredictions,
    Predictions,
    Predictor,
    calibrated,
    evaluation_tickers,
    purge_labels,
    union,
    universe_tickers,
)
from kinematic_pipeline.tasks.base import Task
from kinematic_pipeline.warehouse import LABELS, RAW_OHLCV
from kinematic_pipeline.warehouse import exact_paths as exact
from kinematic_pipeline.window_store import validation_days
from kinematic_pipeline.windows import N_CHANNELS, N_TOKENS


@dataclass(frozen=True)
class ModelPredictor(Predictor):
    """A ``ModelVariant``'s: what it decides with is its classifier (the LoRA adapter or the linear probe on its
    foundation) and the class weights it was fine-tuned with."""

    def load(self, settings: Settings, policy: Policy) -> tuple[object, tuple[float, float, float]]:
        from kinematic_pipeline.training.run import load_classifier  # torch and PEFT: only when predicting

        classifier = load_classifier(settings, policy)
        return classifier, check_class_weights(settings, policy)

    def predictions(
        self, settings: Settings, policy: Policy, days: list[dt.date], reported: bool, fitted: object = None
    ) -> PolicyPredictions:
        """Two forward passes: the test days and the validation days, each over the test tickers and
        (``reported``) the universe's at once (a ticker-day is predicted once)."""
        from kinematic_pipeline.models.heads import for_inference

        classifier, class_weights = self.load(settings, policy) if fitted is None else fitted
        fold, asset = policy.fold, policy.variant.token_asset
        classifier = for_inference(classifier)  # LoRA merged once for both passes
        wanted = evaluation_tickers(settings, asset, days)
        names = universe_tickers(settings, asset, days) if reported else []
        test = predict(settings, policy, classifier, days, union(wanted, names), class_weights)
        frame = test.frame.filter(pl.col("ticker").is_in(wanted))
        tickers = sorted(frame["ticker"].unique().to_list())
        missing = [t for t in wanted if t not in set(tickers)]
        weights = None if class_weights is None else tuple(class_weights)  # a task trained with none: None
        result = dataclasses.replace(test, frame=frame, missing_tickers=missing, class_weights=weights)
        # The same policy on the validation days of the training period (the fine-tuning's own split), for the
        # test tickers: what the calibration is fitted on and the second decision rule's margin is chosen on
        # (never on test days); at the report's tau the calibration also fits on the other universe tickers'
        # validation days (more rows, the same days).
        fit_days = validation_days(settings, asset, fold)
        rows = predict(settings, policy, classifier, fit_days, union(tickers, names), class_weights)
        fitting = purge_labels(rows.frame, policy)
        validation = fitting.filter(pl.col("ticker").is_in(tickers))
        universe = test.frame.filter(pl.col("ticker").is_in(names)) if reported else None
        result, validation, universe_calibrated = calibrated(result, validation, universe, fitting)
        return result, validation, universe_calibrated, universe

    def provenance(self, wh, policy: Policy, add) -> None:
        """The adapter and foundation files of a model, and what each was served in training."""
        variant = self.variant
        foundation, adapter = wh.policy_files(policy)
        for path in wh.adapter_files(policy):
            add("adapter", variant.asset("adapter"), path)
        add("foundation", variant.asset("foundation"), foundation)
        for prefix, model_dir in (("pretrain", foundation.parent), ("finetune", adapter)):
            used_file = wh.shards_used(model_dir)
            add(f"{prefix}_lineage", variant.asset("foundation" if prefix == "pretrain" else "adapter"), used_file)
            used = exact.read_parquet(used_file)
            for row in used.filter(pl.col("served") > 0).iter_rows(named=True):  # what the model was served
                link = "window_store" if row["split"] == "store" else "training_shard"
                date = None if link == "window_store" else row["date"]
                path = recorded_file(wh, row["asset"], row["date"], row["path"])
                add(link, row["asset"], path, row["content_hash"], date=date, split=f"{prefix}_{row['split']}")


def predict_outputs(classifier, x: np.ndarray, batch_size: int, task: Task) -> np.ndarray:
    """What ``task`` stores of the classifier's outputs (``Task.outputs_of``: Buy/Sell/Hold's softmax [n, 3]) for
    normalized windows x [n, 64, C], in batches."""
    import torch

    out = np.empty((x.shape[0], task.head_width), dtype=np.float32)
    classifier.eval()
    with torch.inference_mode():
        for start in range(0, x.shape[0], batch_size):
            logits = classifier(torch.from_numpy(np.ascontiguousarray(x[start : start + batch_size])))
            out[start : start + batch_size] = task.outputs_of(logits)
    return out


def predict(
    settings: Settings,
    policy: Policy,
    classifier,
    days: list[dt.date] | None = None,
    tickers: list[str] | None = None,
    class_weights=None,
) -> Predictions:
    """The predictions of one fine-tuned classifier on every test day (or ``days``) and ticker: its task's outputs
    (``Task.predictions_frame``; Buy/Sell/Hold: the softmax, its argmax, and p de-weighted with the ``class_weights``
    it was fine-tuned with)."""
    wh, variant = settings.warehouse, policy.variant
    asset = variant.token_asset
    days = evaluation_days(settings, asset, policy.fold) if days is None else days
    tickers = evaluation_tickers(settings, asset, days) if tickers is None else tickers
    stats = fold_stats(settings, variant.tokenization, policy.fold) if variant.normalized else None
    normalize = variant.tokenization.normalizer(stats, variant.channels)
    check_token_inputs(settings, asset, days)  # windows of the raw days as they are now, or nothing is predicted
    frame = _test_windows(settings, asset, days, tickers, policy.task)
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
    outputs = predict_outputs(classifier, normalize(tokens), settings.evaluate.predict_batch_size, policy.task)
    out = policy.task.predictions_frame(frame, policy, outputs, class_weights)
    present = set(out["ticker"].unique().to_list())
    return Predictions(out, shards, [t for t in tickers if t not in present], policy.task)


def _test_windows(settings: Settings, asset: str, days: list[dt.date], tickers: list[str], task: Task) -> pl.DataFrame:
    """The ``tickers``' windows of ``days`` with the day's close and ``task``'s label (null where none yet): one scan
    per asset over the days' files, not one read per day (a day's token shard holds every ticker's window)."""
    wh, label_col = settings.warehouse, task.label_column
    if not days:  # no test day: an empty frame (tokens are then not read)
        schema = {"ticker": pl.String, "date": pl.Date, "close": pl.Float64, label_col: task.target_dtype}
        return pl.DataFrame(schema=schema)
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
    label_files = verified_labels(settings, [d for d in days if wh.shard(LABELS, d).exists()])
    if label_files:
        labels = exact.scan_parquet(label_files).filter(wanted).select("ticker", "date", label_col)
        frame = frame.join(labels, on=["ticker", "date"], how="left")
    else:
        frame = frame.with_columns(pl.lit(None, task.target_dtype).alias(label_col))
    # one order: the joins' row order varies from call to call, and with it the model's batches (and so the
    # float32 probabilities in their last bits)
    return frame.collect().sort("ticker", "date")
