"""The paper's figures rebuilt from our frames; each writes a PNG to ``path`` and returns its bytes.

Matplotlib's object API only (no pyplot state, Agg canvas), a fixed dpi and no "Software" PNG
metadata, so the same input gives the same bytes. Empty inputs give a figure that says "no data".
"""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path

import matplotlib.dates as mdates
import numpy as np
import polars as pl
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from kinematic_pipeline.backtest.metrics import confusion_matrix, reliability_curve
from kinematic_pipeline.report.tables import runs_at
from kinematic_pipeline.tasks.actions import ACTION_NAMES, BUY, PROB_COLUMNS
from kinematic_pipeline.variants import (
    ALL_VARIANT_NAMES,
    BENCHMARK,
    FOCUS_VARIANT,
    VARIANT_NAMES,
    color,
    display_name,
    short_name,
)
from kinematic_pipeline.variants import variant as lookup_variant
from kinematic_pipeline.warehouse.atomic import write_bytes_atomic

DPI = 110  # fixed, so PNG bytes do not depend on matplotlib's rc defaults


def save_figure(fig: Figure, path: Path) -> bytes:
    """The PNG of ``fig``, rendered in memory and written whole (a rename over ``path``, never through a link)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    data = buffer.getvalue()
    write_bytes_atomic(Path(path), data)
    return data


def no_data_figure(title: str, path: Path) -> bytes:
    fig = Figure(figsize=(6, 2.5))
    fig.text(0.5, 0.5, f"{title}\n\nno data", ha="center", va="center", fontsize=11)
    return save_figure(fig, path)


def date_axis(ax) -> None:
    locator = mdates.AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))


def ticker_window(frame: pl.DataFrame, ticker: str, start: dt.date | None, end: dt.date | None) -> pl.DataFrame:
    """One ticker's rows between start and end (inclusive; None: open), sorted by date."""
    if frame.is_empty():
        return frame
    frame = frame.filter(pl.col("ticker") == ticker)
    if start is not None:
        frame = frame.filter(pl.col("date") >= start)
    if end is not None:
        frame = frame.filter(pl.col("date") <= end)
    return frame.sort("date")


def _variants_present(frame: pl.DataFrame, candidates=VARIANT_NAMES) -> list[str]:
    present = set(frame["variant"].to_list())
    return [v for v in candidates if v in present]


def _nan_mean(column: str) -> pl.Expr:
    return pl.col(column).cast(pl.Float64).fill_nan(None).mean()


def equity_curves_png(equity: pl.DataFrame, tau: float, cost_bps: float, path: Path) -> bytes:
    """Paper fig sector_sweep: left the policies' equity per ticker (SplineGPT thick, baselines thin),
    right Buy & Hold per ticker. Several seeds: every seed's curve (faint) and their mean per day."""
    runs = runs_at(equity, tau, cost_bps)
    if runs.is_empty():
        return no_data_figure("Equity curves", path)
    curves = runs.group_by("variant", "ticker", "date").agg(_nan_mean("equity")).sort("variant", "ticker", "date")
    by_run = curves.partition_by(["variant", "ticker"], as_dict=True)
    policies = runs.filter(pl.col("variant") != BENCHMARK)
    seeds = trained_seeds(policies)
    tickers = runs["ticker"].unique(maintain_order=True).to_list()
    colors = {t: f"C{i % 10}" for i, t in enumerate(tickers)}
    fig = Figure(figsize=(12, 4.5), layout="constrained")
    left, right = fig.subplots(1, 2, sharey=True)
    for variant, ax in [(v, left) for v in VARIANT_NAMES] + [(BENCHMARK, right)]:
        for ticker in tickers:
            curve = by_run.get((variant, ticker))
            if curve is None:
                continue
            thick = variant in (FOCUS_VARIANT, BENCHMARK)
            if len(seeds) > 1 and variant != BENCHMARK:  # each seed, faint, under the mean over seeds
                per_seed = policies.filter((pl.col("variant") == variant) & (pl.col("ticker") == ticker))
                for one in per_seed.sort("seed", "date").partition_by("seed"):
                    ax.plot(one["date"].to_numpy(), one["equity"].to_numpy(), color=colors[ticker], lw=0.4, alpha=0.3)
            ax.plot(
                curve["date"].to_numpy(),
                curve["equity"].to_numpy(),
                color=colors[ticker],
                lw=1.6 if thick else 0.7,
                ls=_line_style(variant),
                alpha=1.0 if thick else 0.6,
            )
    ticker_handles = [Line2D([], [], color=colors[t], lw=1.6, label=t) for t in tickers]
    style_handles = [
        Line2D(
            [],
            [],
            color="gray",
            lw=1.6 if v == FOCUS_VARIANT else 0.7,
            ls=_line_style(v),
            label=display_name(v),
        )
        for v in _variants_present(runs)
    ]
    left.legend(handles=ticker_handles + style_handles, fontsize=7, ncols=2)
    right.legend(handles=ticker_handles, fontsize=7)
    seed_note = f"; mean of {len(seeds)} seeds, each seed faint" if len(seeds) > 1 else ""  # the models' seeds
    left.set_title(f"Policies (tau = {100 * tau:.2f}%, cost {cost_bps:g} bps{seed_note})", fontsize=10)
    right.set_title("Buy & Hold", fontsize=10)
    left.set_ylabel("equity")
    for ax in (left, right):
        date_axis(ax)
        ax.grid(alpha=0.3)
    return save_figure(fig, path)


