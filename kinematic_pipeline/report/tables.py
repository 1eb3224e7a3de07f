"""The paper's tables ("Experimental Validation" and "Discussion") rebuilt from the ``metrics`` frame.

Pure: polars in, polars out, every cell a formatted string, laid out like the paper's table.
A (variant, ticker) with no rows reads "-"; an undefined metric (NaN, e.g. the Sharpe of a policy that
never holds a position) reads "N/A". With several seeds a cell is the mean over seeds followed by
"± std" (sample std); a metric defined for only some seeds is averaged over those and says how many,
e.g. "1.20 ± 0.10 (2/3 seeds)".
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import polars as pl

from kinematic_pipeline.tasks.buy_sell_hold import at_tau
from kinematic_pipeline.variants import ALL_VARIANT_NAMES, BENCHMARK, VARIANT_NAMES, display_name, short_name

TABLE_COLUMNS = (*VARIANT_NAMES, BENCHMARK)  # the trained models in the paper's column order, Buy & Hold last
MISSING = "-"  # no row for this (variant, ticker, ...)
UNDEFINED = "N/A"  # a row whose metric is NaN
_REL_TOL = 1e-9  # cost_bps is a float read back from files: compared with a tolerance (tau: tasks.buy_sell_hold)

Cell = Callable[[pl.DataFrame | None], str]


def runs_at(
    frame: pl.DataFrame, tau: float | None = None, cost_bps: float | None = None, ticker: str | None = None
) -> pl.DataFrame:
    """Rows at this tau, cost and ticker (None: any). Buy & Hold rows have no tau and match every tau."""
    if frame.is_empty():
        return frame
    if cost_bps is not None:
        frame = frame.filter(_close_to("cost_bps", cost_bps))
    if tau is not None:
        frame = frame.filter((pl.col("variant") == BENCHMARK) | at_tau(tau))
    if ticker is not None:
        frame = frame.filter(pl.col("ticker") == ticker)
    return frame


def _close_to(column: str, value: float) -> pl.Expr:
    return (pl.col(column) - value).abs() <= _REL_TOL * max(1.0, abs(value))


def format_percent(fraction: float) -> str:
    """0.0284 -> "+2.8%", the paper's style; anything that rounds to zero reads "0.0%"."""
    return "0.0%" if round(100 * fraction, 1) == 0 else f"{100 * fraction:+.1f}%"


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.1f}%"


def _ratio(value: float) -> str:
    return f"{value:.2f}"


def _count(value: float) -> str:
    return f"{value:.0f}"


def _one_decimal(value: float) -> str:
    return f"{value:.1f}"


def _turnover(value: float) -> str:
    return f"{_one_decimal(value)}x"


def over_seeds(rows: pl.DataFrame | None, column: str, fmt: Callable[[float], str], spread_fmt=None) -> str:
    """Mean of ``column`` over the seeds in ``rows`` (NaN ignored), with "± std" when several seeds."""
    if rows is None or rows.is_empty():
        return MISSING
    values = rows[column].cast(pl.Float64).fill_null(float("nan")).to_numpy()
    defined = values[np.isfinite(values)]
    if defined.size == 0:
        return UNDEFINED
    text = fmt(float(defined.mean()))
    if defined.size > 1:
        text += f" ± {(spread_fmt or fmt)(float(defined.std(ddof=1)))}"
    if defined.size < values.size:
        text += f" ({defined.size}/{values.size} seeds)"
    return text


def _cell(column: str, fmt: Callable[[float], str], spread_fmt=None) -> Cell:
    return lambda rows: over_seeds(rows, column, fmt, spread_fmt)


def sharpe_cell(rows: pl.DataFrame | None) -> str:
    """The Sharpe as the tables print it (``lineage`` of a pooled row prints this very string)."""
    return over_seeds(rows, "sharpe", _ratio)


