"""Temperature-and-bias calibration of a weighted-CE classifier, fitted on a fold's validation days.

The network's softmax q (the predictions' ``SOFTMAX_COLUMNS``) is that of a classifier trained with weighted
cross-entropy (class weights w, q_i ∝ w_i p_i; ``decisions`` module docstring), and a fine-tuned network's softmax
is often over- or under-confident on top of that. The calibration rescales the weighted logits ln q and shifts them
per class:

    z' = ln q / T + b,   q' = softmax(z'),   p' = softmax(ln q / T + b - ln w) = the de-weighted q'

The predictions store p' (``PROB_COLUMNS``: q' as float32, de-weighted in float64 with
``tasks.actions.stored_probabilities``) and the argmax of q' as their action, so that everything downstream (the
margin rule, the skill and IC tables) reads the calibrated p' and the calibrated argmax is the stored action.
(ln T, b_buy, b_sell) minimise the
UNWEIGHTED mean NLL of p' on the labelled validation rows (b_hold = 0: softmax is shift-invariant), plus a
small ridge penalty towards the identity. Fitted only on validation days, never on test days.
No dagster and no file I/O here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from kinematic_pipeline.tasks.actions import (
    PROB_COLUMNS,
    SOFTMAX_COLUMNS,
    check_labels,
    check_probabilities,
    class_weight_vector,
    stored_probabilities,
)

Q_FLOOR = 1e-7  # q is clipped here before the log: a float32 softmax can be exactly 0
MIN_ROWS = 30  # fewer labelled validation rows than this: no fit, the identity
# Ridge RIDGE * |(ln T, b_buy, b_sell)|^2 on the SUMMED NLL (RIDGE / n on the mean): a N(0, 0.22^2) prior on each
# parameter, worth about ten rows. Measured on the ci profile (validation sets of 130-360 rows from ~25 days):
# with a prior worth one row the fitted T moved from 1.7 to 3.6 between 130 and 182 rows of the same days, and
# the calibrated test log loss of the transformers rose (SplineGPT 0.620 -> 0.636); with ten, every policy's
# test log loss fell. On a real fold's ~20,000 validation rows it moves T and b by about 0.05%.
RIDGE = 10.0
CALIBRATION_SCHEMA: dict[str, pl.DataType] = {
    "variant": pl.String,
    "tau": pl.Float64,
    "seed": pl.Int64,
    "fold": pl.String,
    "temperature": pl.Float64,  # T: > 1 softens an over-confident classifier, < 1 sharpens an under-confident one
    "bias_buy": pl.Float64,  # b, added to the weighted logits ln q / T
    "bias_sell": pl.Float64,
    "bias_hold": pl.Float64,  # always 0 (softmax is shift-invariant)
    "n_rows": pl.Int64,  # labelled validation rows the fit saw
    "nll_before": pl.Float64,  # unweighted mean NLL of the de-weighted p on those rows, raw
    "nll_after": pl.Float64,  # ... and calibrated (<= nll_before)
    "fitted": pl.Boolean,  # False: too few rows or classes, the identity was kept
}


@dataclass(frozen=True)
class Calibration:
    """z' = ln q / T + b on the weighted logits; the identity (T = 1, b = 0) when ``fitted`` is False."""

    temperature: float  # T > 0
    bias: tuple[float, float, float]  # b [Buy, Sell, Hold], b_hold = 0
    n_rows: int  # labelled rows it was fitted on
    nll_before: float  # unweighted mean NLL of the raw de-weighted p on those rows (NaN without a labelled row)
    nll_after: float  # the same of the calibrated p'
    fitted: bool  # False: fewer than MIN_ROWS labelled rows, one class only, or no improvement: the identity

    @property
    def is_identity(self) -> bool:
        return self.temperature == 1.0 and all(b == 0.0 for b in self.bias)

    def apply(self, q) -> np.ndarray:
        """The calibrated weighted probabilities q' (n, 3) float32, rows summing to 1; the identity returns
        ``q`` itself (as float32: the same array when it already is)."""
        if self.is_identity:
            return np.asarray(q, dtype=np.float32)
        z = _calibrated_logits(_log_q(check_probabilities(q)), np.log(self.temperature), np.asarray(self.bias))
        return _softmax(z).astype(np.float32)

    def metadata(self) -> dict:
        """What the predictions asset shows of the calibration."""
        return {
            "calibration_temperature": self.temperature,
            "calibration_bias": ", ".join(f"{b:+.3f}" for b in self.bias),
            "calibration_rows": self.n_rows,
            "calibration_nll": f"{self.nll_before:.4f} -> {self.nll_after:.4f}",
            "calibration_fitted": self.fitted,
        }

    def to_frame(self, variant: str, tau: float, seed: int, fold: str) -> pl.DataFrame:
        """One ``CALIBRATION_SCHEMA`` row: the parameters of the policy (variant, tau, seed) in ``fold``."""
        row = dict(
            variant=variant,
            tau=tau,
            seed=seed,
            fold=fold,
            temperature=self.temperature,
            bias_buy=self.bias[0],
            bias_sell=self.bias[1],
            bias_hold=self.bias[2],
            n_rows=self.n_rows,
            nll_before=self.nll_before,
            nll_after=self.nll_after,
            fitted=self.fitted,
        )
        return pl.DataFrame([row], schema=CALIBRATION_SCHEMA)


def identity(n_rows: int = 0, nll: float = float("nan")) -> Calibration:
    return Calibration(1.0, (0.0, 0.0, 0.0), n_rows, nll, nll, fitted=False)