def trained_seeds(policies: pl.DataFrame) -> list[int]:
    """The seeds the seeded variants of ``policies`` (rows with ``variant`` and ``seed``) were trained with: not a
    baseline's seed 0, fitted once (a 2-seed run's figure says "mean of 2 seeds", not 3)."""
    if policies.is_empty():
        return []
    seeded = [v for v in policies["variant"].unique().to_list() if lookup_variant(v).seeded]
    return policies.filter(pl.col("variant").is_in(seeded))["seed"].drop_nulls().unique().sort().to_list()


def _reliability_panel(ax, by_variant: dict, variants: list[str]) -> None:
    """Panel (C): reliability of p(Buy) per variant on labelled days, of the stored de-weighted p = (q/w)/Σ(q/w):
    the weighted softmax q is miscalibrated by construction (q_i ∝ w_i p_i), so its curve would sit off the diagonal
    even for a perfect model."""
    ax.plot([0, 1], [0, 1], color="gray", ls="--", lw=0.8, label="perfect calibration")
    for v in variants:
        labelled = by_variant[(v,)].filter(pl.col("label") >= 0)
        probs = labelled.select(PROB_COLUMNS).to_numpy().astype(np.float64)
        mean_p, freq, count = reliability_curve(probs[:, BUY], labelled["label"].to_numpy() == BUY)
        used = count > 0
        ax.plot(mean_p[used], freq[used], marker="o", ms=3, color=color(v), label=display_name(v))
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("de-weighted p(Buy), p = (q/w)/Σ(q/w)")
    ax.set_title("(C) Calibration of the de-weighted p(Buy)", fontsize=10)
    ax.set_ylabel("empirical Buy frequency")
    ax.legend(fontsize=7)