def _sharpe_ci(rows: pl.DataFrame | None) -> str:
    """The bootstrap interval as "[lo, hi]"; with several seeds, the mean of each bound."""
    if rows is None or rows.is_empty():
        return MISSING
    low, high = (
        rows[c].cast(pl.Float64).fill_null(float("nan")).to_numpy() for c in ("sharpe_ci_low", "sharpe_ci_high")
    )
    if not (np.isfinite(low).any() and np.isfinite(high).any()):
        return UNDEFINED
    return f"[{np.nanmean(low):.2f}, {np.nanmean(high):.2f}]"


def _equilibrium_flag(rows: pl.DataFrame | None) -> str:
    if rows is None or rows.is_empty():
        return MISSING
    flags = rows["liquidation_equilibrium"].fill_null(False).to_list()
    if all(flags):
        return "yes"
    return "no" if not any(flags) else f"{sum(flags)}/{len(flags)} seeds"


def _action_rate_with_sole_action(rows: pl.DataFrame | None) -> str:
    """Action rate, plus "(Sell)" etc. when every seed only ever took that one action (the paper's sweep)."""
    text = over_seeds(rows, "action_rate", _percent)
    if rows is None or rows.is_empty():
        return text
    totals = {name: rows[f"n_{name.lower()}"].sum() for name in ("Buy", "Sell", "Hold")}
    taken = [name for name, total in totals.items() if total > 0]
    return f"{text} ({taken[0]})" if len(taken) == 1 else text


_PERCENT = (format_percent, _percent)  # (mean, spread) formats of a signed percentage


def _groups(frame: pl.DataFrame, keys: list[str]) -> dict[tuple, pl.DataFrame]:
    return {} if frame.is_empty() else frame.partition_by(keys, as_dict=True)


def _in_order(values: pl.Series) -> list:
    return values.drop_nulls().unique(maintain_order=True).to_list()


def _table(rows: list[dict[str, str]], columns: list[str]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={c: pl.String for c in columns})


def _per_ticker(runs: pl.DataFrame, cells: list[tuple[str, Cell]], variants=TABLE_COLUMNS) -> pl.DataFrame:
    """One row per ticker; a column "<label>: <variant>" for each (label, cell) and each variant."""
    groups = _groups(runs, ["variant", "ticker"])
    columns = ["Ticker"] + [f"{label}: {short_name(v)}" for label, _ in cells for v in variants]
    rows = []
    for ticker in _in_order(runs["ticker"]) if not runs.is_empty() else []:
        row = {"Ticker": ticker}
        for label, cell in cells:
            for v in variants:
                row[f"{label}: {short_name(v)}"] = cell(groups.get((v, ticker)))
        rows.append(row)
    return _table(rows, columns)


def with_days_in_market(metrics: pl.DataFrame, min_days: int) -> pl.DataFrame:
    """The metrics with ``days_in_market`` (closes long: exposure x days) and, in the paper's convention, the
    Sharpe, its interval and the Sortino set to N/A (NaN) for a record long on fewer than ``min_days`` days
    (rf subtracted from a cash that earns nothing makes a nearly flat record's Sharpe unbounded)."""
    if metrics.is_empty() or "exposure" not in metrics.columns:
        return metrics
    days = (pl.col("exposure") * pl.col("days")).round(0).cast(pl.Int64)
    few = days < min_days
    masked = ("sharpe", "sharpe_ci_low", "sharpe_ci_high", "sortino")
    return metrics.with_columns(days.alias("days_in_market")).with_columns(
        pl.when(few).then(float("nan")).otherwise(pl.col(c)).alias(c) for c in masked
    )


def absolute_performance(metrics: pl.DataFrame, tau: float, cost_bps: float) -> pl.DataFrame:
    """Paper table absolute_perf: per ticker, total return and max drawdown of Spline/Patch/FD/Raw/Mkt."""
    cells = [
        ("Return", _cell("total_return", *_PERCENT)),
        ("MaxDD", _cell("max_drawdown", *_PERCENT)),
    ]
    return _per_ticker(runs_at(metrics, tau, cost_bps), cells)


