"""The paper's published numbers (``paper_results.csv``) and this run's numbers next to them.

``paper_results.csv`` is a long-format transcription of the paper's result tables
(``../shared/seeds/000_601e01080a3a75d3.txt``): one row per published cell, with columns

    table       the LaTeX label without ``tab:`` (absolute_perf, risk_adjusted, liquidation_equilibrium,
                sensitivity_sweep, sensitivity)
    model       our variant name (``variants.py``): splinegpt, patchtst, rawgpt_fd, rawgpt, buy_and_hold
    ticker      INTC, NVDA, JPM, XOM, PFE, TSLA
    tau         the labelling threshold (empty for Buy & Hold, as in our metrics)
    cost_bps    the cost per trade (empty where the paper does not tie the number to one cost)
    metric      our metrics column: total_return, max_drawdown (fractions), sharpe, sortino, n_buy, n_sell,
                n_hold, action_rate (fraction), turnover_annual (times per year)
    value       the number, in our metrics' units; empty where the paper prints "N/A"
    paper_text  the cell exactly as the LaTeX prints it (without \\textbf), e.g. "+240.4%", "N/A$^*$"
    source      the LaTeX label, e.g. ``tab:absolute_perf``
    note        how tau and cost were read, and why a value is empty

The paper's test period: its text says "from Jan 1, 2023, to Present"; the first NYSE session of 2023 is
2023-01-03 (Jan 2 was the New Year holiday) and Table liquidation_equilibrium counts 762 NVDA actions
(294 + 228 + 240), which are the 762 sessions 2023-01-03 .. 2026-01-15. A run is compared with the paper
only when it tests exactly that period on at least one of the paper's six tickers. Pure: no dagster.
"""

from __future__ import annotations

import datetime as dt
import functools
from importlib import resources

import polars as pl

from kinematic_pipeline.report.tables import _percent, _ratio, format_percent, over_seeds, runs_at
from kinematic_pipeline.variants import BENCHMARK, VARIANT_NAMES, display_name
from kinematic_pipeline.warehouse import exact_paths as exact

PAPER_RESULTS_FILE = "paper_results.csv"
PAPER_TEST_PERIOD = (dt.date(2023, 1, 3), dt.date(2026, 1, 15))
PAPER_TICKERS = ("INTC", "NVDA", "JPM", "XOM", "PFE", "TSLA")  # in the paper's row order
PAPER_MODELS = (*VARIANT_NAMES, BENCHMARK)
PAPER_TAU, PAPER_COST_BPS = 0.01, 0.0  # the main tables' threshold and cost
PAPER_RESULTS_SCHEMA: dict[str, pl.DataType] = {
    "table": pl.String,
    "model": pl.String,
    "ticker": pl.String,
    "tau": pl.Float64,
    "cost_bps": pl.Float64,
    "metric": pl.String,
    "value": pl.Float64,
    "paper_text": pl.String,
    "source": pl.String,
    "note": pl.String,
}
# The side-by-side table's metrics: (label, metrics column, format, table of the paper it comes from).
HEADLINE = (
    ("Return", "total_return", format_percent, "absolute_perf"),
    ("MaxDD", "max_drawdown", format_percent, "absolute_perf"),
    ("Sharpe", "sharpe", _ratio, "risk_adjusted"),
    ("Sortino", "sortino", _ratio, "risk_adjusted"),
)
THIS_RUN, PAPER = "this run", "paper (published)"


@functools.cache
def paper_results() -> pl.DataFrame:
    """The transcribed tables (package data), with the schema above; "N/A" cells have a null value."""
    text = resources.files("kinematic_pipeline.report").joinpath(PAPER_RESULTS_FILE).read_text()
    return exact.read_csv(text.encode(), schema=PAPER_RESULTS_SCHEMA)


def _period_text(period: tuple[dt.date | None, dt.date | None]) -> str:
    return f"{period[0]} .. {period[1]}"