def diagnostics_png(predictions: pl.DataFrame, ticker: str, tau: float, path: Path) -> bytes:
    """Paper fig diagnostics: (A) action distribution per variant, (B) SplineGPT confusion matrix
    (true label x action, labelled days), (C) reliability of p(Buy) against the empirical Buy frequency, of
    the stored de-weighted probabilities p = (q/w)/Σ(q/w). Several seeds are pooled."""
    runs = runs_at(predictions, tau=tau, ticker=ticker)
    if runs.is_empty():
        return no_data_figure(f"Diagnostics ({ticker})", path)
    by_variant = runs.partition_by("variant", as_dict=True)
    variants = _variants_present(runs)
    fig = Figure(figsize=(14, 4.2), layout="constrained")
    ax_a, ax_b, ax_c = fig.subplots(1, 3)
    width = 0.8 / max(1, len(variants))
    for i, v in enumerate(variants):
        counts = np.bincount(by_variant[(v,)]["action"].to_numpy().astype(np.int64), minlength=3)[:3]
        offset = (i - (len(variants) - 1) / 2) * width
        ax_a.bar(np.arange(3) + offset, counts / counts.sum(), width, color=color(v), label=display_name(v))
    ax_a.set_xticks(range(3), [f"{name} ({k})" for k, name in enumerate(ACTION_NAMES)])
    ax_a.set_ylim(0, 1.05)
    ax_a.set_ylabel("share of days")
    ax_a.set_title("(A) Action distribution", fontsize=10)
    ax_a.legend(fontsize=7)

    spline = by_variant.get((FOCUS_VARIANT,))
    if spline is None:
        ax_b.text(0.5, 0.5, "no SplineGPT predictions", ha="center", va="center", transform=ax_b.transAxes)
    else:
        matrix = confusion_matrix(spline["action"].to_numpy(), spline["label"].to_numpy())
        ax_b.imshow(matrix, cmap="Blues")
        for (row, col), n in np.ndenumerate(matrix):
            dark = n > matrix.max() / 2
            ax_b.text(col, row, str(n), ha="center", va="center", color="white" if dark else "black")
        ax_b.set_xticks(range(3), ACTION_NAMES)
        ax_b.set_yticks(range(3), ACTION_NAMES)
        ax_b.set_xlabel("action")
        ax_b.set_ylabel("true label")
    ax_b.set_title("(B) SplineGPT confusion matrix (labelled days)", fontsize=10)

    _reliability_panel(ax_c, by_variant, variants)
    fig.suptitle(f"Behavioral diagnostics ({ticker}, tau = {100 * tau:.2f}%)", fontsize=11)
    return save_figure(fig, path)


def _line_style(name: str) -> str:
    return "-" if name == BENCHMARK else lookup_variant(name).line_style


def _mean_by(frame: pl.DataFrame, key: str, column: str) -> tuple[np.ndarray, np.ndarray]:
    """(sorted key values, mean of column over seeds, NaN ignored) of one variant's rows."""
    means = frame.group_by(key).agg(_nan_mean(column)).sort(key)
    return means[key].to_numpy(), means[column].fill_null(float("nan")).to_numpy()


def _pick(values: list[float], wanted: float, fallback: float) -> float:
    close = [v for v in values if abs(v - wanted) <= 1e-9]
    return close[0] if close else fallback