def risk_adjusted(metrics: pl.DataFrame, tau: float, cost_bps: float) -> pl.DataFrame:
    """Paper table risk_adjusted: per ticker, Sharpe and Sortino of each, plus the Sharpe's 95% bootstrap CI."""
    cells = [
        ("Sharpe", sharpe_cell),
        ("Sortino", _cell("sortino", _ratio)),
        ("Sharpe 95% CI", _sharpe_ci),
        ("Days in market", _cell("days_in_market", _count)),
    ]
    return _per_ticker(runs_at(_with_days(metrics), tau, cost_bps), cells)


def _with_days(metrics: pl.DataFrame) -> pl.DataFrame:
    """``days_in_market`` for metrics not read through ``with_days_in_market`` (nothing masked)."""
    return metrics if "days_in_market" in metrics.columns else with_days_in_market(metrics, 0)


def liquidation_equilibrium(metrics: pl.DataFrame, tau: float, cost_bps: float, ticker: str) -> pl.DataFrame:
    """Paper table liquidation_equilibrium: per model, action counts, action rate, return, Sharpe, exposure."""
    groups = _groups(runs_at(_with_days(metrics), tau, cost_bps, ticker), ["variant"])
    cells = {
        "Buy": _cell("n_buy", _count, _one_decimal),
        "Sell": _cell("n_sell", _count, _one_decimal),
        "Hold": _cell("n_hold", _count, _one_decimal),
        "Action Rate": _cell("action_rate", _percent),
        "Return": _cell("total_return", *_PERCENT),
        "Sharpe": _cell("sharpe", _ratio),
        "Exposure": _cell("exposure", _percent),
        "Days in market": _cell("days_in_market", _count, _one_decimal),
        "Liquidation Equilibrium": _equilibrium_flag,
    }
    rows = [
        {"Model": display_name(v)} | {name: cell(groups.get((v,))) for name, cell in cells.items()}
        for v in VARIANT_NAMES
    ]
    return _table(rows, ["Model", *cells])


def tau_sweep(metrics: pl.DataFrame, ticker: str, cost_bps: float) -> pl.DataFrame:
    """Paper table sensitivity_sweep, with all four models: per tau, its test period (a tau swept on fewer folds
    than the report's is tested on fewer days) and the action rate and Sharpe of each."""
    runs = runs_at(_with_days(metrics), cost_bps=cost_bps, ticker=ticker)
    runs = runs.filter(pl.col("variant") != BENCHMARK) if not runs.is_empty() else runs
    groups = _groups(runs, ["variant", "tau"])
    labels = ("Action Rate", "Sharpe", "Days in market")
    columns = ["tau", "Test period"] + [f"{label}: {short_name(v)}" for v in VARIANT_NAMES for label in labels]
    rows = []
    for tau in sorted(_in_order(runs["tau"])) if not runs.is_empty() else []:
        at = runs.filter(_close_to("tau", tau))
        row = {"tau": f"{100 * tau:.2f}%", "Test period": f"{at['first_date'].min()} .. {at['last_date'].max()}"}
        for v in VARIANT_NAMES:
            rows_v = groups.get((v, tau))
            row[f"Action Rate: {short_name(v)}"] = _action_rate_with_sole_action(rows_v)
            row[f"Sharpe: {short_name(v)}"] = over_seeds(rows_v, "sharpe", _ratio)
            row[f"Days in market: {short_name(v)}"] = over_seeds(rows_v, "days_in_market", _count, _one_decimal)
        rows.append(row)
    return _table(rows, columns)


def cost_sensitivity(metrics: pl.DataFrame, variant: str, tau: float) -> pl.DataFrame:
    """Paper table sensitivity (costs): per ticker, the Sharpe at each cost, and the annualized turnover.

    The turnover is the one at the lowest cost in the frame (costs shrink the traded notional slightly).
    """
    runs = runs_at(_with_days(metrics), tau=tau)
    runs = runs.filter(pl.col("variant") == variant) if not runs.is_empty() else runs
    costs = sorted(_in_order(runs["cost_bps"])) if not runs.is_empty() else []
    groups = _groups(runs, ["ticker", "cost_bps"])
    columns = ["Ticker"] + [f"Sharpe ({c:g} bps)" for c in costs] + ["Days in market", "Ann. Turnover"]
    rows = []
    for ticker in _in_order(runs["ticker"]) if not runs.is_empty() else []:
        row = {"Ticker": ticker} | {
            f"Sharpe ({c:g} bps)": over_seeds(groups.get((ticker, c)), "sharpe", _ratio) for c in costs
        }
        row["Days in market"] = over_seeds(groups.get((ticker, costs[0])), "days_in_market", _count, _one_decimal)
        row["Ann. Turnover"] = over_seeds(groups.get((ticker, costs[0])), "turnover_annual", _turnover)
        rows.append(row)
    return _table(rows, columns)


