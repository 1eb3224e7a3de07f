"""The trailing-volatility reference forecaster (issue 38, item 3; science-5 M4): what Buy/Sell/Hold probabilities
earn that know nothing but each ticker's recent volatility.

For a ticker's bar on day t: r_s = ln C_s - ln C_s' for each of its bars s and the bar s' before it (the ticker's
consecutive raw bars, as the raw tokens' return channel holds them), and vol20(t) = the sample standard deviation
(ddof 1, as ``tokenizations.raw.raw_extras``' vol20) of its last ``VOL_DAYS`` = 20 returns r_t-19 .. r_t: every one is
known at the close of day t, the decision time, and no bar after t enters. Under a zero-mean normal next-day return
r ~ N(0, vol20^2), at the threshold tau of the labels (``tasks.buy_sell_hold``: Buy r > tau, Sell r < -tau, else Hold):

    p_buy = P(r > tau) = 1 - Phi(tau / vol20),  p_sell = P(r < -tau) = Phi(-tau / vol20),  p_hold = 1 - p_buy - p_sell

(vol20 = 0: p_hold = 1). Nothing is fitted. A day with fewer than 20 returns behind it (a ticker's first 20 bars, or
a window holding a non-finite return: a missing or non-positive close) gets no row. Under the symmetric normal
p_buy = p_sell exactly, so the signal score p_buy - p_sell is 0 on every row: it ranks nothing, its rank IC is
undefined, and its argmax is Hold, or Buy where vol20 is large enough that p_buy = p_sell > p_hold (numpy's argmax
breaks the tie toward the first class).

How it is stored. A model's predictions frame holds its softmax q (q ∝ w p, float32) and p, that q de-weighted with
its class weights (``buy_sell_hold.predictions_frame``). The reference has no class weights: its softmax columns hold p
itself (float32) and its p columns that p de-weighted with ``REFERENCE_CLASS_WEIGHTS`` = (1, 1, 1), i.e. p / sum(p)
= p renormalized after the float32 rounding. (Storing w p instead and de-weighting it with the models' weights would
round p_buy and p_sell apart in float32: a score of rounding noise, ranked as if it were a signal.)

Pure: frames and arrays in, frames out; no dagster, no file I/O (``stages.evidence.volatility_reference`` reads the
bars). ``kinematic_pipeline_tests/unit/test_volatility_reference.py`` holds the loop twin.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from scipy.special import ndtr

from kinematic_pipeline.tasks.buy_sell_hold import predictions_frame

REFERENCE = "trailing_vol20"  # its variant name in the predictions-shaped frames and the tables
REFERENCE_DISPLAY_NAME = "Trailing vol20 (no fit)"
REFERENCE_SEED = 0  # one forecaster, one "seed"
REFERENCE_CLASS_WEIGHTS = (1.0, 1.0, 1.0)  # its softmax is p itself: de-weighting with these renormalizes it
REFERENCE_DATA_SEEN = "nothing fitted: each ticker's last 20 daily log returns up to day t (N(0, vol20^2) at tau)"
VOL_DAYS = 20  # returns per window

__all__ = [
    "REFERENCE",
    "REFERENCE_CLASS_WEIGHTS",
    "REFERENCE_DATA_SEEN",
    "REFERENCE_DISPLAY_NAME",
    "REFERENCE_SEED",
    "VOL_DAYS",
    "normal_class_probabilities",
    "reference_predictions",
    "trailing_volatility",
]


def trailing_volatility(bars: pl.DataFrame, days: int = VOL_DAYS) -> pl.DataFrame:
    """ticker, date, close, vol (Float64): per bar, the sample std (ddof 1) of the ticker's last ``days`` log
    returns ending at that bar (its own return included); NaN where fewer than ``days`` finite returns are behind
    it. ``bars``: ticker, date, close, at most one bar per (ticker, date). Sorted by ticker, date."""
    if days < 2:
        raise ValueError(f"days must be >= 2 (a sample std), got {days}")
    missing = [c for c in ("ticker", "date", "close") if c not in bars.columns]
    if missing:
        raise ValueError(f"bars lacks the columns {missing}")
    frame = bars.select("ticker", "date", pl.col("close").cast(pl.Float64)).sort("ticker", "date")
    if frame.select(pl.struct("ticker", "date").is_duplicated().any()).item():
        raise ValueError("bars hold two bars of one (ticker, date)")
    close = frame["close"].fill_null(float("nan")).to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        log_close = np.where(close > 0, np.log(np.where(close > 0, close, 1.0)), np.nan)
    vol = np.full(frame.height, np.nan)
    tickers = frame["ticker"].to_numpy()
    starts = np.flatnonzero(np.r_[True, tickers[1:] != tickers[:-1]]) if frame.height else np.zeros(0, dtype=int)
    ends = np.r_[starts[1:], frame.height]
    for lo, hi in zip(starts, ends):
        returns = np.diff(log_close[lo:hi])  # returns[k] is the bar lo + k + 1's return
        if returns.size < days:
            continue
        windows = np.lib.stride_tricks.sliding_window_view(returns, days)  # window j ends at return j + days - 1
        std = windows.std(axis=1, ddof=1)
        std[~np.isfinite(windows).all(axis=1)] = np.nan
        vol[lo + days : hi] = std  # ... which is bar lo + j + days's return
    return frame.with_columns(pl.Series("vol", vol, dtype=pl.Float64))


def normal_class_probabilities(vol, tau: float) -> np.ndarray:
    """(n, 3) float64 Buy, Sell, Hold probabilities of r ~ N(0, vol^2) at ``tau``: P(r > tau), P(r < -tau) and the
    rest (vol = 0: Hold for certain). ValueError for a negative or non-finite vol or tau."""
    vol = np.asarray(vol, dtype=np.float64)
    tau = float(tau)
    if not (np.isfinite(tau) and tau >= 0):
        raise ValueError(f"tau must be finite and >= 0, got {tau!r}")
    if vol.ndim != 1 or not np.isfinite(vol).all() or (vol < 0).any():
        raise ValueError("vol must be a 1-D array of finite values >= 0")
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(vol > 0, tau / np.where(vol > 0, vol, 1.0), np.inf)  # vol 0: r = 0, never beyond tau
    tail = ndtr(-z)  # one number for both tails: p_buy == p_sell exactly
    return np.stack([tail, tail, 1.0 - 2.0 * tail], axis=1)


def reference_predictions(bars: pl.DataFrame, rows: pl.DataFrame, tau: float) -> pl.DataFrame:
    """The reference's predictions-frame rows (``buy_sell_hold.PREDICTIONS_SCHEMA``): variant ``REFERENCE``, ``tau``, seed
    ``REFERENCE_SEED``, ticker, date, the day's close, p_buy/p_sell/p_hold (the unweighted p, renormalized with
    ``REFERENCE_CLASS_WEIGHTS``), action = argmax of p, label (``rows``' label column; -1 when null), and the softmax
    columns (p: the reference has no other), as ``buy_sell_hold.predictions_frame`` makes them. ``rows``: the ticker-days to
    forecast (ticker, date, label; one per ticker-day); ``bars``: ticker, date, close with each ticker's bars
    before the first of them (``VOL_DAYS`` returns). A ticker-day without vol20 gets no row. Sorted by ticker, date."""
    missing = [c for c in ("ticker", "date", "label") if c not in rows.columns]
    if missing:
        raise ValueError(f"rows lacks the columns {missing}")
    if rows.select(pl.struct("ticker", "date").is_duplicated().any()).item():
        raise ValueError("rows hold a (ticker, date) twice: forecast each ticker-day once")
    vol = trailing_volatility(bars).filter(pl.col("vol").is_not_nan())
    joined = rows.select("ticker", "date", "label").join(vol, on=["ticker", "date"], how="inner").sort("ticker", "date")
    p = normal_class_probabilities(joined["vol"].to_numpy(), tau)
    return predictions_frame(joined, (REFERENCE, float(tau), REFERENCE_SEED), p, "label", REFERENCE_CLASS_WEIGHTS)
