"""The reference forecasts of next-week volatility (issue 53): vol20, EWMA, GARCH(1,1) and HAR, each the natural log
of a forecast of the realized variance over a ticker's next h sessions, ``tasks.volatility``'s target:

    r_t = ln C_t - ln C_t',   RV_h(t) = sum_{i=1..h} r_t+i^2,   log_rv(t) = ln max(RV_h(t), VARIANCE_FLOOR)

with t' the ticker's bar before t (r is NaN on its first bar and next to a missing or non-positive close). Every
forecast is made at the close of day t from the ticker's bars <= t; a fitted parameter reads only bars dated
<= ``train_end``. A forecast variance below ``VARIANCE_FLOOR`` is floored as the target is. ``research/volatility.md``
has the protocol and its sources.

- vol20 (no fit): h vol20(t)^2, vol20 = ``volatility_reference.trailing_volatility`` (sample std of the last 20 r).
- EWMA, RiskMetrics (no fit): s2_t = lam s2_t-1 + (1 - lam) r_t^2 with lam = 0.94, started at a ticker's 20th return
  at the sample variance (ddof 1) of its first 20; forecast h s2_t (the variance of each of the next h days).
- GARCH(1,1), per ticker: e_t = 100 r_t (percent), sigma2_t+1 = omega + alpha e_t^2 + beta sigma2_t, fitted by arch's
  maximum likelihood (normal) on its returns dated <= train_end (at least ``GARCH_MIN_TRAIN``, else no forecast), then
  filtered with those parameters fixed over the whole series (``model.fix``); forecast sum_{k=1..h} E_t sigma2_t+k
  / 1e4, E_t sigma2_t+k = omega sum_{j<k-1} (alpha + beta)^j + (alpha + beta)^(k-1) sigma2_t+1 (arch's analytic
  forecast). Mean "Zero", not "Constant": the target sums raw squared returns, so E_t[r^2] is the quantity to
  forecast, which a zero-mean model's variance is; a constant mean mu would forecast the variance about mu and miss
  h mu^2 (small, but a bias the zero mean does not have) for one more parameter. No forecast on a ticker's first 75
  returns: arch starts the recursion at a backcast, a weighted mean of the first 75 squared returns, so those days'
  forecasts would read later bars. (arch's loose variance bounds, 1e-6 to 1e6 times an EWMA, read the whole series,
  but they bind only on degenerate data.)
- HAR (Corsi 2009), pooled OLS across tickers (statsmodels):
      log_rv(t) = b0 + b_d ln d_t + b_w ln w_t + b_m ln m_t + e_t,
  d_t the day's variance proxy floored at VARIANCE_FLOOR: Parkinson's (ln(H_t / L_t))^2 / (4 ln 2) ("range", the
  daily range of Clements & Preve) or r_t^2 ("close"); w_t and m_t the means of d over the ticker's last 5 and 22 bars
  (t included; NaN if one is missing). Fitted on the rows whose target is known by train_end, i.e. whose (t+h)-th bar
  is dated <= train_end (the purge: an earlier row whose target reads past train_end would put test returns into
  the fit). The forecast is ln of exp(x'b) mean_i exp(e_i) over the training residuals (Duan's smearing): the mean
  E[RV | x] that QLIKE and MSE on variance ask for, whatever the residuals' law; exp(x'b) alone is the median,
  biased low. (The log-normal exp(s^2 / 2) is not used: ln RV_1 = ln r^2 is a log chi-square, skewed to the left,
  and on the real file that correction overstated next-day variance by ~3x: QLIKE 3.14 against GARCH's 1.66.)

EWMA and GARCH run over a ticker's finite returns in date order (a NaN return is skipped, the state carried) and
forecast only on a day whose return is finite. Every forecaster returns ticker, date, log_variance (Float64, NaN where
it has no forecast), one row per bar, sorted by ticker, date. Pure: frames in, frames out; no dagster, no file I/O.
``kinematic_pipeline_tests/unit/test_volatility_forecasts.py`` holds the loop twins and arch / statsmodels checks.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np
import polars as pl
import statsmodels.api as sm
from arch import arch_model
from scipy.signal import lfilter

from kinematic_pipeline.backtest.volatility_reference import VOL_DAYS, trailing_volatility
from kinematic_pipeline.tasks.targets import VARIANCE_FLOOR, log_realized_variance

EWMA_LAMBDA = 0.94  # RiskMetrics (1996), daily
EWMA_START = 20  # returns behind the first EWMA forecast (its starting sample variance)
GARCH_MIN_TRAIN = 250  # training returns a ticker needs for its GARCH fit (about a year)
GARCH_SCALE = 100.0  # returns in percent: arch's optimizer expects variances of order 1
GARCH_BACKCAST = 75  # returns in arch's backcast (the recursion's start): no forecast before them
HAR_WEEK = 5  # bars in w_t
HAR_MONTH = 22  # bars in m_t
PROXIES = ("range", "close")  # HAR's daily variance proxy: Parkinson's range or the squared close-to-close return
HAR_FEATURES = ("log_d", "log_w", "log_m")
FORECAST_SCHEMA = {"ticker": pl.String, "date": pl.Date, "log_variance": pl.Float64}

__all__ = [
    "EWMA_LAMBDA",
    "GARCH_MIN_TRAIN",
    "HAR_FEATURES",
    "PROXIES",
    "HarFit",
    "ewma_forecast",
    "ewma_variance",
    "garch_forecast",
    "garch_parameters",
    "har_features",
    "har_fit",
    "har_forecast",
    "log_returns",
    "realized",
    "vol20_forecast",
]


def _check_horizon(h: int) -> int:
    if isinstance(h, bool) or not isinstance(h, int | np.integer) or h < 1:
        raise ValueError(f"a horizon is a whole number of sessions >= 1, got {h!r}")
    return int(h)


def _starts(tickers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first and one-past-last row of each ticker's run in rows sorted by ticker."""
    n = tickers.size
    starts = np.flatnonzero(np.r_[True, tickers[1:] != tickers[:-1]]) if n else np.zeros(0, dtype=np.int64)
    return starts, np.r_[starts[1:], n].astype(np.int64)