def fit_calibration(q, labels, class_weights, ridge: float = RIDGE, min_rows: int = MIN_ROWS) -> Calibration:
    """Fit (T, b) on the rows of ``q`` (n, 3, weighted softmax) whose label (n,) is known (0/1/2; -1 ignored).

    Minimises the unweighted mean NLL of p' = softmax(ln q / T + b - ln w) plus ``ridge`` / n * |(ln T, b_buy,
    b_sell)|^2 (n labelled rows) with L-BFGS-B and the analytic gradient, from the identity. The identity is kept
    (``fitted`` False) with fewer than ``min_rows`` labelled rows, with a single class among them, or when the fit would
    not lower the NLL (it cannot, up to the optimiser: the penalised objective starts at the identity's NLL).
    """
    from scipy.optimize import minimize

    labels = check_labels(labels)
    q = check_probabilities(q, labels.size)
    w = class_weight_vector(class_weights)
    known = labels >= 0
    y, log_q = labels[known], _log_q(q[known])
    log_w = np.log(w)
    n = int(y.size)
    before = _nll(log_q, y, log_w, 0.0, np.zeros(3)) if n else float("nan")
    if n < min_rows or np.unique(y).size < 2:
        return identity(n, before)

    onehot = np.eye(3)[y]

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        log_t, bias = theta[0], np.array([theta[1], theta[2], 0.0])
        u = _calibrated_logits(log_q, log_t, bias) - log_w  # (n, 3) de-weighted calibrated logits
        log_p = u - _logsumexp(u)
        resid = (np.exp(log_p) - onehot) / n  # d mean NLL / d u
        grad = np.array([np.sum(resid * (-log_q * np.exp(-log_t))), resid[:, 0].sum(), resid[:, 1].sum()])
        value = -np.mean(log_p[np.arange(n), y]) + ridge / n * float(theta @ theta)
        return value, grad + 2 * ridge / n * theta

    # ln T within [-5, 5] (T from 0.007 to 150), b within [-20, 20]: bounds that only stop a runaway fit
    bounds = [(-5.0, 5.0), (-20.0, 20.0), (-20.0, 20.0)]
    res = minimize(objective, np.zeros(3), jac=True, method="L-BFGS-B", bounds=bounds)
    log_t, bias = float(res.x[0]), (float(res.x[1]), float(res.x[2]), 0.0)
    after = _nll(log_q, y, log_w, log_t, np.asarray(bias))
    if not (np.isfinite(after) and after <= before):
        return identity(n, before)
    return Calibration(float(np.exp(log_t)), bias, n, before, after, fitted=True)


def calibrate_predictions(frame: pl.DataFrame, calibration: Calibration, class_weights) -> pl.DataFrame:
    """``frame`` (PREDICTIONS_SCHEMA) with p_buy, p_sell, p_hold the calibrated q' of its softmax (float32),
    de-weighted with ``class_weights`` (float64, ``tasks.actions.stored_probabilities``), and the action recomputed
    as the argmax of q' (as ``buy_sell_hold.predictions_frame`` does); unchanged under the identity (its p are the
    de-weighted softmax already)."""
    if calibration.is_identity or frame.height == 0:
        return frame
    q = calibration.apply(frame.select(SOFTMAX_COLUMNS).to_numpy().astype(np.float64))
    p = stored_probabilities(q, class_weights)
    return frame.with_columns(
        *[pl.Series(name, p[:, k], dtype=pl.Float64) for k, name in enumerate(PROB_COLUMNS)],
        pl.Series("action", q.argmax(axis=1).astype(np.int8), dtype=pl.Int8),
    )


def calibrate_frames(
    fitting: pl.DataFrame, frames: Sequence[pl.DataFrame | None], class_weights
) -> tuple[list[pl.DataFrame | None], Calibration]:
    """Fit the calibration on ``fitting`` (PREDICTIONS_SCHEMA rows of validation days: the network's softmax and
    the label) and apply it to each of ``frames`` (None stays None). The frames' own labels are never read."""
    q = fitting.select(SOFTMAX_COLUMNS).to_numpy().astype(np.float64)
    calibration = fit_calibration(q, fitting["label"].to_numpy(), class_weights)
    frames = [None if f is None else calibrate_predictions(f, calibration, class_weights) for f in frames]
    return frames, calibration


# ---------------------------------------------------------------------------------------------- kernels


def _log_q(q: np.ndarray) -> np.ndarray:
    return np.log(np.clip(q, Q_FLOOR, None))


def _calibrated_logits(log_q: np.ndarray, log_t: float, bias: np.ndarray) -> np.ndarray:
    return log_q * np.exp(-log_t) + bias  # (n, 3)


def _logsumexp(u: np.ndarray) -> np.ndarray:
    top = u.max(axis=1, keepdims=True)
    return top + np.log(np.exp(u - top).sum(axis=1, keepdims=True))  # (n, 1)


def _softmax(u: np.ndarray) -> np.ndarray:
    return np.exp(u - _logsumexp(u))


def _nll(log_q: np.ndarray, y: np.ndarray, log_w: np.ndarray, log_t: float, bias: np.ndarray) -> float:
    """Unweighted mean NLL of the de-weighted calibrated p' on labels y."""
    u = _calibrated_logits(log_q, log_t, bias) - log_w
    return float(-np.mean((u - _logsumexp(u))[np.arange(y.size), y]))