def calibration_summary(metrics: pl.DataFrame, tau: float, cost_bps: float) -> pl.DataFrame:
    """Our extra table: per model and ticker, accuracy of the actions, multi-class Brier score and top-label
    ECE of the probabilities (the backtests' columns: of p = (q/w)/Σ(q/w) when the sweep had the class
    weights, as the pipeline's does; see ``sweep.METRICS_SCHEMA``)."""
    runs = runs_at(metrics, tau, cost_bps)
    groups = _groups(runs, ["variant", "ticker"])
    cells = {
        "Accuracy": _cell("accuracy", _percent),
        "Brier": _cell("brier", lambda x: f"{x:.3f}"),
        "ECE": _cell("ece", lambda x: f"{x:.3f}"),
    }
    tickers = _in_order(runs["ticker"]) if not runs.is_empty() else []
    rows = [
        {"Model": display_name(v), "Ticker": t} | {name: cell(groups.get((v, t))) for name, cell in cells.items()}
        for v in ALL_VARIANT_NAMES
        for t in tickers
        if v in VARIANT_NAMES or (v, t) in groups  # the paper's models always; a baseline when evaluated
    ]
    return _table(rows, ["Model", "Ticker", *cells])


def per_seed(metrics: pl.DataFrame, tau: float, cost_bps: float, portfolio: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per (model, seed): the Sharpe of the equal-weight portfolio of the test tickers (``portfolio``:
    ``backtest.portfolio.portfolio_summary`` by variant and seed; cash credited with rf, so bounded), its days in
    the market and the tickers never in it, the mean return and max drawdown, the action rate and how many tickers
    the policy liquidated (never held), so the spread behind every "± std" is visible."""
    runs = runs_at(metrics, tau, cost_bps)
    runs = runs.filter(pl.col("variant") != BENCHMARK) if not runs.is_empty() else runs
    columns = ["Model", "Seed", "Tickers", PORTFOLIO_SHARPE, "Days in market", "Mean Return", "Mean MaxDD"]
    columns += ["Action Rate", "Liquidated"]
    summary = {} if portfolio is None else {(r["variant"], r["seed"]): r for r in portfolio.iter_rows(named=True)}
    rows = []
    for (variant, seed), group in sorted(_groups(runs, ["variant", "seed"]).items(), key=lambda kv: str(kv[0])):
        ew = summary.get((variant, seed))
        rows.append(
            {
                "Model": display_name(variant),
                "Seed": str(seed),
                "Tickers": str(group.height),
                PORTFOLIO_SHARPE: portfolio_cell(ew),
                "Days in market": "-" if ew is None else f"{ew['days_in_market']}/{ew['days']}",
                "Mean Return": _percent(float(group["total_return"].mean())),
                "Mean MaxDD": _percent(float(group["max_drawdown"].mean())),
                "Action Rate": _percent(float(group["action_rate"].mean())),
                "Liquidated": f"{int(group['liquidation_equilibrium'].sum())}/{group.height}",
            }
        )
    return _table(rows, columns)


PORTFOLIO_SHARPE = "Sharpe (equal-weight portfolio, cash at rf)"


def portfolio_cell(row: dict | None) -> str:
    """An equal-weight portfolio's bounded Sharpe, with the tickers whose own is N/A (never in the market)."""
    if row is None:
        return MISSING
    value = row["sharpe"]
    text = UNDEFINED if value is None or not np.isfinite(value) else _ratio(value)
    return text + (f" ({row['tickers_na']}/{row['tickers']} tickers N/A)" if row["tickers_na"] else "")