def _positions(tickers: np.ndarray) -> np.ndarray:
    """Each row's index within its ticker's run (rows sorted by ticker)."""
    starts, ends = _starts(tickers)
    return np.arange(tickers.size) - np.repeat(starts, ends - starts)


def _positive_log(values: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        ok = values > 0
    return np.where(ok, np.log(np.where(ok, values, 1.0)), np.nan)


def log_returns(bars: pl.DataFrame, columns: tuple[str, ...] = ()) -> pl.DataFrame:
    """ticker, date, ``columns`` (Float64), close, r: each bar's log return from the ticker's bar before it (NaN on
    its first bar, or where either close is missing or non-positive). Sorted by ticker, date; ValueError for a
    missing column or two bars of one (ticker, date)."""
    missing = [c for c in ("ticker", "date", "close", *columns) if c not in bars.columns]
    if missing:
        raise ValueError(f"bars lacks the columns {missing}")
    frame = bars.select(
        "ticker", "date", *[pl.col(c).cast(pl.Float64).fill_null(float("nan")) for c in (*columns, "close")]
    ).sort("ticker", "date")
    if frame.select(pl.struct("ticker", "date").is_duplicated().any()).item():
        raise ValueError("bars hold two bars of one (ticker, date)")
    log_close = _positive_log(frame["close"].to_numpy())
    r = np.r_[np.nan, np.diff(log_close)] if frame.height else np.zeros(0)
    r[_positions(frame["ticker"].to_numpy()) == 0] = np.nan
    return frame.with_columns(pl.Series("r", r, dtype=pl.Float64))


def _forecast_frame(frame: pl.DataFrame, log_variance: np.ndarray) -> pl.DataFrame:
    """ticker, date, log_variance floored at ln VARIANCE_FLOOR (NaN stays NaN)."""
    floored = np.maximum(np.asarray(log_variance, dtype=np.float64), np.log(VARIANCE_FLOOR))
    return frame.select("ticker", "date").with_columns(pl.Series("log_variance", floored, dtype=pl.Float64))


def _log_variance(frame: pl.DataFrame, variance: np.ndarray) -> pl.DataFrame:
    """ticker, date, log_variance = ln max(variance, VARIANCE_FLOOR) (NaN stays NaN)."""
    return _forecast_frame(frame, np.log(np.maximum(np.asarray(variance, dtype=np.float64), VARIANCE_FLOOR)))


def _realized_column(frame: pl.DataFrame, h: int) -> np.ndarray:
    forward = frame.select(
        pl.col("r").shift(-i).over("ticker").fill_null(float("nan")).alias(f"r{i}") for i in range(1, h + 1)
    ).to_numpy()
    return log_realized_variance(forward)


def realized(bars: pl.DataFrame, h: int) -> pl.DataFrame:
    """ticker, date, log_rv: ``log_realized_variance`` of the ticker's next h returns (NaN where one is unknown)."""
    frame = log_returns(bars)
    log_rv = _realized_column(frame, _check_horizon(h))
    return frame.select("ticker", "date").with_columns(pl.Series("log_rv", log_rv, dtype=pl.Float64))


def vol20_forecast(bars: pl.DataFrame, h: int) -> pl.DataFrame:
    """ticker, date, log_variance = ln(h vol20^2); NaN before 20 returns or where one of them is missing."""
    vol = trailing_volatility(bars.select("ticker", "date", "close"), VOL_DAYS)
    return _log_variance(vol, _check_horizon(h) * vol["vol"].to_numpy() ** 2)


def ewma_variance(returns: np.ndarray, lam: float = EWMA_LAMBDA, start: int = EWMA_START) -> np.ndarray:
    """s2_k for each of a series' finite returns (k = 0..n-1): NaN for k < start - 1, s2_start-1 = the sample
    variance (ddof 1) of returns 0..start-1, then s2_k = lam s2_k-1 + (1 - lam) r_k^2 (a first-order linear filter,
    ``scipy.signal.lfilter``)."""
    r = np.asarray(returns, dtype=np.float64)
    if not 0 < lam < 1 or start < 2:
        raise ValueError(f"lam must be in (0, 1) and start >= 2, got {lam}, {start}")
    out = np.full(r.size, np.nan)
    if r.size < start:
        return out
    first = float(np.var(r[:start], ddof=1))
    out[start - 1] = first
    if r.size > start:
        out[start:] = lfilter([1.0 - lam], [1.0, -lam], r[start:] ** 2, zi=[lam * first])[0]
    return out


def ewma_forecast(bars: pl.DataFrame, h: int, lam: float = EWMA_LAMBDA) -> pl.DataFrame:
    """ticker, date, log_variance = ln(h s2_t), ``ewma_variance`` over each ticker's finite returns (no fit)."""
    h = _check_horizon(h)
    frame = log_returns(bars)
    r = frame["r"].to_numpy()
    variance = np.full(frame.height, np.nan)
    for lo, hi in zip(*_starts(frame["ticker"].to_numpy())):
        rows = lo + np.flatnonzero(np.isfinite(r[lo:hi]))
        variance[rows] = h * ewma_variance(r[rows], lam)
    return _log_variance(frame, variance)


def _garch_model(returns_pct: np.ndarray):
    return arch_model(returns_pct, mean="Zero", vol="GARCH", p=1, q=1, dist="normal", rescale=False)


def _training_rows(frame: pl.DataFrame, train_end: dt.date):
    """Per ticker: (ticker, its finite-return rows, how many of them are dated <= train_end)."""
    r, dates = frame["r"].to_numpy(), frame["date"].to_numpy()
    tickers = frame["ticker"].to_numpy()
    end = np.datetime64(train_end, "D")
    for lo, hi in zip(*_starts(tickers)):
        rows = lo + np.flatnonzero(np.isfinite(r[lo:hi]))
        yield tickers[lo], rows, int(np.searchsorted(dates[rows], end, side="right"))


def _garch_fit(train_pct: np.ndarray):
    return _garch_model(train_pct).fit(disp="off", show_warning=False)


def garch_parameters(bars: pl.DataFrame, train_end: dt.date) -> pl.DataFrame:
    """ticker, train_returns, omega, alpha, beta (percent^2 units), converged: each ticker's GARCH(1,1) fitted on its
    finite returns dated <= ``train_end``; NaN parameters for a ticker with fewer than ``GARCH_MIN_TRAIN``."""
    frame = log_returns(bars)
    r = frame["r"].to_numpy()
    rows = []
    for ticker, finite, n_train in _training_rows(frame, train_end):
        params, converged = [np.nan] * 3, False
        if n_train >= GARCH_MIN_TRAIN:
            fit = _garch_fit(GARCH_SCALE * r[finite[:n_train]])
            params, converged = [float(p) for p in fit.params], fit.convergence_flag == 0
        rows.append((ticker, n_train, *params, converged))
    schema = {"ticker": pl.String, "train_returns": pl.Int64, "omega": pl.Float64, "alpha": pl.Float64}
    schema |= {"beta": pl.Float64, "converged": pl.Boolean}
    return pl.DataFrame(rows, schema=schema, orient="row")


def _garch_path(returns_pct: np.ndarray, params: np.ndarray, h: int, start: int) -> np.ndarray:
    """sum_{k=1..h} E_t sigma2_t+k / GARCH_SCALE^2 at each origin t = start..n-1 of a percent return series,
    ``params`` fixed (arch's filter and analytic forecast)."""
    fixed = _garch_model(returns_pct).fix(params)
    variance = fixed.forecast(horizon=h, start=start, reindex=False).variance.to_numpy()
    return variance.sum(axis=1) / GARCH_SCALE**2


def garch_forecast(bars: pl.DataFrame, h: int, train_end: dt.date) -> pl.DataFrame:
    """ticker, date, log_variance: the h-step GARCH(1,1) forecast of the summed variance, its parameters fitted on
    the ticker's returns dated <= ``train_end`` (one fit per ticker) and filtered over its whole series; NaN for a
    ticker with fewer than ``GARCH_MIN_TRAIN`` training returns, on its first ``GARCH_BACKCAST`` - 1 returns and on a
    day whose return is NaN."""
    h = _check_horizon(h)
    frame = log_returns(bars)
    r = frame["r"].to_numpy()
    variance = np.full(frame.height, np.nan)
    for _, finite, n_train in _training_rows(frame, train_end):
        if n_train < GARCH_MIN_TRAIN:
            continue
        params = np.asarray(_garch_fit(GARCH_SCALE * r[finite[:n_train]]).params)
        start = GARCH_BACKCAST - 1  # the origin whose own return is the backcast window's last
        variance[finite[start:]] = _garch_path(GARCH_SCALE * r[finite], params, h, start)
    return _log_variance(frame, variance)


def _trailing_mean(values: np.ndarray, positions: np.ndarray, days: int) -> np.ndarray:
    """The mean of each row's last ``days`` values within its ticker (itself included); NaN before ``days`` rows
    or when one of them is NaN."""
    padded = np.r_[np.full(days - 1, np.nan), values]
    mean = np.lib.stride_tricks.sliding_window_view(padded, days).mean(axis=1)
    mean[positions < days - 1] = np.nan
    return mean


def _proxy(frame: pl.DataFrame, proxy: str) -> np.ndarray:
    """d_t floored at VARIANCE_FLOOR (NaN where undefined): Parkinson's range or r_t^2."""
    if proxy == "range":
        high, low = frame["high"].to_numpy(), frame["low"].to_numpy()
        with np.errstate(invalid="ignore"):
            valid = (low > 0) & (high >= low)
        log_range = np.where(valid, _positive_log(high) - _positive_log(low), np.nan)
        d = log_range**2 / (4.0 * np.log(2.0))
    else:
        d = frame["r"].to_numpy() ** 2
    return np.maximum(d, VARIANCE_FLOOR)


def _with_har_features(frame: pl.DataFrame, proxy: str) -> pl.DataFrame:
    d = _proxy(frame, proxy)
    positions = _positions(frame["ticker"].to_numpy())
    columns = (d, _trailing_mean(d, positions, HAR_WEEK), _trailing_mean(d, positions, HAR_MONTH))
    return frame.with_columns(pl.Series(n, np.log(c), dtype=pl.Float64) for n, c in zip(HAR_FEATURES, columns))


def _har_frame(bars: pl.DataFrame, proxy: str) -> pl.DataFrame:
    if proxy not in PROXIES:
        raise ValueError(f"proxy must be one of {PROXIES}, got {proxy!r}")
    return _with_har_features(log_returns(bars, ("high", "low") if proxy == "range" else ()), proxy)


def har_features(bars: pl.DataFrame, proxy: str = "range") -> pl.DataFrame:
    """ticker, date, log_d, log_w, log_m: HAR's regressors at each bar (NaN where a window holds a missing proxy)."""
    return _har_frame(bars, proxy).select("ticker", "date", *HAR_FEATURES)


@dataclass(frozen=True)
class HarFit:
    """A pooled HAR regression: its coefficients (constant, ln d, ln w, ln m), residual variance s^2 = SSR / (n - 4),
    training rows and the last date a training row's target reads (<= train_end)."""

    params: np.ndarray
    residual_variance: float
    rows: int
    last_target_date: dt.date
    smearing: float  # ln mean exp(e) over the training residuals: what turns E[ln RV] into ln E[RV]


def _har_design(frame: pl.DataFrame) -> np.ndarray:
    features = frame.select(HAR_FEATURES).to_numpy()
    return np.column_stack([np.ones(frame.height), features])


def _fit_har(frame: pl.DataFrame, h: int, train_end: dt.date) -> HarFit:
    target_end = pl.col("date").shift(-h).over("ticker")
    finite = pl.all_horizontal(pl.col(c).is_finite() for c in ("log_rv", *HAR_FEATURES))
    train = (
        frame.with_columns(pl.Series("log_rv", _realized_column(frame, h)), target_end.alias("target_end"))
        .filter(finite & (pl.col("target_end") <= train_end))
        .select("target_end", "log_rv", *HAR_FEATURES)
    )
    if train.height <= len(HAR_FEATURES) + 1:
        raise ValueError(f"HAR has {train.height} training rows whose target is known by {train_end}: too few")
    fit = sm.OLS(train["log_rv"].to_numpy(), _har_design(train)).fit()
    smearing = float(np.log(np.mean(np.exp(fit.resid))))  # Duan (1983): ln of the residuals' mean exp
    return HarFit(np.asarray(fit.params), float(fit.scale), train.height, train["target_end"].max(), smearing)


def har_fit(bars: pl.DataFrame, h: int, train_end: dt.date, proxy: str = "range") -> HarFit:
    """The pooled HAR regression of log_rv (next h sessions) on ``har_features``, on the rows whose (t+h)-th bar is
    dated <= ``train_end`` and whose target and features are finite (statsmodels OLS)."""
    return _fit_har(_har_frame(bars, proxy), _check_horizon(h), train_end)


def har_forecast(bars: pl.DataFrame, h: int, train_end: dt.date, proxy: str = "range") -> pl.DataFrame:
    """ticker, date, log_variance = x'b + ln mean exp(e) (``har_fit``; Duan's smearing: the mean, not the median);
    NaN where a feature is."""
    h = _check_horizon(h)
    frame = _har_frame(bars, proxy)
    fit = _fit_har(frame, h, train_end)
    log_variance = _har_design(frame) @ fit.params + fit.smearing
    return _forecast_frame(frame, log_variance)
