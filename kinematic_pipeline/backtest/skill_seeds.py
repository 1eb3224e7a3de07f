"""Skill of the mean over seeds, with a day-bootstrap interval of that mean: pure functions of arrays.

The seeds of one (variant, tau) are scored on the same test days, so their metrics are not independent
draws: averaging each seed's interval ends gives no interval of anything. Here the day resample is drawn
ONCE for the union of the seeds' labelled test days (``skill.day_resample_counts``); every seed's metrics
are computed under those same draws (``skill.point_and_draws``: a row weighs its day's count), averaged
over seeds per resample, and the percentile interval is taken of that seed mean. With one seed it is
``skill.skill_table`` of that seed under the same draws.

``seed_mean_skill_difference``: the same for the log-loss skill of the models beyond a reference forecaster's (the
trailing-volatility reference, ``volatility_reference``) on the same rows. No dagster and no file I/O here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kinematic_pipeline.backtest.skill import (
    DEFAULT_BLOCK_DAYS,
    LOG_EPS,
    SKILL_METRICS,
    day_resample_counts,
    labelled_sample,
    percentile_interval,
    point_and_draws,
    reference_rates,
)

SUFFIXES = ("", "_ci_low", "_ci_high", "_seed_std")  # the columns of seed_mean_skill, per SKILL_METRICS entry

DIFFERENCE_KEYS = ("difference", "ci_low", "ci_high", "seed_std", "n_seeds", "n_rows", "n_days")

__all__ = ["DIFFERENCE_KEYS", "SUFFIXES", "seed_mean_skill", "seed_mean_skill_difference"]


def _nan_row(n_seeds: int, n_rows: int) -> dict[str, float]:
    return {"n_seeds": n_seeds, "n_rows": n_rows, "n_days": 0} | {
        f"{k}{s}": float("nan") for k in SKILL_METRICS for s in SUFFIXES
    }


def seed_mean_skill(
    probs: Sequence,
    labels: Sequence,
    days: Sequence,
    train_base_rates,
    *,
    actions: Sequence | None = None,
    n_boot: int = 1000,
    block_days: int = DEFAULT_BLOCK_DAYS,
    seed: int = 0,
    alpha: float = 0.05,
) -> dict[str, float]:
    """Mean over seeds of every SKILL_METRICS entry, with the percentile interval of that mean.

    probs, labels, days (and actions, or None): one array per seed, as ``skill.skill_table`` takes them
    (probs (n_s, 3), labels (n_s,) with -1 dropped, days (n_s,) sortable keys comparable across seeds,
    actions (n_s,) the policy's codes); train_base_rates: (3,) shared by every row, or a list with one
    reference per seed, (3,) or (n_s, 3) (each row its own: its walk-forward fold's training base rates).
    The resample counts are ``day_resample_counts(n_days, n_boot, block_days, seed)`` over the sorted union
    of the seeds' labelled days; a seed without some day simply has no rows there. Per resample the seeds'
    values are averaged (a NaN in one seed makes that resample's mean NaN; intervals use the finite means).
    Returns {metric: mean over seeds, metric_ci_low, metric_ci_high, metric_seed_std (sample std over seeds,
    ddof 1; NaN with one seed), "n_seeds", "n_rows" (labelled rows, all seeds), "n_days" (the union)}.
    """
    if not len(probs) == len(labels) == len(days) or (actions is not None and len(actions) != len(labels)):
        raise ValueError("probs, labels, days (and actions) need one entry per seed")
    if len(labels) == 0:
        raise ValueError("seed_mean_skill needs at least one seed")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    per_seed = isinstance(train_base_rates, list | tuple) and len(train_base_rates) > 0
    per_seed = per_seed and np.ndim(train_base_rates[0]) > 0  # a list of arrays, not the 3 shares themselves
    if per_seed and len(train_base_rates) != len(labels):
        raise ValueError(f"{len(train_base_rates)} per-seed references for {len(labels)} seeds")
    given = train_base_rates if per_seed else [train_base_rates] * len(labels)
    references = [reference_rates(r, y) for r, y in zip(given, labels)]
    per_action = actions if actions is not None else [None] * len(labels)
    seeds = [labelled_sample(*one) for one in zip(probs, labels, days, per_action)]
    n_rows = sum(int(s[1].size) for s in seeds)
    if n_rows == 0:
        return _nan_row(len(seeds), 0)
    union, day_index = np.unique(np.concatenate([s[2] for s in seeds]), return_inverse=True)
    counts = day_resample_counts(union.size, n_boot, block_days, seed)
    splits = np.split(day_index.reshape(-1), np.cumsum([s[1].size for s in seeds])[:-1])
    scored = [
        point_and_draws(p, y, a, reference, idx, counts)
        for (p, y, _, a), reference, idx in zip(seeds, references, splits)
    ]
    row = {"n_seeds": len(seeds), "n_rows": n_rows, "n_days": int(union.size)}
    for k in SKILL_METRICS:
        points = np.array([point[k] for point, _ in scored])  # (n_seeds,)
        draws = np.mean([draw[k] for _, draw in scored], axis=0)  # (n_boot,): the seed mean per resample
        row[k] = float(np.mean(points))
        row[f"{k}_ci_low"], row[f"{k}_ci_high"] = percentile_interval(draws, alpha)
        row[f"{k}_seed_std"] = float(np.std(points, ddof=1)) if points.size > 1 else float("nan")
    return row


def seed_mean_skill_difference(
    probs: Sequence,
    reference_probs: Sequence,
    labels: Sequence,
    days: Sequence,
    train_base_rates,
    *,
    n_boot: int = 1000,
    block_days: int = DEFAULT_BLOCK_DAYS,
    seed: int = 0,
    alpha: float = 0.05,
) -> dict[str, float]:
    """Mean over seeds of (log-loss skill of ``probs``) - (log-loss skill of ``reference_probs``), paired: row i of
    both is one ticker-day, scored on the same label against the same training base rates; with the percentile
    interval of that mean under one block resample of days shared by the seeds.

    One entry per seed as ``seed_mean_skill`` takes them: probs and reference_probs (n_s, 3) calibrated,
    unweighted probabilities, labels (n_s,) (-1 rows dropped from both), days (n_s,), train_base_rates (3,) for
    every row or a list with one (3,) or (n_s, 3) per seed. With L_m, L_f, L_b a sample's mean log loss of the
    model, the reference forecaster and the base rates, the difference is (1 - L_m / L_b) - (1 - L_f / L_b) =
    (L_f - L_m) / L_b: positive when the model knows more than the reference. A resample weighs each row by its
    day's count in ``day_resample_counts(n_days, n_boot, block_days, seed)`` over the union of the seeds' days (the
    draws of ``seed_mean_skill`` with the same arguments); a resample without a seed's rows is NaN there and
    dropped from the interval. Returns {"difference": the seed mean, "ci_low", "ci_high", "seed_std" (ddof 1; NaN
    with one seed), "n_seeds", "n_rows" (labelled rows, all seeds), "n_days" (the union)}.
    """
    if not len(probs) == len(reference_probs) == len(labels) == len(days):
        raise ValueError("probs, reference_probs, labels and days need one entry per seed")
    if len(labels) == 0:
        raise ValueError("seed_mean_skill_difference needs at least one seed")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    per_seed = isinstance(train_base_rates, list | tuple) and len(train_base_rates) > 0
    per_seed = per_seed and np.ndim(train_base_rates[0]) > 0
    if per_seed and len(train_base_rates) != len(labels):
        raise ValueError(f"{len(train_base_rates)} per-seed references for {len(labels)} seeds")
    given = train_base_rates if per_seed else [train_base_rates] * len(labels)
    seeds = []
    for p, f, y, d, r in zip(probs, reference_probs, labels, days, given):
        base = reference_rates(r, y)
        f, _, _, _ = labelled_sample(f, y, d)  # the same rows dropped from both
        p, kept, d, _ = labelled_sample(p, y, d)
        seeds.append((p, f, kept, d, base))
    n_rows = sum(int(s[2].size) for s in seeds)
    row = {"n_seeds": len(seeds), "n_rows": n_rows, "n_days": 0}
    nan = {k: float("nan") for k in ("difference", "ci_low", "ci_high", "seed_std")}
    if n_rows == 0:
        return nan | row
    union, day_index = np.unique(np.concatenate([s[3] for s in seeds]), return_inverse=True)
    row["n_days"] = int(union.size)
    counts = day_resample_counts(union.size, n_boot, block_days, seed).astype(np.float64)
    splits = np.split(day_index.reshape(-1), np.cumsum([s[2].size for s in seeds])[:-1])
    points, draws = [], []
    for (p, f, y, _, base), idx in zip(seeds, splits):
        rows = np.arange(y.size)
        base = np.broadcast_to(base, p.shape)
        # per day: the sums of the rows' log losses (a resample weighs a day's rows by its count)
        per_day = [
            np.bincount(idx, weights=-np.log(np.clip(x[rows, y], LOG_EPS, 1.0)), minlength=union.size)
            for x in (p, f, base)
        ]
        gain, scale = per_day[1] - per_day[0], per_day[2]

        def difference(weights: np.ndarray, gain=gain, scale=scale) -> np.ndarray:
            num, den = weights @ gain, weights @ scale
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.where(den > 0, num / den, np.nan)

        points.append(float(difference(np.ones((1, union.size)))[0]))
        draws.append(difference(counts))
    means = np.mean(draws, axis=0)
    values = np.array(points)
    low, high = percentile_interval(means, alpha)
    return row | {
        "difference": float(values.mean()),
        "ci_low": low,
        "ci_high": high,
        "seed_std": float(np.std(values, ddof=1)) if values.size > 1 else float("nan"),
    }
