"""Signal statistics a quant reads first (Qlib's signal table): information coefficients of a score.

- ``daily_ic``: per day, the cross-sectional Pearson (IC) and Spearman (rank IC, average ranks for ties)
  correlation of score vs outcome, vectorized with polars (``pl.corr`` of values and of ``rank("average")``
  over the day).
- ``newey_west_t``: the Newey-West (HAC, Bartlett kernel) t-statistic of a series' mean, with statsmodels
  (OLS on a constant, ``cov_type="HAC"``, no small-sample correction); ``newey_west_lags`` its default lag.
- ``ic_summary``: mean, std, ICIR, Newey-West t and share of positive days of a daily IC series.
- ``time_series_ic``: per ticker, the Pearson / Spearman correlation over time of score vs outcome (polars).
- ``direction_auc``: ROC AUC of a score separating Buy from Sell rows, with scikit-learn.

Only finite values (no null, NaN or inf) enter any statistic. No dagster and no file I/O here.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import statsmodels.api as sm
from sklearn.metrics import roc_auc_score

IC_DECIMALS = 12
_X = "__signal_x"
_Y = "__signal_y"


def _grouped_corr(frame: pl.DataFrame, score: str, outcome: str, key: str, min_rows: int) -> pl.DataFrame:
    """Per ``key`` group, n / Pearson / Spearman of score vs outcome over the finite rows; sorted by key.

    Groups with fewer than ``min_rows`` finite rows or a constant column are dropped."""
    x, y = pl.col(_X), pl.col(_Y)
    rx = x.rank("average").over(key)
    ry = y.rank("average").over(key)
    out = (
        frame.lazy()
        .select(
            pl.col(key),
            pl.col(score).cast(pl.Float64).alias(_X),
            pl.col(outcome).cast(pl.Float64).alias(_Y),
        )
        .filter(pl.col(key).is_not_null() & x.is_finite() & y.is_finite())
        .with_columns(rx.alias("__rx"), ry.alias("__ry"))
        .group_by(key)
        .agg(
            pl.len().cast(pl.Int64).alias("n"),
            pl.corr(x, y).cast(pl.Float64).alias("ic"),
            pl.corr(pl.col("__rx"), pl.col("__ry")).cast(pl.Float64).alias("rank_ic"),
            ((x.max() > x.min()) & (y.max() > y.min())).alias("__varies"),
        )
        .filter((pl.col("n") >= min_rows) & pl.col("__varies"))
        .drop("__varies")
        .sort(key)
        .collect()
    )
    # rounded to 12 decimals: polars' parallel sums may end in another last bit from run to run, so a day whose
    # correlation is exactly 0 came out +-1e-17 and flipped "Days IC > 0" between two runs on the same inputs
    return out.with_columns(pl.col("ic").round(IC_DECIMALS), pl.col("rank_ic").round(IC_DECIMALS))


def daily_ic(
    frame: pl.DataFrame, score: str = "score", outcome: str = "r_close", day: str = "date", min_names: int = 5
) -> pl.DataFrame:
    """Per day, cross-sectional Pearson ("ic") and Spearman ("rank_ic") correlation of score vs outcome.

    Only rows whose score and outcome are both finite count; days with fewer than ``min_names`` such rows,
    or a constant score or outcome, are dropped. Columns: ``day``, "n" (Int64), "ic", "rank_ic"; sorted
    by day."""
    return _grouped_corr(frame, score, outcome, day, min_names)


def partial_rank_ic(
    frame: pl.DataFrame,
    controls: tuple[str, ...],
    score: str = "score",
    outcome: str = "r_close",
    day: str = "date",
    min_names: int = 5,
) -> pl.DataFrame:
    """Per day, the partial Spearman correlation of score and outcome given ``controls`` (what the score ranks
    beyond them): the within-day ranks of the score and of the outcome, each regressed (OLS with an intercept) on
    the ranks of the controls, and the Pearson correlation of the two residuals. Rows with every column finite
    count; days with fewer than ``min_names`` such rows, or a residual without spread, are dropped. Columns:
    ``day``, "n", "rank_ic"."""
    keep = pl.all_horizontal(pl.col(c).is_finite() for c in (score, outcome, *controls))
    ranked = (
        frame.filter(keep)
        .with_columns(pl.col(c).rank().over(day).alias(c) for c in (score, outcome, *controls))
        .sort(day)
        .partition_by(day, maintain_order=True)
    )
    rows = []
    for group in ranked:
        if group.height < min_names:
            continue
        x = np.column_stack([np.ones(group.height), group.select(controls).to_numpy().astype(np.float64)])
        y = group.select(score, outcome).to_numpy().astype(np.float64)
        residual = y - x @ np.linalg.lstsq(x, y, rcond=None)[0]
        spread = residual.std(axis=0)
        if (spread <= 1e-9 * group.height).any():
            continue
        rho = float(np.corrcoef(residual[:, 0], residual[:, 1])[0, 1])
        rows.append({day: group[day][0], "n": group.height, "rank_ic": rho})
    schema = {day: frame.schema[day], "n": pl.Int64, "rank_ic": pl.Float64}
    return pl.DataFrame(rows, schema=schema)


def time_series_ic(
    frame: pl.DataFrame, score: str = "score", outcome: str = "r_close", by: str = "ticker", min_days: int = 20
) -> pl.DataFrame:
    """Per ``by`` group, Pearson ("ic") and Spearman ("rank_ic") correlation over time of score vs outcome.

    Finite rows only; groups with fewer than ``min_days`` rows or a constant column are dropped. Columns:
    ``by``, "n" (Int64), "ic", "rank_ic"; sorted by ``by``."""
    return _grouped_corr(frame, score, outcome, by, min_days)


def newey_west_lags(n: int) -> int:
    """The Newey-West (1994) rule of thumb for the Bartlett kernel's lag: floor(4 (T/100)^(2/9)) (6 at T = 1,007)."""
    return int(np.floor(4 * (max(n, 0) / 100) ** (2 / 9)))


