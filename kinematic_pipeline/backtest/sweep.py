"""Cost sweep of stored predictions: one backtest per (variant, tau, seed, ticker, cost_bps), plus Buy & Hold.

Input: one row per (variant, tau, seed, ticker, date) with the close, the policy's probabilities and
action, and the day's label (``INPUT_SCHEMA``). Every series (a (variant, tau, seed, ticker) group, by
date) is backtested with ``run_backtest`` at every cost and summarized with the pure functions of
``metrics``; Buy & Hold rows (variant "buy_and_hold", tau and seed null) run over each ticker's dates.
Output frames are sorted by their key columns (nulls first), then date; see ``SweepResult``.

The stored probabilities p_* are the policy's forecast of the label distribution: a weighted-CE classifier's
softmax q (q_i ∝ w_i p_i) calibrated and de-weighted, p = (q/w)/Σ(q/w), when the predictions were made
(``tasks.buy_sell_hold.predictions_frame``, ``tasks.actions.stored_probabilities``); the Brier score and ECE columns score them as
they are. The network's own softmax q stays beside them (``SOFTMAX_COLUMNS``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass

import numpy as np
import polars as pl

from kinematic_pipeline.backtest import metrics as m
from kinematic_pipeline.backtest.engine import run_backtest
from kinematic_pipeline.paper_conventions import PAPER, BacktestConfig
from kinematic_pipeline.tasks.actions import (
    BUY,
    HOLD,
    PROB_COLUMNS,
    SELL,
)
from kinematic_pipeline.variants import BENCHMARK

EPOCH = dt.date(1970, 1, 1)  # day 0 of polars' Date
SERIES_KEYS = ("variant", "tau", "seed", "ticker")
INPUT_SCHEMA: dict[str, pl.DataType] = {
    "variant": pl.String,
    "tau": pl.Float64,
    "seed": pl.Int64,
    "ticker": pl.String,
    "date": pl.Date,
    "close": pl.Float64,
    **{c: pl.Float64 for c in PROB_COLUMNS},
    "action": pl.Int8,  # 0 Buy, 1 Sell, 2 Hold
    "label": pl.Int8,  # 0 Buy, 1 Sell, 2 Hold, -1 unknown
}
ROW_KEY_SCHEMA: dict[str, pl.DataType] = {
    "variant": pl.String,
    "tau": pl.Float64,  # null for Buy & Hold
    "seed": pl.Int64,  # null for Buy & Hold
    "ticker": pl.String,
    "cost_bps": pl.Float64,
}
METRICS_SCHEMA: dict[str, pl.DataType] = {
    **ROW_KEY_SCHEMA,
    "days": pl.Int64,
    "first_date": pl.Date,
    "last_date": pl.Date,
    "final_equity": pl.Float64,
    "total_return": pl.Float64,  # C_{T-1} / C_0 - 1, as metrics.total_return
    "sharpe": pl.Float64,  # NaN: N/A (flat curve)
    "sharpe_ci_low": pl.Float64,  # block bootstrap percentile interval; NaN with n_boot=0
    "sharpe_ci_high": pl.Float64,
    "sortino": pl.Float64,
    "max_drawdown": pl.Float64,
    "turnover_annual": pl.Float64,
    "n_trades": pl.Int64,  # fills and tax sales
    "n_invalid": pl.Int64,
    "taxes_paid": pl.Float64,
    "pending_realized_gain": pl.Float64,
    "n_buy": pl.Int64,
    "n_sell": pl.Int64,
    "n_hold": pl.Int64,
    "action_rate": pl.Float64,
    "liquidation_equilibrium": pl.Boolean,
    "exposure": pl.Float64,  # fraction of days long at the close
    "accuracy": pl.Float64,  # share of labelled days whose action is the label; NaN if none, null for Buy & Hold
    # Multi-class Brier score and top-label ECE (10 bins) on labelled days of the stored (de-weighted)
    # probabilities p; NaN / null as accuracy.
    "brier": pl.Float64,
    "ece": pl.Float64,
}
EQUITY_SCHEMA: dict[str, pl.DataType] = {
    **ROW_KEY_SCHEMA,
    "date": pl.Date,
    "equity": pl.Float64,
    "position": pl.Int8,
    "action": pl.Int8,
}
TRADES_SCHEMA: dict[str, pl.DataType] = {
    **ROW_KEY_SCHEMA,
    "date": pl.Date,
    "side": pl.Int8,  # 0 buy, 1 sell, 2 tax sale
    "price": pl.Float64,
    "shares": pl.Float64,
    "notional": pl.Float64,
    "cost": pl.Float64,
}


@dataclass(frozen=True)
class SweepResult:
    metrics: pl.DataFrame  # METRICS_SCHEMA, one row per (variant, tau, seed, ticker, cost_bps)
    equity: pl.DataFrame  # EQUITY_SCHEMA, one row per metrics row and day
    trades: pl.DataFrame  # TRADES_SCHEMA, one row per fill or tax sale


@dataclass(frozen=True)
class _Series:
    key: tuple  # (variant, tau, seed, ticker); tau and seed None for Buy & Hold
    days: np.ndarray  # (T,) int32 days since 1970-01-01, increasing
    close: np.ndarray  # (T,) float64
    actions: np.ndarray  # (T,) int8
    probs: np.ndarray | None  # (T, 3) float64; None for Buy & Hold
    labels: np.ndarray | None  # (T,) int8


def _where(df: pl.DataFrame, i: int) -> str:
    row = df.row(i, named=True)
    return f"variant={row['variant']!r} tau={row['tau']} seed={row['seed']} ticker={row['ticker']!r} date={row['date']}"


def _raise_first(df: pl.DataFrame, bad: pl.Series, what: str, column: str | None = None) -> None:
    """ValueError naming the first row where ``bad`` holds (and its value of ``column``)."""
    if bad.any():
        i = int(bad.arg_true()[0])
        value = f" has {column}={df[column][i]!r}" if column else ""
        raise ValueError(f"{what}: {_where(df, i)}{value}")


def _validate(predictions: pl.DataFrame) -> pl.DataFrame:
    """Typed, checked and sorted by (series keys, date); ValueError naming the row and column at fault."""
    missing = [c for c in INPUT_SCHEMA if c not in predictions.columns]
    if missing:
        raise ValueError(f"predictions lack column(s) {missing}; needed: {list(INPUT_SCHEMA)}")
    if predictions.height == 0:
        raise ValueError("predictions are empty")
    df = predictions.select(list(INPUT_SCHEMA))
    for col in INPUT_SCHEMA:
        _raise_first(df, df[col].is_null(), f"null {col}")
    wide = {"action": pl.Int64, "label": pl.Int64}  # check the codes before narrowing to int8
    for col, dtype in INPUT_SCHEMA.items():
        try:
            df = df.with_columns(pl.col(col).cast(wide.get(col, dtype), strict=True))
        except pl.exceptions.PolarsError as err:
            reason = str(err).splitlines()[0]
            raise ValueError(
                f"column {col!r} ({predictions.schema[col]}) cannot be read as {dtype}: {reason}"
            ) from None
    _raise_first(df, ~df["close"].is_finite() | (df["close"] <= 0), "close must be finite and > 0", "close")
    _raise_first(df, ~df["tau"].is_finite(), "tau must be finite", "tau")
    for col in PROB_COLUMNS:
        p = df[col]
        _raise_first(df, ~p.is_finite() | (p < 0) | (p > 1), "probabilities must be in [0, 1]", col)
    _raise_first(df, ~df["action"].is_in([BUY, SELL, HOLD]), "action must be 0 Buy, 1 Sell or 2 Hold", "action")
    _raise_first(df, ~df["label"].is_in([-1, BUY, SELL, HOLD]), "label must be -1, 0, 1 or 2", "label")
    _raise_first(df, df["variant"] == BENCHMARK, "variant name is reserved for the benchmark", "variant")
    _raise_first(df, df.select(*SERIES_KEYS, "date").is_duplicated(), "duplicate (series, date) row")
    df = df.with_columns(pl.col("action").cast(pl.Int8), pl.col("label").cast(pl.Int8))
    return df.sort(*SERIES_KEYS, "date")


def _split_series(df: pl.DataFrame) -> list[_Series]:
    """One _Series per (variant, tau, seed, ticker) of the sorted frame (views into whole-column arrays)."""
    groups = df.group_by(SERIES_KEYS, maintain_order=True).len()
    ends = np.cumsum(groups["len"].to_numpy())
    days = df["date"].to_physical().to_numpy()
    close = df["close"].to_numpy()
    actions = df["action"].to_numpy()
    labels = df["label"].to_numpy()
    probs = df.select(PROB_COLUMNS).to_numpy().astype(np.float64, copy=False)
    out = []
    for key, start, end in zip(groups.select(SERIES_KEYS).iter_rows(), ends - groups["len"].to_numpy(), ends):
        sl = slice(int(start), int(end))
        out.append(_Series(key, days[sl], close[sl], actions[sl], probs[sl], labels[sl]))
    return out


def _date(day: int) -> dt.date:
    return EPOCH + dt.timedelta(days=int(day))


def _first_differing_day(a: np.ndarray, b: np.ndarray) -> int:
    """The earliest day in one increasing day array but not in the other (a != b)."""
    n = min(a.size, b.size)
    diff = np.flatnonzero(a[:n] != b[:n])
    if diff.size:
        return int(min(a[diff[0]], b[diff[0]]))
    return int((a if a.size > n else b)[n])


def _benchmark_series(series: list[_Series]) -> list[_Series]:
    """Buy & Hold over each ticker's dates; every series of a ticker must have the same dates and closes."""
    first: dict[str, _Series] = {}
    for s in series:
        ticker = s.key[3]
        ref = first.setdefault(ticker, s)
        if not np.array_equal(s.days, ref.days):
            day = _date(_first_differing_day(ref.days, s.days))
            raise ValueError(
                f"ticker {ticker!r}: series {s.key} and {ref.key} cover different dates (first differing date "
                f"{day}); Buy & Hold needs one date range per ticker"
            )
        if not np.array_equal(s.close, ref.close):
            day = _date(s.days[np.flatnonzero(s.close != ref.close)[0]])
            raise ValueError(f"ticker {ticker!r}: series {s.key} and {ref.key} have a different close on {day}")
    out = []
    for ticker, ref in first.items():
        actions = np.full(ref.days.size, HOLD, dtype=np.int8)
        actions[0] = BUY
        out.append(_Series((BENCHMARK, None, None, ticker), ref.days, ref.close, actions, None, None))
    return out


