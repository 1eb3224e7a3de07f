"""The two figures drawn from bars and tokens (the paper's kinematic manifold and responsiveness figures); each
writes a PNG to ``path`` and returns its bytes, as every figure of ``report.figures``.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from kinematic_pipeline.report.figures import date_axis, no_data_figure, save_figure, ticker_window
from kinematic_pipeline.report.tables import runs_at
from kinematic_pipeline.tokenizations import SPLINE
from kinematic_pipeline.variants import display_name

KINEMATIC_CHANNELS = tuple((c.name, f"{c.name} {c.title}") for c in SPLINE.channels)  # (column, title)


def _on_dates(dates: pl.DataFrame, frame: pl.DataFrame, columns: list[str]) -> pl.DataFrame:
    """``columns`` of ``frame`` aligned to ``dates`` (null where frame has no row or no such column)."""
    present = [c for c in columns if c in frame.columns]
    if frame.is_empty() or not present:
        return dates.with_columns(pl.lit(None, pl.Float64).alias(c) for c in columns)
    aligned = dates.join(frame.select("date", *present), on="date", how="left")
    return aligned.with_columns(pl.lit(None, pl.Float64).alias(c) for c in columns if c not in present)


def _values(frame: pl.DataFrame, column: str) -> np.ndarray:
    return frame[column].cast(pl.Float64).fill_null(float("nan")).to_numpy()


def _candles(ax_price, ax_volume, x: np.ndarray, bars: pl.DataFrame) -> None:
    o, h, low, c, vol = (_values(bars, k) for k in ("open", "high", "low", "close", "volume"))
    colors = np.where(c >= o, "tab:green", "tab:red")
    ax_price.vlines(x, low, h, colors=colors, lw=0.8)
    ax_price.bar(x, np.abs(c - o), 0.6, bottom=np.minimum(o, c), color=colors)
    ax_volume.bar(x, vol, 0.6, color=colors, alpha=0.7)


def kinematic_manifold_png(
    bars: pl.DataFrame,
    kinematics: pl.DataFrame,
    ticker: str,
    start: dt.date | None,
    end: dt.date | None,
    path: Path,
) -> bytes:
    """Paper fig full_state: OHLC candles and volume on top, then the nine channels c0..c3, v0..v4 as a
    3x3 grid over the same sessions (x = session index, so weekends leave no gaps)."""
    bars_w, kin_w = ticker_window(bars, ticker, start, end), ticker_window(kinematics, ticker, start, end)
    if bars_w.is_empty() and kin_w.is_empty():
        return no_data_figure(f"Kinematic manifold ({ticker})", path)
    dates = pl.concat([f.select(pl.col("date").cast(pl.Date)) for f in (bars_w, kin_w) if not f.is_empty()])
    dates = dates.unique().sort("date")
    aligned_bars = _on_dates(dates, bars_w, ["open", "high", "low", "close", "volume"])
    aligned_kin = _on_dates(dates, kin_w, [c for c, _ in KINEMATIC_CHANNELS])
    x = np.arange(dates.height)
    labels = [d.isoformat() for d in dates["date"].to_list()]

    fig = Figure(figsize=(12, 11), layout="constrained")
    grid = fig.add_gridspec(5, 3, height_ratios=[2.4, 0.9, 1, 1, 1])
    ax_price = fig.add_subplot(grid[0, :])
    ax_volume = fig.add_subplot(grid[1, :], sharex=ax_price)
    _candles(ax_price, ax_volume, x, aligned_bars)
    ax_price.set_title(f"{ticker}: daily OHLC and volume", fontsize=10)
    ax_price.set_ylabel("price")
    ax_price.tick_params(labelbottom=False)  # the volume panel below carries the dates
    ax_volume.set_ylabel("volume")
    axes = [ax_price, ax_volume]
    for i, (column, title) in enumerate(KINEMATIC_CHANNELS):
        ax = fig.add_subplot(grid[2 + i // 3, i % 3], sharex=ax_price)
        ax.plot(x, _values(aligned_kin, column), lw=0.9, color="tab:blue" if column[0] == "c" else "tab:orange")
        if column not in ("c0", "v0"):
            ax.axhline(0, color="gray", lw=0.5)
        ax.set_title(title, fontsize=8)
        ax.tick_params(labelsize=7)
        axes.append(ax)
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(5, integer=True))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: labels[int(v)] if 0 <= v < len(labels) else ""))
        ax.grid(alpha=0.3)
    fig.suptitle("The 9-dimensional kinematic manifold vs. ground truth", fontsize=11)
    return save_figure(fig, path)


def responsiveness_png(
    bars: pl.DataFrame,
    kinematics: pl.DataFrame,
    predictions: pl.DataFrame,
    ticker: str,
    variant: str,
    tau: float,
    start: dt.date | None,
    end: dt.date | None,
    path: Path,
) -> bytes:
    """Paper fig responsiveness: (A) close with Buy (green up) and Sell (red down) actions of ``variant``
    at ``tau`` (its lowest seed), (B) velocity c1, (C) acceleration c2, sharing the date axis."""
    bars_w, kin_w = ticker_window(bars, ticker, start, end), ticker_window(kinematics, ticker, start, end)
    preds = runs_at(predictions, tau=tau)
    preds = ticker_window(
        preds.filter(pl.col("variant") == variant) if not preds.is_empty() else preds, ticker, start, end
    )
    if bars_w.is_empty() and kin_w.is_empty() and preds.is_empty():
        return no_data_figure(f"Kinematic responsiveness ({ticker})", path)
    if not preds.is_empty() and preds["seed"].drop_nulls().len() > 0:
        preds = preds.filter(pl.col("seed") == preds["seed"].min())

    fig = Figure(figsize=(10, 8), layout="constrained")
    ax_a, ax_b, ax_c = fig.subplots(3, 1, sharex=True, height_ratios=[2, 1, 1])
    prices = bars_w if not bars_w.is_empty() else preds
    if not prices.is_empty():
        ax_a.plot(prices["date"].to_numpy(), _values(prices, "close"), color="black", lw=1.0, label="close")
    for action, marker, shade, name in ((0, "^", "tab:green", "Buy"), (1, "v", "tab:red", "Sell")):
        days = preds.filter(pl.col("action") == action) if not preds.is_empty() else preds
        if not days.is_empty():
            ax_a.scatter(
                days["date"].to_numpy(), _values(days, "close"), marker=marker, color=shade, s=40, label=name, zorder=3
            )
    ax_a.set_ylabel("close")
    ax_a.set_title(f"(A) {ticker} close and {display_name(variant)} actions (tau = {100 * tau:.2f}%)", fontsize=10)
    for ax, column, title in ((ax_b, "c1", "(B) velocity c1"), (ax_c, "c2", "(C) acceleration c2")):
        if not kin_w.is_empty() and column in kin_w.columns:
            ax.plot(kin_w["date"].to_numpy(), _values(kin_w, column), color="tab:blue", lw=1.0)
        ax.axhline(0, color="gray", lw=0.6)
        ax.set_title(title, fontsize=10)
    for ax in (ax_a, ax_b, ax_c):
        ax.grid(alpha=0.3)
    if ax_a.get_legend_handles_labels()[0]:
        ax_a.legend(fontsize=8)
    date_axis(ax_c)
    return save_figure(fig, path)