def newey_west_t(x: np.ndarray, lags: int | None = None) -> tuple[float, float, int]:
    """Newey-West t-statistic of the mean of ``x`` (finite values only): (t, se_of_mean, lags_used).

    statsmodels OLS of x on a constant with ``cov_type="HAC"``, Bartlett kernel, ``use_correction=False``:
    se^2 = lrv / T with lrv = gamma_0 + 2 sum_{j=1..L} (1 - j/(L+1)) gamma_j and
    gamma_j = (1/T) sum_t (x_t - mean)(x_{t-j} - mean), i.e. 1/T autocovariances and no T/(T-1)
    small-sample factor. Default L = floor(4 (T/100)^(2/9)) (Newey-West 1994). T < 2 gives (nan, nan, L)."""
    v = np.asarray(x, dtype=np.float64).ravel()
    v = v[np.isfinite(v)]
    n = v.size
    if lags is None:
        lags = newey_west_lags(n)
    lags = int(lags)
    if lags < 0:
        raise ValueError(f"lags must be >= 0, got {lags}")
    if n < 2:
        return math.nan, math.nan, lags
    fit = sm.OLS(v, np.ones(n)).fit(cov_type="HAC", cov_kwds={"maxlags": lags, "use_correction": False})
    mean = float(np.asarray(fit.params)[0])
    se = float(np.asarray(fit.bse)[0])
    if se > 0:
        t = mean / se
    elif mean == 0:
        t = math.nan
    else:
        t = math.copysign(math.inf, mean)
    return t, se, lags


def ic_summary(daily: pl.DataFrame, column: str = "rank_ic", lags: int | None = None) -> dict[str, float]:
    """Summary of a daily IC series (the output of ``daily_ic``): mean, std (ddof=1), icir = mean/std (daily,
    not annualized), t_nw (Newey-West t of the mean), lags, share_positive (share of days > 0), days.

    Non-finite values are ignored; empty input gives NaNs and days 0."""
    v = daily.get_column(column).cast(pl.Float64).to_numpy() if daily.height else np.empty(0)
    v = v[np.isfinite(v)]
    n = v.size
    t, _, used = newey_west_t(v, lags)
    mean = float(v.mean()) if n else math.nan
    std = float(v.std(ddof=1)) if n >= 2 else math.nan
    icir = mean / std if std > 0 else math.nan
    return {
        "mean": mean,
        "std": std,
        "icir": icir,
        "t_nw": t,
        "lags": used,
        "share_positive": float((v > 0).mean()) if n else math.nan,
        "days": n,
    }


def direction_auc(score: np.ndarray, labels: np.ndarray, buy: int = 0, sell: int = 1) -> float:
    """ROC AUC of ``score`` separating Buy (label == buy, the positive class) from Sell (label == sell).

    Rows with any other label (Hold 2, unknown -1) or a non-finite score are ignored; NaN when either class
    is absent (sklearn ``roc_auc_score``)."""
    s = np.asarray(score, dtype=np.float64).ravel()
    y = np.asarray(labels).ravel()
    if s.shape != y.shape:
        raise ValueError(f"score and labels differ in length: {s.size} vs {y.size}")
    keep = np.isfinite(s) & ((y == buy) | (y == sell))
    s, positive = s[keep], y[keep] == buy
    if positive.all() or not positive.any():
        return math.nan
    return float(roc_auc_score(positive, s))
