"""The simple baselines beside the transformers: probes fitted on the features files, and fixed rules.

- ``materialize_probe``: a multinomial logistic regression (scikit-learn, lbfgs, C = 1) or a LightGBM tree model
  (15 leaves, learning rate 0.1, 63 bins, each tree on 30% of the rows and 80% of the features drawn with the
  policy's seed, early stopping on the validation days: ``probe_learners.LEARNERS`` holds both and their
  hyperparameters) on every labelled training ticker-day of the universe at the
  policy's tau, with the features z-scored by the training rows' mean and std (clipped at +-``CLIP``) and
  the models' class weights (``train.class_weights``), so that their softmax is read like the models' (the
  paper's weighted argmax; the weights undone elsewhere). Saved under ``Warehouse.probe_dir`` as data, never
  as code: a logistic regression's classes, coefficients and intercepts (``model.json``), a LightGBM model's own
  text format (``model.txt``), and ``fit.json`` (scaler, rows, days, iterations, validation loss, the model file's
  sha256: the record the predictions pin, free of wall times, so that an unchanged refit writes the same bytes);
  the fit's seconds go to ``fit_timing.json`` beside them, in no pin and no check. Nothing here unpickles: a probe
  folder received from someone else can hold wrong numbers (refused by the sha256 check), never a payload that
  runs (a pickle of an older version is refused unread).
- rules (fitted on nothing): always Hold; momentum: Buy when the last 1-day (20-day) log return is above
  tau, Sell when below -tau, else Hold. They decide: their "probabilities" are the one-hot action.

``predictors.features`` turns either into the predictions of a policy (the same schema and files as the
models': the backtested tickers' test days, their validation days, and the universe at the report's tau).
No dagster here.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from kinematic_pipeline.config import Settings
from kinematic_pipeline.pins import features_path
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.probe_models import (
    FIT_FILE,
    LEGACY_PICKLE,
    MODEL_FILES,
    TIMING_FILE,
    ProbeModel,
)
from kinematic_pipeline.stages.features import read_features
from kinematic_pipeline.stages.probe_learners import LEARNERS, FitRows, gamma_loss
from kinematic_pipeline.variants import probes
from kinematic_pipeline.warehouse.atomic import file_sha256, write_bytes_atomic

CLIP = 10.0  # z-scores beyond this are clipped (a winsorization of rare extreme windows)


@dataclass(frozen=True)
class ProbeFit:
    policy: Policy
    folder: Path
    fit: dict
    timing: dict  # ``fit_timing.json``: the wall time, kept out of the pinned ``fit``

    def metadata(self) -> dict:
        return {k: v for k, v in self.fit.items() if not isinstance(v, list)} | self.timing | {"path": self.folder}


def _matrix(frame: pl.DataFrame, columns: tuple[str, ...]) -> np.ndarray:
    return frame.select(columns).to_numpy().astype(np.float64)


def _standardize(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    z = (x - mean) / std
    return np.clip(np.nan_to_num(z, nan=0.0, posinf=CLIP, neginf=-CLIP), -CLIP, CLIP)


def materialize_probe(settings: Settings, policy: Policy) -> ProbeFit:
    """Fit the probe of ``policy`` on the training rows of its features file; save it (data, not a pickle) with
    its fit record, which holds the model file's sha256 (and its wall time beside it, unpinned); the fit."""
    started = time.perf_counter()
    model, fit = train_probe(settings, policy)
    folder = settings.warehouse.probe_dir(policy)
    folder.mkdir(parents=True, exist_ok=True)
    data = model.to_bytes()
    fit = fit | {"model_file": MODEL_FILES[fit["learner"]], "model_sha256": hashlib.sha256(data).hexdigest()}
    write_bytes_atomic(folder / fit["model_file"], data)
    write_bytes_atomic(folder / FIT_FILE, json.dumps(fit, indent=1).encode())
    timing = {"fit_seconds": round(time.perf_counter() - started, 2)}
    write_bytes_atomic(folder / TIMING_FILE, json.dumps(timing, indent=1).encode())
    (folder / LEGACY_PICKLE).unlink(missing_ok=True)
    return ProbeFit(policy, folder, fit, timing)


