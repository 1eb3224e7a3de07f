"""Predictive skill of Buy/Sell/Hold probabilities, independent of any trading rule: pure functions of arrays.

"Do the tokens carry information?" For one (variant, tau, seed) on the test period: log loss and Brier
score as skill scores against the predictor that outputs the TRAINING base rates (one (3,) vector for every
row, or per row its walk-forward fold's: (n, 3)) (0 = no more information than the base rates, 1 = perfect,
< 0 = worse than the base rates), balanced accuracy and macro-F1 of the argmax of the probabilities, the
AUC of Buy-vs-rest and Sell-vs-rest, and (given the policy's actions) the balanced accuracy of those actions,
each with a percentile bootstrap interval that resamples whole test days (every ticker of a day together) in
circular blocks of ``DEFAULT_BLOCK_DAYS`` consecutive days unless told otherwise. Codes:
``kinematic_pipeline.variants`` (0 Buy, 1 Sell, 2 Hold; label -1 is ignored).

``skill_table`` scores one sample; ``skill_seeds.seed_mean_skill`` scores the mean over seeds of one
(variant, tau) under one shared day resample. Both call ``point_and_draws``: the point values and the
(n_boot,) resample values of every metric for given day resample counts.

The classifier is trained with weighted cross-entropy, so its softmax q is tilted toward the heavy classes
(q_i ∝ w_i p_i). Log loss and Brier score are proper scores of calibrated probabilities: pass the de-weighted p
the predictions store (``tasks.actions.stored_probabilities``); the ranking metrics and the argmax metrics are of
whatever probabilities are passed. No dagster and no file I/O here.

Why blocks: a day's scores are not independent of its neighbours' (volatility clusters, so the rows' losses of
one week move together); resampling single days treats them as independent and gave intervals 2.4-3x too narrow
on the real data (science-5 M4: the trailing-volatility forecaster's skill sd 0.0033 over single days, 0.0080 over
20-day blocks, 0.0101 over 60-day blocks). 20 trading days, the backtests' Sharpe block, is the default.
"""

from __future__ import annotations

import numpy as np

from kinematic_pipeline.backtest.metrics import brier_score
from kinematic_pipeline.tasks.actions import BUY, SELL, check_labels, check_probabilities

DEFAULT_BLOCK_DAYS = 50  # trading days per resampled block (evaluate.skill_bootstrap_block_days in the stages)
# a resample holds at least this many blocks: a block is cut to n_days // MIN_BLOCKS days on a short test period (one
# block of every day would only rotate them, and every resample would give the point estimate)
MIN_BLOCKS = 4
LOG_EPS = 1e-15  # probabilities are clipped to [LOG_EPS, 1] inside the log (as scikit-learn does)
_CHUNK_CELLS = 1_000_000  # resamples are evaluated in chunks of about this many (resample x row) weights
# The columns of skill_table, in order; each also has "<name>_ci_low" and "<name>_ci_high".
SKILL_METRICS = (
    "log_loss",
    "log_loss_reference",
    "log_loss_skill",
    "brier",
    "brier_reference",
    "brier_skill",
    "balanced_accuracy",  # of the argmax of the probabilities
    "macro_f1",  # of the argmax of the probabilities
    "auc_buy",
    "auc_sell",
    "policy_balanced_accuracy",  # of the policy's actions (NaN when none are given)
)

__all__ = [
    "DEFAULT_BLOCK_DAYS",
    "SKILL_METRICS",
    "auc_one_vs_rest",
    "balanced_accuracy",
    "base_rates",
    "brier_score",
    "day_resample_counts",
    "effective_block_days",
    "labelled_sample",
    "log_loss",
    "macro_f1",
    "percentile_interval",
    "point_and_draws",
    "reference_rates",
    "skill_score",
    "skill_table",
]


# ------------------------------------------------------------------------------------------ validation


# ------------------------------------------------------------------------------------------ point metrics