def sweeps_png(metrics: pl.DataFrame, ticker: str, path: Path) -> bytes:
    """Paper fig sweeps: (A) action rate vs tau per variant at cost 0 (else the lowest cost present),
    (B) Sharpe vs cost per variant at tau = 1% (else the middle tau present), Buy & Hold dashed."""
    runs = runs_at(metrics, ticker=ticker)
    if runs.is_empty():
        return no_data_figure(f"Parameter sweeps ({ticker})", path)
    costs = sorted(set(runs["cost_bps"].to_list()))
    taus = sorted(set(runs["tau"].drop_nulls().to_list()))
    cost_a = _pick(costs, 0.0, costs[0])
    tau_b = _pick(taus, 0.01, taus[len(taus) // 2]) if taus else None
    fig = Figure(figsize=(11, 4), layout="constrained")
    ax_a, ax_b = fig.subplots(1, 2)
    for v in _variants_present(runs):
        at_cost = runs_at(runs, cost_bps=cost_a).filter(pl.col("variant") == v)
        tau_values, rates = _mean_by(at_cost, "tau", "action_rate")
        ax_a.plot(100 * tau_values, 100 * rates, marker="o", color=color(v), label=display_name(v))
    for v in [*_variants_present(runs), BENCHMARK]:
        at_tau = runs_at(runs, tau=tau_b).filter(pl.col("variant") == v)
        if at_tau.is_empty():
            continue
        cost_values, sharpes = _mean_by(at_tau, "cost_bps", "sharpe")
        label = display_name(v) + (" (N/A)" if np.isnan(sharpes).all() else "")
        ls = "--" if v == BENCHMARK else "-"
        ax_b.plot(cost_values, sharpes, marker="o", ls=ls, color=color(v), label=label)
    ax_a.set_xlabel("tau (%)")
    ax_a.set_ylabel("action rate (%)")
    ax_a.set_ylim(-5, 105)
    ax_a.set_title(f"(A) Action rate vs tau (cost {cost_a:g} bps)", fontsize=10)
    ax_b.axhline(0, color="gray", lw=0.6)
    ax_b.set_xlabel("cost per side (bps)")
    ax_b.set_ylabel("Sharpe")
    tau_text = f"{100 * tau_b:.2f}%" if tau_b is not None else "-"
    ax_b.set_title(f"(B) Sharpe vs cost (tau = {tau_text})", fontsize=10)
    for ax in (ax_a, ax_b):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle(f"Parameter sensitivity ({ticker})", fontsize=11)
    return save_figure(fig, path)


def decision_rules_png(metrics: pl.DataFrame, margin: pl.DataFrame, tau: float, cost_bps: float, path: Path) -> bytes:
    """The calibrated argmax (the argmax of the calibrated class-weighted probabilities, ``metrics``; not the paper's
    rule, the argmax of the network's own softmax) next to the margin rule, models, rules and probes: (A) mean Sharpe
    over tickers and seeds per variant, (B) mean action rate (a policy at 0% never trades: the Liquidation
    Equilibrium)."""
    argmax = runs_at(metrics, tau, cost_bps)
    second = runs_at(margin, tau, cost_bps) if margin.height else margin
    variants = [v for v in ALL_VARIANT_NAMES if argmax.height and v in set(argmax["variant"].to_list())]
    if not variants:
        return no_data_figure("Decision rules", path)
    fig = Figure(figsize=(max(10, 0.9 * len(variants)), 4.2), layout="constrained")
    ax_a, ax_b = fig.subplots(1, 2)
    x, width = np.arange(len(variants)), 0.38
    for offset, (rule, rows) in zip((-width / 2, width / 2), (("calibrated argmax", argmax), ("margin rule", second))):
        sharpe, rate = [], []
        for v in variants:
            r = rows.filter(pl.col("variant") == v) if rows.height else rows
            s = r["sharpe"].fill_nan(None).drop_nulls() if r.height else None
            sharpe.append(float(s.mean()) if s is not None and s.len() else 0.0)
            rate.append(100 * float(r["action_rate"].mean()) if r.height else 0.0)
        ax_a.bar(x + offset, sharpe, width, label=rule)
        ax_b.bar(x + offset, rate, width, label=rule)
    for ax, title in ((ax_a, "(A) mean Sharpe (N/A counted as 0)"), (ax_b, "(B) mean action rate, %")):
        ax.set_xticks(x, [short_name(v) for v in variants], fontsize=8, rotation=45, ha="right")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8)
    fig.suptitle(f"Decision rules at tau = {100 * tau:.2f}%, cost {cost_bps:g} bps", fontsize=10)
    return save_figure(fig, path)


def training_curves_png(curves: dict[tuple[str, str], list[list[dict]]], path: Path) -> bytes:
    """Validation loss against optimizer steps of every trained model: (A) pretraining (each backbone's own
    objective), (B) fine-tuning at the report's tau (the de-weighted log loss the run stopped on). One line per
    fold and seed, coloured by variant; a dot marks the step whose state was saved. ``curves`` maps
    (variant, "pretraining" | "fine-tuning") to the runs' rows (``training.trainer.CURVE_COLUMNS``)."""
    if not any(runs for runs in curves.values()):
        return no_data_figure("Training curves", path)
    fig = Figure(figsize=(11, 4), layout="constrained")
    axes = fig.subplots(1, 2)
    variants = sorted({v for v, _ in curves})
    colours = {v: f"C{i}" for i, v in enumerate(variants)}
    for ax, stage in zip(axes, ("pretraining", "fine-tuning")):
        for variant in variants:
            for k, rows in enumerate(curves.get((variant, stage), [])):
                steps = [r["step"] for r in rows]
                ax.plot(
                    steps,
                    [r["val_loss"] for r in rows],
                    color=colours[variant],
                    lw=1,
                    alpha=0.7,
                    label=variant if k == 0 else None,
                )
                best = [r for r in rows if r["best"]]
                if best:
                    ax.plot([best[0]["step"]], [best[0]["val_loss"]], "o", color=colours[variant], ms=4)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("validation loss" if stage == "pretraining" else "validation log loss (de-weighted p)")
        ax.set_title(f"({'A' if stage == 'pretraining' else 'B'}) {stage}", fontsize=10)
        ax.legend(fontsize=8)
    return save_figure(fig, path)