def _series_sort_key(s: _Series) -> tuple:
    variant, tau, seed, ticker = s.key
    return (variant, tau is not None, tau or 0.0, seed is not None, seed or 0, ticker)  # nulls first, as polars


def _prediction_metrics(s: _Series) -> dict:
    """Cost-independent columns: action counts and, on labelled days, accuracy of the actions, and Brier
    and ECE of the probabilities."""
    counts = m.action_distribution(s.actions)
    out = {
        "n_buy": counts["Buy"],
        "n_sell": counts["Sell"],
        "n_hold": counts["Hold"],
        "action_rate": m.action_rate(s.actions),
    }
    if s.probs is None:
        return {**out, "accuracy": None, "brier": None, "ece": None}
    labelled = s.labels >= 0
    if not labelled.any():
        return {**out, "accuracy": float("nan"), "brier": float("nan"), "ece": float("nan")}
    return {
        **out,
        "accuracy": float(np.mean(s.actions[labelled] == s.labels[labelled])),
        "brier": m.brier_score(s.probs, s.labels),
        "ece": m.expected_calibration_error(s.probs, s.labels),
    }


def bootstrap_seed(boot_seed: int, key: tuple) -> int:
    """Stable per-series seed (blake2b of the key, not Python's salted hash()). The cost is left out on
    purpose: every cost of a series resamples the same blocks (common random numbers)."""
    text = "|".join([str(int(boot_seed)), *(repr(k) for k in key)])
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def _frame(row_keys: pl.DataFrame, counts: list[int], columns: dict, schema: dict) -> pl.DataFrame:
    """Each row of row_keys repeated counts[i] times, next to the concatenated numpy columns."""
    idx = np.repeat(np.arange(row_keys.height), counts)
    keys = row_keys.select(pl.all().gather(idx))
    cols = {name: pl.Series(name, np.concatenate(parts)) for name, parts in columns.items()}
    cols["date"] = cols["date"].cast(pl.Date)
    return keys.with_columns(**cols).select(list(schema)).cast(schema)