def base_rates(labels) -> np.ndarray:
    """Shares of Buy, Sell, Hold among the known labels (-1 ignored), shape (3,). ValueError if none is known."""
    labels = check_labels(labels)
    known = labels[labels >= 0]
    if known.size == 0:
        raise ValueError("base_rates: no known label (all are -1)")
    return np.bincount(known, minlength=3) / known.size


def log_loss(probs, labels) -> float:
    """Mean over labelled rows of -ln p[label], p clipped to [1e-15, 1] (rows are not renormalized)."""
    labels = check_labels(labels)
    probs = check_probabilities(probs, labels.size)
    keep = labels >= 0
    if not keep.any():
        return float("nan")
    return float(np.mean(-np.log(np.clip(probs[keep, labels[keep]], LOG_EPS, 1.0))))


def skill_score(model_loss, reference_loss):
    """1 - model / reference: 0 for the reference itself, 1 for a loss of 0, negative when worse.

    NaN where the reference loss is 0 (nothing to improve on). Works on scalars and arrays alike.
    """
    model, ref = np.asarray(model_loss, dtype=np.float64), np.asarray(reference_loss, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(ref > 0, 1.0 - model / ref, np.nan)
    return float(out) if out.ndim == 0 else out


def balanced_accuracy(predicted, labels) -> float:
    """Mean recall over the classes present among the labelled rows (labels -1 ignored); NaN if none."""
    return float(_balanced_accuracy(_confusion(predicted, labels)[None])[0])


def macro_f1(predicted, labels) -> float:
    """Mean of F1_k = 2 TP_k / (2 TP_k + FP_k + FN_k) over the classes that occur as a label or a prediction
    (a class neither predicted nor present is left out, not counted as 0); NaN with no labelled row."""
    return float(_macro_f1(_confusion(predicted, labels)[None])[0])


def auc_one_vs_rest(scores, is_class) -> float:
    """Area under the ROC curve of ``scores`` for ``is_class`` against the rest: the Mann-Whitney
    probability that a random member scores above a random non-member, ties counted 1/2. NaN when either
    side is empty (a class absent from the labels, or every row in it)."""
    scores = np.asarray(scores, dtype=np.float64)
    is_class = np.asarray(is_class, dtype=bool)
    if scores.shape != is_class.shape or scores.ndim != 1:
        raise ValueError(f"scores and is_class must be 1-D of one length, got {scores.shape} and {is_class.shape}")
    return float(_weighted_auc(scores, is_class, np.ones((1, scores.size)))[0])


# ------------------------------------------------------------------------------------------ weighted kernels
# Every metric is computed with row weights W (resamples x rows): all ones for the point estimate, the
# number of times each row's day was drawn for a bootstrap resample. One code path for both.


def _confusion(predicted, labels) -> np.ndarray:
    labels = check_labels(labels)
    predicted = np.asarray(predicted).astype(np.int64)
    if predicted.shape != labels.shape:
        raise ValueError(f"predicted and labels must have one shape, got {predicted.shape} and {labels.shape}")
    keep = labels >= 0
    if ((predicted[keep] < 0) | (predicted[keep] > 2)).any():
        raise ValueError("predicted actions must be 0, 1 or 2")
    return np.bincount(labels[keep] * 3 + predicted[keep], minlength=9).reshape(3, 3).astype(np.float64)


def _balanced_accuracy(conf: np.ndarray) -> np.ndarray:
    """(B, 3, 3) confusion counts (rows true, columns predicted) -> (B,) balanced accuracy."""
    support = conf.sum(axis=2)
    present = support > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        recall = np.where(present, np.diagonal(conf, axis1=1, axis2=2) / support, 0.0)
        return np.where(present.any(axis=1), recall.sum(axis=1) / present.sum(axis=1), np.nan)


def _macro_f1(conf: np.ndarray) -> np.ndarray:
    """(B, 3, 3) confusion counts -> (B,) macro-F1 over the classes that are labelled or predicted."""
    tp = np.diagonal(conf, axis1=1, axis2=2)
    denom = conf.sum(axis=2) + conf.sum(axis=1)  # 2 TP + FP + FN
    used = denom > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        f1 = np.where(used, 2 * tp / denom, 0.0)
        return np.where(used.any(axis=1), f1.sum(axis=1) / used.sum(axis=1), np.nan)


def _weighted_auc(scores: np.ndarray, is_class: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Mann-Whitney AUC with row weights (B, n) -> (B,): sum over (member i, non-member j) of
    w_i w_j (1[s_i > s_j] + 1[s_i = s_j] / 2), over (sum of member weights)(sum of non-member weights)."""
    order = np.argsort(scores, kind="stable")
    s = scores[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]]) if s.size else np.zeros(0, dtype=np.int64)
    member = is_class[order]
    w = weights[:, order]
    if s.size == 0:
        return np.full(weights.shape[0], np.nan)
    pos = np.add.reduceat(np.where(member, w, 0.0), starts, axis=1)  # (B, groups of tied scores)
    neg = np.add.reduceat(np.where(member, 0.0, w), starts, axis=1)
    neg_below = np.cumsum(neg, axis=1) - neg
    num = np.sum(pos * (neg_below + 0.5 * neg), axis=1)
    total = pos.sum(axis=1) * neg.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(total > 0, num / total, np.nan)


def _row_losses(probs: np.ndarray, labels: np.ndarray, reference: np.ndarray) -> dict[str, np.ndarray]:
    """Per labelled row: model and reference log loss and Brier contributions (reference (3,) or (n, 3))."""
    rows = np.arange(labels.size)
    onehot = np.eye(3)[labels]
    reference = np.broadcast_to(reference, probs.shape)  # the same numbers for a (3,) reference as before
    return {
        "log_loss": -np.log(np.clip(probs[rows, labels], LOG_EPS, 1.0)),
        "log_loss_reference": -np.log(np.clip(reference[rows, labels], LOG_EPS, 1.0)),
        "brier": np.sum((probs - onehot) ** 2, axis=1),
        "brier_reference": np.sum((reference - onehot) ** 2, axis=1),
    }


def _confusions(weights: np.ndarray, labels: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """(B, n) row weights -> (B, 3, 3) weighted confusion counts (rows true, columns predicted)."""
    cell = np.eye(9)[labels * 3 + predicted]  # (n, 9): one confusion cell per row
    return (weights @ cell).reshape(-1, 3, 3)


def _metrics_for_weights(probs, labels, actions, reference, weights: np.ndarray) -> dict[str, np.ndarray]:
    """Every SKILL_METRICS entry for each row of ``weights`` (B, n) over labelled rows: (B,) arrays.
    ``actions`` (n,) or None: the policy's codes (None: policy_balanced_accuracy is NaN)."""
    losses = _row_losses(probs, labels, reference)
    total = weights.sum(axis=1)
    out: dict[str, np.ndarray] = {}
    with np.errstate(divide="ignore", invalid="ignore"):
        for name, per_row in losses.items():
            out[name] = np.where(total > 0, weights @ per_row / total, np.nan)
    out["log_loss_skill"] = np.atleast_1d(skill_score(out["log_loss"], out["log_loss_reference"]))
    out["brier_skill"] = np.atleast_1d(skill_score(out["brier"], out["brier_reference"]))
    conf = _confusions(weights, labels, probs.argmax(axis=1))
    out["balanced_accuracy"] = _balanced_accuracy(conf)
    out["macro_f1"] = _macro_f1(conf)
    out["auc_buy"] = _weighted_auc(probs[:, BUY], labels == BUY, weights)
    out["auc_sell"] = _weighted_auc(probs[:, SELL], labels == SELL, weights)
    out["policy_balanced_accuracy"] = (
        np.full(weights.shape[0], np.nan)
        if actions is None
        else _balanced_accuracy(_confusions(weights, labels, actions))
    )
    return out


# ------------------------------------------------------------------------------------------ the table


def effective_block_days(block_days: int, n_days: int) -> int:
    """The block a resample of ``n_days`` days uses: ``block_days``, at most n_days // ``MIN_BLOCKS`` (at least 1), so
    that a short test period still resamples (science-6 L-D: 50-day blocks on a 31-day period held every day)."""
    return max(1, min(int(block_days), int(n_days) // MIN_BLOCKS))


def day_resample_counts(n_days: int, n_boot: int, block_days: int = 1, seed: int = 0) -> np.ndarray:
    """How often each day is drawn in each resample, (n_boot, n_days) int64; every row sums to n_days.

    A resample concatenates ceil(n_days / b) circular blocks of b consecutive days starting at
    ``default_rng(seed).integers(0, n_days, (n_boot, n_blocks))``, cut to n_days days, where b = ``block_days`` cut
    to n_days // ``MIN_BLOCKS`` (``effective_block_days``; b = 1: the plain i.i.d. bootstrap of days). The same draw
    as metrics.block_bootstrap_sharpe_ci where the block is that short.
    """
    if n_days < 1 or n_boot < 0:
        raise ValueError(f"need n_days >= 1 and n_boot >= 0, got {n_days} and {n_boot}")
    block = effective_block_days(block_days, n_days)
    n_blocks = -(-n_days // block)
    starts = np.random.default_rng(seed).integers(0, n_days, size=(int(n_boot), n_blocks))
    idx = (starts[:, :, None] + np.arange(block)).reshape(int(n_boot), n_blocks * block)[:, :n_days] % n_days
    flat = idx + n_days * np.arange(int(n_boot))[:, None]
    return np.bincount(flat.ravel(), minlength=int(n_boot) * n_days).reshape(int(n_boot), n_days)


def labelled_sample(probs, labels, days, actions=None):
    """Checked (probs (n, 3), labels (n,), days (n,), actions (n,) or None), rows with label -1 dropped.
    ValueError naming what is wrong (shapes, codes, non-finite probabilities)."""
    labels = check_labels(labels)
    probs = check_probabilities(probs, labels.size)
    days = np.asarray(days)
    if days.shape != labels.shape:
        raise ValueError(f"days has shape {days.shape} but labels has {labels.shape}")
    keep = labels >= 0
    if actions is not None:
        actions = np.asarray(actions).astype(np.int64)
        if actions.shape != labels.shape:
            raise ValueError(f"actions has shape {actions.shape} but labels has {labels.shape}")
        if ((actions[keep] < 0) | (actions[keep] > 2)).any():
            raise ValueError("actions must be 0 Buy, 1 Sell or 2 Hold")
        actions = actions[keep]
    return probs[keep], labels[keep], days[keep], actions


def reference_rates(train_base_rates, labels=None) -> np.ndarray:
    """The training base rates as float64: (3,), one reference for every row, or (n, 3), each row its own
    (its walk-forward fold's), given with the n ``labels`` and cut here to the rows ``labelled_sample`` keeps.
    ValueError unless finite non-negative shares of one of those shapes."""
    reference = np.asarray(train_base_rates, dtype=np.float64)
    n = None if labels is None else np.asarray(labels).shape[0]
    if reference.ndim == 2 and reference.shape == (n, 3) and np.isfinite(reference).all() and (reference >= 0).all():
        return reference[check_labels(labels) >= 0]
    if reference.shape != (3,) or not np.isfinite(reference).all() or (reference < 0).any():
        rows = "" if n is None else f" or ({n}, 3), one row per label"
        raise ValueError(f"train_base_rates must be 3 non-negative shares{rows}, got shape {reference.shape}")
    return reference


def point_and_draws(probs, labels, actions, reference, day_index, counts) -> tuple[dict, dict]:
    """The shared kernel: ({metric: point value}, {metric: (n_boot,) resample values}) of every
    SKILL_METRICS entry. Inputs are checked labelled rows (``labelled_sample``); day_index (n,) maps each
    row to a column of counts (n_boot, n_days), how often each day is drawn in each resample (a row's
    weight in a resample is its day's count). Resamples run in chunks of about _CHUNK_CELLS weights."""
    n_boot = counts.shape[0]
    if labels.size == 0:
        return {k: float("nan") for k in SKILL_METRICS}, {k: np.full(n_boot, np.nan) for k in SKILL_METRICS}
    point = _metrics_for_weights(probs, labels, actions, reference, np.ones((1, labels.size)))
    parts: dict[str, list[np.ndarray]] = {k: [] for k in SKILL_METRICS}
    chunk = max(1, _CHUNK_CELLS // labels.size)
    counts = counts.astype(np.float64)
    for lo in range(0, n_boot, chunk):
        boot = _metrics_for_weights(probs, labels, actions, reference, counts[lo : lo + chunk][:, day_index])
        for k in SKILL_METRICS:
            parts[k].append(boot[k])
    draws = {k: np.concatenate(parts[k]) if parts[k] else np.zeros(0) for k in SKILL_METRICS}
    return {k: float(point[k][0]) for k in SKILL_METRICS}, draws


def percentile_interval(values: np.ndarray, alpha: float) -> tuple[float, float]:
    """(alpha/2, 1 - alpha/2) quantiles of the finite values; (NaN, NaN) when there is none."""
    values = values[np.isfinite(values)]
    if not values.size:
        return float("nan"), float("nan")
    low, high = np.quantile(values, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


def skill_table(
    probs,
    labels,
    days,
    train_base_rates,
    *,
    actions=None,
    n_boot: int = 1000,
    block_days: int = DEFAULT_BLOCK_DAYS,
    seed: int = 0,
    alpha: float = 0.05,
) -> dict[str, float]:
    """Point estimates and percentile bootstrap intervals of every SKILL_METRICS entry: one flat row.

    probs: (n, 3) Buy/Sell/Hold probabilities (for log loss and Brier, calibrated ones: see the module
    docstring); labels: (n,) codes, -1 rows are dropped; days: (n,) any sortable day key (date, int),
    rows of one day are resampled together; train_base_rates: (3,) ``base_rates`` of the TRAINING labels,
    the reference predictor of both skill scores, or (n, 3) per row (each test day its fold's); actions:
    (n,) the policy's codes, or None (then policy_balanced_accuracy is NaN). The bootstrap resamples the
    distinct labelled days with ``day_resample_counts(n_days, n_boot, block_days, seed)`` (deterministic for
    a seed) and takes the (alpha/2, 1 - alpha/2) quantiles of the finite resample values; NaN intervals
    with n_boot = 0.
    Returns {metric: estimate, metric_ci_low: ..., metric_ci_high: ..., "n_rows": int, "n_days": int}.
    """
    reference = reference_rates(train_base_rates, labels)
    probs, labels, days, actions = labelled_sample(probs, labels, days, actions)
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    row = {"n_rows": int(labels.size), "n_days": 0}
    if labels.size == 0:
        return {**row, **{f"{k}{s}": float("nan") for k in SKILL_METRICS for s in ("", "_ci_low", "_ci_high")}}
    _, day_index = np.unique(days, return_inverse=True)
    day_index = day_index.reshape(-1)
    row["n_days"] = int(day_index.max()) + 1
    counts = day_resample_counts(row["n_days"], n_boot, block_days, seed)
    point, draws = point_and_draws(probs, labels, actions, reference, day_index, counts)
    for k in SKILL_METRICS:
        row[k] = point[k]
        row[f"{k}_ci_low"], row[f"{k}_ci_high"] = percentile_interval(draws[k], alpha)
    return row
