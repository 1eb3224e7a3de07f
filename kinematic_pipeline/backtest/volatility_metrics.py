"""Scores of log-variance forecasts against the realized log variance (issue 53): losses, the daily rank IC, and the
paired tests that compare forecasters (``research/volatility.md``).

With y = ln RV_h(t) the target (``volatility_forecasts.realized``) and f = ln F the log of a forecast variance F:

- QLIKE(y, f) = exp(y - f) - (y - f) - 1 = RV / F - ln(RV / F) - 1 (Patton 2011): >= 0, 0 at F = RV; its mean is
  minimised by F = E[RV | information], and a noisy but unbiased RV proxy ranks forecasters as the true variance
  would. MSE on variance, (RV - F)^2, is Patton's other robust loss.
- R^2 of ln RV: 1 - sum (y - f)^2 / sum (y - ybar)^2, ybar the training rows' mean of y (out-of-sample R^2).
- The daily rank IC: per date, the Spearman correlation of f and y across tickers (days with >= 5 tickers;
  ``signal.daily_ic``), its mean and Newey-West t (``signal.newey_west_t``).
- Daily losses: per date, the mean loss across tickers, over the ticker-days every forecaster and the target cover
  (the same rows for all): a days x forecasters matrix, the series the paired tests compare.
- Diebold-Mariano: d_t = L_a,t - L_b,t per day, t = mean(d) / se, se^2 = (g_0 + 2 sum_{j=1..L} (1 - j / (L+1)) g_j)
  / T (Newey-West, Bartlett weights, 1/T autocovariances g_j; statsmodels HAC via ``signal.newey_west_t``), L >= 2h
  because consecutive days' h-session targets overlap; p = 2 (1 - Phi(|t|)). Negative t: a has the lower loss.
- The model confidence set (Hansen, Lunde and Nason 2011): arch's ``MCS`` via
  ``multiple_testing.model_confidence_set``, method "R" (the range statistic max_ij |mean(L_i - L_j)| / se_ij over
  every pair of forecasters still in the set, as the project's other MCS), a stationary bootstrap of the days (mean
  block ``BLOCK_DAYS``), seeded; in the set when the MCS p-value exceeds ``size``.
- ``block_interval``: the percentile interval of a daily series' mean from arch's ``StationaryBootstrap`` (Politis and
  Romano: blocks of random length, mean ``BLOCK_DAYS``; the bootstrap the MCS resamples with), seeded.

Pure: frames and arrays in, numbers and frames out; no dagster, no file I/O. Its tests are in
``kinematic_pipeline_tests/unit/test_volatility_forecasts.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import polars as pl
from scipy.stats import norm

from kinematic_pipeline.backtest.multiple_testing import model_confidence_set
from kinematic_pipeline.backtest.signal import daily_ic, newey_west_lags, newey_west_t

BLOCK_DAYS = 50  # mean block length of the bootstraps: longer than a month's volatility clustering
MIN_TICKERS = 5  # tickers a day needs for its rank IC
KEYS = ("ticker", "date")

__all__ = [
    "BLOCK_DAYS",
    "block_interval",
    "common_rows",
    "confidence_set",
    "daily_losses",
    "daily_rank_ic",
    "diebold_mariano",
    "forecast_table",
    "mse_variance",
    "qlike",
    "r2_log",
    "scored_frame",
]


def qlike(log_rv, log_forecast) -> np.ndarray:
    """exp(y - f) - (y - f) - 1 elementwise (Patton's QLIKE of RV = exp y against F = exp f)."""
    gap = np.asarray(log_rv, dtype=np.float64) - np.asarray(log_forecast, dtype=np.float64)
    return np.exp(gap) - gap - 1.0


def mse_variance(log_rv, log_forecast) -> np.ndarray:
    """(exp y - exp f)^2 elementwise: the squared error on variance."""
    return (np.exp(np.asarray(log_rv, dtype=np.float64)) - np.exp(np.asarray(log_forecast, dtype=np.float64))) ** 2


def r2_log(log_rv, log_forecast, train_mean: float) -> float:
    """1 - sum (y - f)^2 / sum (y - train_mean)^2 over the rows where both are finite; NaN when none."""
    y, f = np.asarray(log_rv, dtype=np.float64), np.asarray(log_forecast, dtype=np.float64)
    keep = np.isfinite(y) & np.isfinite(f)
    total = float(np.sum((y[keep] - train_mean) ** 2))
    return 1.0 - float(np.sum((y[keep] - f[keep]) ** 2)) / total if total > 0 else float("nan")


def scored_frame(targets: pl.DataFrame, forecasts: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
    """ticker, date, forecaster, log_variance, log_rv: each forecaster's frame (ticker, date, log_variance) joined to
    ``targets`` (ticker, date, log_rv) on (ticker, date); inner join, forecasters in the mapping's order."""
    parts = [
        frame.select(*KEYS, pl.lit(name, dtype=pl.String).alias("forecaster"), "log_variance").join(
            targets.select(*KEYS, "log_rv"), on=list(KEYS), how="inner"
        )
        for name, frame in forecasts.items()
    ]
    return pl.concat(parts, how="vertical") if parts else pl.DataFrame()


def common_rows(frame: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """(ticker, date, log_rv and one log-variance column per forecaster, on the ticker-days where the target and
    every forecaster are finite, sorted by date, ticker; the forecasters in their order of appearance). ``frame``:
    ``scored_frame``'s columns, one row per (ticker, date, forecaster)."""
    names = frame["forecaster"].unique(maintain_order=True).to_list()
    clash = sorted(set(names) & {*KEYS, "log_rv"})
    if clash:
        raise ValueError(f"a forecaster may not be named {clash}")
    if frame.select(pl.struct(*KEYS, "forecaster").is_duplicated().any()).item():
        raise ValueError("frame holds two rows of one (ticker, date, forecaster)")
    wide = frame.pivot(on="forecaster", index=list(KEYS), values="log_variance")
    target = frame.group_by(*KEYS).agg(pl.col("log_rv").first())
    finite = pl.all_horizontal(pl.col(c).is_finite() for c in ("log_rv", *names))
    joined = wide.join(target, on=list(KEYS), how="inner").select(*KEYS, "log_rv", *names)
    return joined.filter(finite).sort("date", "ticker"), names


def _daily_losses(wide: pl.DataFrame, names: list[str], loss: Callable) -> pl.DataFrame:
    y = wide["log_rv"].to_numpy()
    losses = wide.select("date").with_columns(
        pl.Series(n, loss(y, wide[n].to_numpy()), dtype=pl.Float64) for n in names
    )
    return losses.group_by("date").agg(pl.col(n).mean() for n in names).sort("date")


def daily_losses(frame: pl.DataFrame, loss: Callable = qlike) -> pl.DataFrame:
    """date and one column per forecaster: the day's mean of ``loss(log_rv, log_variance)`` across tickers, over
    ``common_rows`` (the same ticker-days for every forecaster). Sorted by date."""
    wide, names = common_rows(frame)
    return _daily_losses(wide, names, loss)


def daily_rank_ic(
    frame: pl.DataFrame, forecast_col: str = "log_variance", realized_col: str = "log_rv", lags: int | None = None
) -> tuple[pl.DataFrame, float, float]:
    """(date, n, rank_ic per day with >= 5 tickers, the mean of rank_ic, its Newey-West t with ``lags``; None:
    ``signal.newey_west_lags``). A day whose forecast or target is constant across tickers has no IC."""
    daily = daily_ic(frame, score=forecast_col, outcome=realized_col, day="date", min_names=MIN_TICKERS)
    values = daily["rank_ic"].to_numpy()
    if values.size == 0:
        return daily.select("date", "n", "rank_ic"), float("nan"), float("nan")
    t, _, _ = newey_west_t(values, lags)
    return daily.select("date", "n", "rank_ic"), float(values.mean()), float(t)


def diebold_mariano(loss_a, loss_b, lag: int) -> dict[str, float]:
    """{mean, se, t, p, lag, days} of d = loss_a - loss_b (two aligned finite daily series): mean(d), its Newey-West
    standard error at ``lag`` (>= 2h for h-session targets), t = mean / se and the two-sided normal p."""
    a, b = np.asarray(loss_a, dtype=np.float64).ravel(), np.asarray(loss_b, dtype=np.float64).ravel()
    if a.shape != b.shape or not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("two finite loss series of the same days are needed")
    d = a - b
    t, se, used = newey_west_t(d, lag)
    p = float(2.0 * norm.sf(abs(t))) if np.isfinite(t) else float("nan")
    return {"mean": float(d.mean()) if d.size else float("nan"), "se": se, "t": t, "p": p, "lag": used, "days": d.size}


def _loss_matrix(losses: pl.DataFrame) -> tuple[np.ndarray, list[str]]:
    names = [c for c in losses.columns if c != "date"]
    values = losses.select(names).to_numpy().astype(np.float64)
    if not np.isfinite(values).all():
        raise ValueError("losses must be finite (take them over common_rows)")
    return values, names


def confidence_set(
    losses: pl.DataFrame, size: float = 0.10, block: int = BLOCK_DAYS, reps: int = 1000, seed: int = 0
) -> pl.DataFrame:
    """forecaster, mcs_p, in_mcs: the model confidence set at level ``size`` of the forecasters whose daily losses
    are ``losses``' columns other than date (``daily_losses``): arch's MCS, method "R", stationary bootstrap of mean
    block ``block`` days, ``reps`` draws, seeded (the same seed, the same answer). Forecasters with the same daily
    losses (one forecast twice) enter once and share its p-value: a zero-variance difference is undefined in arch."""
    values, names = _loss_matrix(losses)
    first: dict[bytes, str] = {}
    twin = {n: first.setdefault(values[:, k].tobytes(), n) for k, n in enumerate(names)}
    kept = [k for k, n in enumerate(names) if twin[n] == n]
    # model_confidence_set scores returns as losses = -returns: the losses go in negated
    if len(kept) > 1:
        pvalues = model_confidence_set(
            -values[:, kept], [names[k] for k in kept], size=size, reps=reps, block=block, seed=seed
        )
    else:
        pvalues = {names[kept[0]]: 1.0}
    rows = [(n, pvalues[twin[n]], pvalues[twin[n]] > size) for n in names]
    return pl.DataFrame(rows, schema={"forecaster": pl.String, "mcs_p": pl.Float64, "in_mcs": pl.Boolean}, orient="row")


def block_interval(
    values, block: int = BLOCK_DAYS, reps: int = 1000, seed: int = 0, alpha: float = 0.05
) -> tuple[float, float, float]:
    """(mean, low, high): the mean of a finite daily series and the (alpha / 2, 1 - alpha / 2) percentiles of its
    means over ``reps`` stationary-bootstrap resamples (mean block ``block`` days), seeded."""
    from arch.bootstrap import StationaryBootstrap

    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0 or not np.isfinite(x).all():
        raise ValueError("a non-empty finite daily series is needed")
    bootstrap = StationaryBootstrap(block, x, seed=seed)
    draws = bootstrap.apply(np.mean, reps).ravel()
    low, high = np.quantile(draws, [alpha / 2, 1 - alpha / 2])
    return float(x.mean()), float(low), float(high)


TABLE_SCHEMA = {
    "forecaster": pl.String,
    "rows": pl.Int64,
    "days": pl.Int64,
    "qlike": pl.Float64,  # the mean over days of the day's mean QLIKE (each day weighs the same, as in DM and MCS)
    "qlike_low": pl.Float64,
    "qlike_high": pl.Float64,
    "mse_variance": pl.Float64,  # over rows
    "r2_log": pl.Float64,
    "rank_ic": pl.Float64,
    "rank_ic_t": pl.Float64,
    "dm_t": pl.Float64,  # QLIKE against the benchmark: negative = lower loss than it
    "dm_p": pl.Float64,
    "mcs_p": pl.Float64,
    "in_mcs": pl.Boolean,
}


def forecast_table(
    frame: pl.DataFrame,
    h: int,
    train_mean: float,
    benchmark: str = "har",
    *,
    size: float = 0.10,
    block: int = BLOCK_DAYS,
    reps: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> pl.DataFrame:
    """One row per forecaster (``TABLE_SCHEMA``), every number over ``common_rows(frame)`` (``scored_frame``'s
    columns; pass the test period's rows): rows, days, QLIKE with its ``block_interval`` (1 - alpha), MSE on
    variance, R^2 of ln RV against ``train_mean`` (the training rows' mean log_rv), the mean daily rank IC with its
    Newey-West t (lag max(2h, ``signal.newey_west_lags``)), the Diebold-Mariano t and p of its daily QLIKE against
    ``benchmark``'s (lag 2h; NaN on the benchmark's own row or without one), and its MCS p-value and membership at
    ``size`` on daily QLIKE."""
    wide, names = common_rows(frame)
    losses = _daily_losses(wide, names, qlike)
    if losses.height < 2 or len(names) < 2:
        raise ValueError(f"a table needs two forecasters and two common days, got {names} and {losses.height}")
    mcs = {row[0]: row[1:] for row in confidence_set(losses, size, block, reps, seed).iter_rows()}
    y = wide["log_rv"].to_numpy()
    ic_lags = max(2 * h, newey_west_lags(losses.height))
    rows = []
    for name in names:
        f = wide[name].to_numpy()
        mean, low, high = block_interval(losses[name].to_numpy(), block, reps, seed, alpha)
        _, ic, ic_t = daily_rank_ic(wide, name, "log_rv", ic_lags)
        dm = {"t": float("nan"), "p": float("nan")}
        if name != benchmark and benchmark in names:
            dm = diebold_mariano(losses[name].to_numpy(), losses[benchmark].to_numpy(), 2 * h)
        mse = float(np.mean(mse_variance(y, f)))
        r2 = r2_log(y, f, train_mean)
        rows.append(
            (name, wide.height, losses.height, mean, low, high, mse, r2, ic, ic_t, dm["t"], dm["p"], *mcs[name])
        )
    return pl.DataFrame(rows, schema=TABLE_SCHEMA, orient="row")
