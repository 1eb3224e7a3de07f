"""The volatility task's figures (issue 53): forecast against realized for one ticker, QLIKE by forecaster with its
interval and model-confidence-set membership, and the volatility-targeting equity curves; each writes a PNG to
``path`` and returns its bytes, as ``figures`` does (object API, Agg canvas, fixed dpi). Empty inputs give a figure
that says "no data". Pure: frames in, PNG out; no dagster.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.figure import Figure

from kinematic_pipeline.backtest.volatility_evidence import BEATEN, ORACLE, SEED_SEPARATOR, trained_seeds
from kinematic_pipeline.backtest.volatility_metrics import common_rows
from kinematic_pipeline.backtest.volatility_targeting import BUY_AND_HOLD, target_volatility
from kinematic_pipeline.backtest.weights import run_weight_backtest, volatility_target_weights
from kinematic_pipeline.paper_conventions import PAPER, BacktestConfig
from kinematic_pipeline.report.figures import date_axis, no_data_figure, save_figure

EQUITY_SCHEMA = {"forecaster": pl.String, "date": pl.Date, "equity": pl.Float64}


def shown_forecasters(names: Sequence[str]) -> list[str]:
    """Of the forecasters ``names``: the planted universe's oracle and the references a learned forecaster must beat
    (HAR, GARCH) that are there, then each model variant's first seed ("<variant> seed <seed>"), by variant."""
    firsts = [f"{v}{SEED_SEPARATOR}{min(seeds)}" for v, seeds in sorted(trained_seeds(names).items())]
    return [n for n in (ORACLE, *BEATEN) if n in names] + firsts


def forecasts_png(
    scored: pl.DataFrame, ticker: str, forecasters: Sequence[str], path: Path, days: int | None = None
) -> bytes:
    """``ticker``'s realized log variance (``scored``'s log_rv: ``volatility_metrics.scored_frame``'s columns) and
    the log-variance forecast of each of ``forecasters`` against the day forecast from, on its last ``days``
    forecast days (None: every one)."""
    rows = scored.filter((pl.col("ticker") == ticker) & pl.col("forecaster").is_in(list(forecasters)))
    if days is not None and rows.height:
        last = rows["date"].unique().sort().tail(days)
        rows = rows.filter(pl.col("date").is_in(last.implode()))
    if rows.is_empty():
        return no_data_figure(f"Variance forecasts ({ticker})", path)
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    ax = fig.subplots()
    realized = rows.group_by("date").agg(pl.col("log_rv").first()).sort("date")
    ax.plot(realized["date"].to_numpy(), realized["log_rv"].to_numpy(), color="black", lw=1.4, label="realized")
    for i, name in enumerate(forecasters):
        one = rows.filter(pl.col("forecaster") == name).sort("date")
        if one.height:
            ax.plot(one["date"].to_numpy(), one["log_variance"].to_numpy(), color=f"C{i % 10}", lw=0.9, label=name)
    ax.set_title(f"{ticker}: ln RV of the next sessions and its forecasts", fontsize=10)
    ax.set_ylabel("log variance")
    ax.legend(fontsize=7, ncols=2)
    date_axis(ax)
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def qlike_png(table: pl.DataFrame, path: Path) -> bytes:
    """Each forecaster's QLIKE with its interval (``volatility_evidence.forecaster_table``'s forecaster, qlike,
    qlike_low, qlike_high, in_mcs, kind), best at the top; a filled marker is in the model confidence set."""
    if table.is_empty():
        return no_data_figure("QLIKE by forecaster", path)
    rows = table.sort("qlike", descending=True)
    fig = Figure(figsize=(8, 0.35 * rows.height + 1.4), layout="constrained")
    ax = fig.subplots()
    y = np.arange(rows.height)
    q, low, high = (rows[c].to_numpy().astype(np.float64) for c in ("qlike", "qlike_low", "qlike_high"))
    for i, (kind, in_mcs) in enumerate(zip(rows["kind"].to_list(), rows["in_mcs"].to_list())):
        color = {"model": "C0", ORACLE: "C3"}.get(kind, "C7")
        bar = [[q[i] - low[i]], [high[i] - q[i]]]
        ax.errorbar(q[i], y[i], xerr=bar, fmt="o", color=color, capsize=3, mfc=color if in_mcs else "white")
    ax.set_yticks(y, rows["forecaster"].to_list(), fontsize=8)
    ax.set_xlabel(
        "QLIKE (lower is better); filled: in the model confidence set\nblue: a model, grey: a reference, red: the oracle"
    )
    ax.grid(alpha=0.3, axis="x")
    return save_figure(fig, path)


def targeting_equity(
    scored: pl.DataFrame,
    bars: pl.DataFrame,
    ticker: str,
    forecasters: Sequence[str],
    h: int,
    train_end: dt.date,
    cost_bps: float,
    config: BacktestConfig = PAPER,
) -> pl.DataFrame:
    """``EQUITY_SCHEMA`` rows: ``ticker``'s equity under volatility targeting with each of ``forecasters``
    (``weights.volatility_target_weights``, sigma_target its training days' volatility:
    ``volatility_targeting.target_volatility``) and Buy & Hold, on the ticker-days every forecaster of ``scored``
    shares (as ``volatility_targeting.targeting_table`` trades them); empty when the ticker has fewer than two."""
    wide, _ = common_rows(scored)
    sigma = target_volatility(bars, train_end).get(ticker)
    days = wide.filter(pl.col("ticker") == ticker).join(bars.select("ticker", "date", "close"), on=["ticker", "date"])
    if sigma is None or days.height < 2:
        return pl.DataFrame(schema=EQUITY_SCHEMA)
    days, close = days.sort("date"), days.sort("date")["close"].to_numpy()
    frames = []
    for name in (*forecasters, BUY_AND_HOLD):
        w = np.ones(len(close)) if name == BUY_AND_HOLD else volatility_target_weights(days[name].to_numpy(), h, sigma)
        equity = run_weight_backtest(close, w, cost_bps, config).equity
        frames.append(pl.DataFrame({"forecaster": name, "date": days["date"], "equity": equity}, schema=EQUITY_SCHEMA))
    return pl.concat(frames)


def targeting_png(equity: pl.DataFrame, ticker: str, path: Path) -> bytes:
    """The equity curves of ``equity`` (``EQUITY_SCHEMA``: ``targeting_equity``), Buy & Hold in black."""
    if equity.is_empty():
        return no_data_figure(f"Volatility targeting ({ticker})", path)
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    ax = fig.subplots()
    names = equity["forecaster"].unique(maintain_order=True).to_list()
    for i, name in enumerate(names):
        one = equity.filter(pl.col("forecaster") == name)
        hold = name == BUY_AND_HOLD
        style = {"color": "black", "lw": 1.4} if hold else {"color": f"C{i % 10}", "lw": 0.9}
        ax.plot(one["date"].to_numpy(), one["equity"].to_numpy(), label=name, **style)
    ax.set_title(f"{ticker}: w = min(1, sigma_train / sigma_hat) with each forecast", fontsize=10)
    ax.set_ylabel("equity")
    ax.legend(fontsize=7, ncols=2)
    date_axis(ax)
    ax.grid(alpha=0.3)
    return save_figure(fig, path)