def run_sweep(predictions: pl.DataFrame, config: BacktestConfig = PAPER, *, benchmark: bool = True) -> SweepResult:
    """Backtest every (variant, tau, seed, ticker) series of ``predictions`` at every cost of ``config`` (in
    ascending order), with its account, tax, risk-free rate and Sharpe bootstrap (``bootstrap_resamples`` = 0
    skips it: CI columns NaN); see the module docstring. Brier and ECE score the stored probabilities p as they
    are. Raises ValueError on bad input."""
    costs = sorted(config.costs_bps)
    n_boot, block_days, rf_annual = config.bootstrap_resamples, config.bootstrap_block_days, config.rf_annual
    series = _split_series(_validate(predictions))
    if benchmark:
        series = series + _benchmark_series(series)
    series.sort(key=_series_sort_key)

    key_rows, metric_rows, eq_cols, eq_counts, tr_cols, tr_counts = [], [], {}, [], {}, []
    for s in series:
        per_series = _prediction_metrics(s)
        first_date, last_date = _date(s.days[0]), _date(s.days[-1])
        seed = bootstrap_seed(config.bootstrap_seed, s.key)
        for cost in costs:
            r = run_backtest(s.close, s.actions, cost, config)
            eq = r.equity
            ci = (
                m.block_bootstrap_sharpe_ci(eq, block_days, n_boot, seed, rf_annual=rf_annual)
                if n_boot
                else (np.nan, np.nan)
            )
            key_rows.append((*s.key, cost))
            span = {"days": eq.size, "first_date": first_date, "last_date": last_date}
            interval = {"sharpe_ci_low": ci[0], "sharpe_ci_high": ci[1]}
            metric_rows.append(span | m.summarize(r, rf_annual) | interval | per_series)
            eq_counts.append(eq.size)
            for name, part in (("date", s.days), ("equity", eq), ("position", r.position), ("action", s.actions)):
                eq_cols.setdefault(name, []).append(part)
            tr_counts.append(len(r.trades))
            tr_cols.setdefault("date", []).append(s.days[r.trades["day"]])
            for name in ("side", "price", "shares", "notional", "cost"):
                tr_cols.setdefault(name, []).append(r.trades[name])

    row_keys = pl.DataFrame(key_rows, schema=ROW_KEY_SCHEMA, orient="row")
    value_schema = {k: v for k, v in METRICS_SCHEMA.items() if k not in ROW_KEY_SCHEMA}
    metrics = pl.concat([row_keys, pl.DataFrame(metric_rows, schema=value_schema)], how="horizontal")
    return SweepResult(
        metrics=metrics,
        equity=_frame(row_keys, eq_counts, eq_cols, EQUITY_SCHEMA),
        trades=_frame(row_keys, tr_counts, tr_cols, TRADES_SCHEMA),
    )