def train_probe(settings: Settings, policy: Policy) -> tuple[ProbeModel, dict]:
    """The probe of ``policy`` fitted on the labelled training rows of its features file (at most
    ``evaluate.probe_max_train_rows``: a sample seeded by the policy's seed) and its fit record, as ``load_probe``
    returns them (the model as the numbers it is saved as, so it predicts alike loaded or not); nothing is
    written."""
    variant = policy.variant
    if not probes([variant.name]):
        raise ValueError(f"{variant.name} is not a probe")
    task = policy.task
    label, columns, objective = task.label_column, variant.feature_columns, task.probe_objective
    frame = read_features(settings, policy.variant.name, policy.fold, ("train", "validation"), (label,))
    known = pl.col(label).is_finite() if objective is not None else pl.col(label) >= 0
    frame = frame.filter(pl.col(label).is_not_null() & known)
    train, val = frame.filter(pl.col("split") == "train"), frame.filter(pl.col("split") == "validation")
    if train.height == 0:
        raise ValueError(f"{policy}: no labelled training row in {features_path(settings, policy.variant.name)}")
    cap = settings.evaluate.probe_max_train_rows
    if cap is not None and train.height > cap:  # a seeded uniform sample of the fold's labelled training rows
        train = train.sample(n=cap, seed=policy.seed).sort("ticker", "date")
    x_train = _matrix(train, columns)
    mean, std = np.nanmean(x_train, axis=0), np.nanstd(x_train, axis=0)
    std = np.where(std > 0, std, 1.0)
    x_train = _standardize(x_train, mean, std)
    x_val = _standardize(_matrix(val, columns), mean, std)
    target = np.float64 if objective is not None else np.int64
    y_train, y_val = (split[label].to_numpy().astype(target) for split in (train, val))
    weights = np.asarray(settings.train.class_weights, dtype=np.float64) if objective is None else None
    rows = FitRows(x_train, y_train, x_val, y_val, weights, policy.seed, settings.probe_threads, objective)
    model, iterations = LEARNERS[variant.learner].fit(rows, settings.evaluate)
    val_loss = float("nan")
    if val.height and objective is not None:
        val_loss = gamma_loss(y_val, model.predict_log(x_val))
    elif val.height:
        q = _classes3(model, model.predict_proba(x_val))
        val_loss = float(
            np.average(-np.log(np.clip(q[np.arange(len(y_val)), y_val], 1e-12, 1)), weights=weights[y_val])
        )
    fit = {
        "variant": policy.variant.name,
        "learner": variant.learner,
        "seed": policy.seed,
        "task": task.key,
        "tau": getattr(task, "tau", None),
        "objective": objective or "classes",
        "features": list(columns),
        "classes": model.classes_.tolist(),
        "mean": mean.tolist(),
        "std": std.tolist(),
        "train_rows": int(train.height),
        "validation_rows": int(val.height),
        "train_days": f"{train['date'].min()} .. {train['date'].max()}",
        "validation_days": f"{val['date'].min()} .. {val['date'].max()}" if val.height else "none",
        "iterations": iterations,
        # the classes' weighted log loss, or a regression's QLIKE (gamma_loss)
        "validation_weighted_log_loss" if objective is None else "validation_qlike": round(val_loss, 6),
        # its sample weights: what its probabilities mean (model_pins); none for a regression
        "class_weights": weights.tolist() if weights is not None else None,
        "fold": policy.fold.label,
        "train_end": str(policy.fold.train_end),  # the cut it was fitted for: checked on load
        "features_sha256": file_sha256(features_path(settings, policy.variant.name)),  # the training file's
    }  # no wall time: the predictions pin this record (``fit_timing.json`` holds the seconds)
    return model, fit


def _classes3(model, proba: np.ndarray) -> np.ndarray:
    """Probabilities in the column order Buy, Sell, Hold even when a class never appeared in training."""
    out = np.zeros((proba.shape[0], 3), dtype=np.float64)
    out[:, np.asarray(model.classes_, dtype=np.int64)] = proba
    return out


def probe_probabilities(probe: tuple[ProbeModel, dict], frame: pl.DataFrame) -> np.ndarray:
    """A loaded probe's (``load_probe``) softmax [n, 3] (Buy, Sell, Hold) on the rows of ``frame``; a regression's
    forecast [n, 1] on its link's scale (a log variance)."""
    model, fit = probe
    x = _standardize(_matrix(frame, tuple(fit["features"])), np.asarray(fit["mean"]), np.asarray(fit["std"]))
    regression = fit.get("objective", "classes") != "classes"
    if x.shape[0] == 0:
        return np.empty((0, 1 if regression else 3))
    return model.predict_log(x)[:, None] if regression else _classes3(model, model.predict_proba(x))