def _not_comparable_reason(test_period: tuple[dt.date | None, dt.date | None], tickers: list[str]) -> str | None:
    """None when the run's test period is the paper's and it tests one of its tickers; else why not."""
    paper = f"the paper tests {_period_text(PAPER_TEST_PERIOD)} on {', '.join(PAPER_TICKERS)}"
    this = f"this run tests {_period_text(test_period)} on {', '.join(tickers) if tickers else 'no ticker'}"
    first, last = test_period
    if first is None or last is None:
        return f"{this}; {paper}: this run has no test period, not comparable"
    if (first, last) != PAPER_TEST_PERIOD:
        if last < PAPER_TEST_PERIOD[0] or first > PAPER_TEST_PERIOD[1]:
            why = "different periods"
        else:
            why = "overlapping but different periods (cumulative returns and drawdowns depend on the span)"
        return f"{this}; {paper}: {why}, not comparable"
    if not set(tickers) & set(PAPER_TICKERS):
        return f"{this}; {paper}: same period but none of the paper's tickers, not comparable"
    return None


def paper_comparison(
    metrics: pl.DataFrame,
    test_period: tuple[dt.date | None, dt.date | None],
    tau: float = PAPER_TAU,
    cost_bps: float = PAPER_COST_BPS,
) -> tuple[pl.DataFrame | None, str]:
    """This run's headline metrics next to the paper's published ones, or None and why not comparable.

    ``test_period`` is (first, last) test day of the run. Comparable only when it is ``PAPER_TEST_PERIOD``
    and the run tests at least one of ``PAPER_TICKERS``. The table has one row per model (the paper's
    column order, Buy & Hold last) and paper ticker the run tests, and for each of Return, MaxDD, Sharpe and
    Sortino a column "<metric>: this run" (at ``tau`` and ``cost_bps``, formatted like the paper tables:
    mean ± std over seeds) and "<metric>: paper (published)" (the paper's cell as printed; "N/A" where the
    paper prints N/A, "-" where it has no number). The paper's main tables are at tau = 1% and no costs.
    """
    tickers = sorted(metrics["ticker"].unique().to_list()) if "ticker" in metrics.columns else []
    reason = _not_comparable_reason(test_period, tickers)
    if reason is not None:
        return None, reason
    shared = [t for t in PAPER_TICKERS if t in tickers]
    runs = runs_at(metrics, tau, cost_bps)
    groups = {} if runs.is_empty() else runs.partition_by(["variant", "ticker"], as_dict=True)
    paper = paper_results().filter(pl.col("table").is_in(["absolute_perf", "risk_adjusted"]))
    published = {(r["model"], r["ticker"], r["metric"]): r["paper_text"] for r in paper.iter_rows(named=True)}
    columns = ["Model", "Ticker"] + [f"{label}: {who}" for label, *_ in HEADLINE for who in (THIS_RUN, PAPER)]
    rows = []
    for model in PAPER_MODELS:
        for ticker in shared:
            row = {"Model": display_name(model), "Ticker": ticker}
            for label, column, fmt, _ in HEADLINE:
                spread = _percent if fmt is format_percent else None
                row[f"{label}: {THIS_RUN}"] = over_seeds(groups.get((model, ticker)), column, fmt, spread)
                row[f"{label}: {PAPER}"] = published.get((model, ticker, column), "-").replace("$^*$", "")
            rows.append(row)
    missing = [t for t in PAPER_TICKERS if t not in tickers]
    why = (
        f"this run tests the paper's period {_period_text(PAPER_TEST_PERIOD)}: its numbers at tau = {tau:g}, "
        f"costs = {cost_bps:g} bps next to the paper's published ones (paper: tau = 1%, no costs)"
    )
    if missing:
        why += f"; the paper's {', '.join(missing)} are not in this run"
    return pl.DataFrame(rows, schema={c: pl.String for c in columns}), why


def not_comparable_table(explanation: str) -> pl.DataFrame:
    """The one-cell table the report shows in place of the comparison."""
    return pl.DataFrame({"Paper comparison": [explanation]}, schema={"Paper comparison": pl.String})
