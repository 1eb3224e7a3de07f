"""The paper's published numbers: the transcription against the paper's LaTeX, the CSV's own consistency, and
the report's side-by-side comparison (both when comparable and when not)."""

from __future__ import annotations

import datetime as dt
import math
import re

import polars as pl
import pytest

from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.report.paper import (
    PAPER,
    PAPER_MODELS,
    PAPER_TEST_PERIOD,
    PAPER_TICKERS,
    THIS_RUN,
    paper_comparison,
    paper_results,
)
from kinematic_pipeline_tests.helpers import ROOT
from kinematic_pipeline_tests.helpers.frames import ALWAYS_SELL, metric_row, metrics_frame

SEED = ROOT.parent / "shared" / "seeds" / "000_601e01080a3a75d3.txt"
MODEL_COLUMNS = ("splinegpt", "patchtst", "rawgpt_fd", "rawgpt", "buy_and_hold")  # Spline Patch FD Raw Mkt


def _cell_value(text: str) -> float:
    """A cell as the CSV's value column holds it: percentages as fractions, "77.7x" as 77.7, N/A as NaN."""
    t = text.replace("$^*$", "").replace(" (Sell)", "").strip()
    if t == "N/A":
        return math.nan
    if t.endswith("%"):
        return float(t[:-1]) / 100
    return float(t.removesuffix("x"))


def _cells(line: str) -> list[str]:
    """The cells of one LaTeX table row, without \\textbf, \\modelname{} or the escaped percent signs."""
    line = line.replace("\\modelname{}", "SplineGPT").replace("\\%", "%").split("\\\\")[0]
    line = re.sub(r"\\textbf\{([^{}]*)\}", r"\1", line)
    return [c.strip() for c in line.split("&")]


def _tabular(latex: str, label: str) -> list[str]:
    """The lines of the tabular of the table labelled ``label``."""
    end = latex.index(f"\\label{{{label}}}")
    start = latex.rindex("\\begin{tabular}", 0, end)
    return latex[start : latex.index("\\end{tabular}", start)].splitlines()


def _row(lines: list[str], first_cell: str) -> list[str]:
    (line,) = [x for x in lines if _cells(x)[0] == first_cell]
    return _cells(line)[1:]


@pytest.fixture(scope="module")
def latex() -> str:
    if not SEED.is_file():
        pytest.skip(f"the paper's LaTeX is not at {SEED}")
    return SEED.read_text()


def _csv(table: str, **keys) -> pl.DataFrame:
    frame = paper_results().filter(pl.col("table") == table)
    for column, value in keys.items():
        frame = frame.filter(pl.col(column) == value)
    return frame


def test_every_cell_of_the_transcription_is_the_papers_latex(latex):
    """All 178 cells: absolute_perf, risk_adjusted and sensitivity row by row, liquidation_equilibrium's two
    rows, sensitivity_sweep's four tau rows and its two multirow PatchTST cells."""
    checked = 0
    for table, metrics in (
        ("absolute_perf", ("total_return", "max_drawdown")),
        ("risk_adjusted", ("sharpe", "sortino")),
    ):
        lines = _tabular(latex, f"tab:{table}")
        for ticker in PAPER_TICKERS:
            printed = _row(lines, ticker)
            assert len(printed) == 10
            for i, metric in enumerate(metrics):
                for j, model in enumerate(MODEL_COLUMNS):
                    (text,) = _csv(table, ticker=ticker, model=model, metric=metric)["paper_text"]
                    assert text == printed[5 * i + j], (table, ticker, model, metric)
                    checked += 1

    lines = _tabular(latex, "tab:sensitivity")
    for ticker in PAPER_TICKERS:
        printed = _row(lines, ticker)
        rows = _csv("sensitivity", ticker=ticker).sort("metric", "cost_bps", nulls_last=True)
        sharpe = rows.filter(pl.col("metric") == "sharpe")
        assert sharpe["cost_bps"].to_list() == [0.0, 5.0, 10.0, 20.0]
        assert sharpe["paper_text"].to_list() == printed[:4]
        assert rows.filter(pl.col("metric") == "turnover_annual")["paper_text"].to_list() == printed[4:]
        checked += 5

    lines = _tabular(latex, "tab:liquidation_equilibrium")
    for model, first_cell in (("patchtst", "PatchTST"), ("splinegpt", "SplineGPT")):
        printed = _row(lines, first_cell)
        for metric, text in zip(("n_buy", "n_sell", "n_hold", "action_rate", "total_return", "sharpe"), printed):
            (ours,) = _csv("liquidation_equilibrium", model=model, metric=metric)["paper_text"]
            assert ours == text, (model, metric)
            checked += 1

    lines = _tabular(latex, "tab:sensitivity_sweep")
    multirow = re.findall(r"\\multirow\{4\}\{\*\}\{\\vspace\{-1.5cm\}([^}]*)\}", "\n".join(lines))
    assert [m.replace("\\%", "%") for m in multirow] == ["100.0% (Sell)", "N/A"]
    conditions = [i for i, x in enumerate(lines) if re.search(r"\\textbf\{(Very )?(Aggressive|Conservative)\}", x)]
    assert len(conditions) == 4
    for i in conditions:
        printed = _cells(lines[i])
        tau = float(re.search(r"tau=([0-9.]+)", lines[i + 1]).group(1)) / 100
        rows = _csv("sensitivity_sweep").filter((pl.col("tau") - tau).abs() < 1e-12)
        text = {(r["model"], r["metric"]): r["paper_text"] for r in rows.iter_rows(named=True)}
        assert (text["splinegpt", "action_rate"], text["splinegpt", "sharpe"]) == tuple(printed[-4:-2]), tau
        assert (text["patchtst", "action_rate"], text["patchtst", "sharpe"]) == ("100.0% (Sell)", "N/A"), tau
        checked += 4
    assert checked == paper_results().height == 178


def test_the_csv_lists_every_model_and_ticker_and_a_number_wherever_the_paper_prints_one():
    frame = paper_results()
    for table in ("absolute_perf", "risk_adjusted"):
        rows = frame.filter(pl.col("table") == table)
        assert set(zip(rows["model"], rows["ticker"])) == {(m, t) for m in PAPER_MODELS for t in PAPER_TICKERS}
        assert rows.height == len(PAPER_MODELS) * len(PAPER_TICKERS) * 2
    assert set(frame.filter(pl.col("table") == "sensitivity")["ticker"]) == set(PAPER_TICKERS)
    assert frame.select("table", "model", "ticker", "tau", "cost_bps", "metric").is_duplicated().sum() == 0
    for row in frame.iter_rows(named=True):
        expected = _cell_value(row["paper_text"])
        if math.isnan(expected):
            assert row["value"] is None and "N/A in the paper" in row["note"], row
        else:
            assert row["value"] is not None and math.isfinite(row["value"]), row
            assert row["value"] == pytest.approx(expected, abs=1e-12), row
        assert row["source"] == f"tab:{row['table']}"
        assert (row["tau"] is None) == (row["model"] == "buy_and_hold"), row
    # The N/A cells are exactly the Liquidation-Equilibrium baselines' ratios.
    na = frame.filter(pl.col("value").is_null())
    assert set(na["model"]) == {"patchtst", "rawgpt_fd", "rawgpt"}
    assert set(na["metric"]) == {"sharpe", "sortino"}


def test_the_papers_test_period_holds_the_762_sessions_its_nvda_actions_count():
    counts = _csv("liquidation_equilibrium", model="splinegpt").filter(pl.col("metric").str.starts_with("n_"))
    sessions = trading_days(*PAPER_TEST_PERIOD)
    assert int(counts["value"].sum()) == len(sessions) == 762
    assert sessions[0] == PAPER_TEST_PERIOD[0] == dt.date(2023, 1, 3)
    assert sessions[-1] == PAPER_TEST_PERIOD[1]


def _run_metrics(first: dt.date, last: dt.date, tickers=("NVDA", "PFE")) -> pl.DataFrame:
    rows = []
    for ticker in tickers:
        for cost in (0.0, 10.0):
            dates = dict(first_date=first, last_date=last)
            rows.append(metric_row("buy_and_hold", ticker=ticker, cost_bps=cost, total_return=10.0, **dates))
            for seed in (0, 1):
                rows.append(metric_row("splinegpt", 0.01, seed, ticker, cost, total_return=5.0 + seed, **dates))
            rows.append(metric_row("patchtst", 0.01, 0, ticker, cost, **(ALWAYS_SELL | dates)))
    return metrics_frame(rows)


def test_a_run_over_the_papers_period_is_shown_next_to_the_papers_numbers():
    metrics = _run_metrics(*PAPER_TEST_PERIOD)
    table, why = paper_comparison(metrics, PAPER_TEST_PERIOD)
    assert table is not None
    assert "the paper's period 2023-01-03 .. 2026-01-15" in why and "INTC, JPM, XOM, TSLA are not in this run" in why
    assert table.columns[:4] == ["Model", "Ticker", f"Return: {THIS_RUN}", f"Return: {PAPER}"]
    assert table.height == len(PAPER_MODELS) * 2  # every model, the two paper tickers this run tests
    nvda = {r["Model"]: r for r in table.filter(pl.col("Ticker") == "NVDA").iter_rows(named=True)}
    assert nvda["SplineGPT"][f"Return: {PAPER}"] == "+579.2%"
    assert nvda["SplineGPT"][f"Return: {THIS_RUN}"] == "+550.0% ± 70.7%"  # mean and std of 5.0 and 6.0
    assert nvda["SplineGPT"][f"Sharpe: {PAPER}"] == "2.31"
    assert nvda["Buy & Hold"][f"Return: {PAPER}"] == "+1185.7%"
    assert nvda["Buy & Hold"][f"Return: {THIS_RUN}"] == "+1000.0%"
    assert nvda["PatchTST"][f"Sharpe: {PAPER}"] == "N/A" and nvda["PatchTST"][f"Sharpe: {THIS_RUN}"] == "N/A"
    assert nvda["RawGPT"][f"MaxDD: {PAPER}"] == "0.0%" and nvda["RawGPT"][f"MaxDD: {THIS_RUN}"] == "-"
    pfe = table.filter((pl.col("Ticker") == "PFE") & (pl.col("Model") == "SplineGPT"))
    assert pfe[f"Sortino: {PAPER}"].to_list() == ["-0.18"]


@pytest.mark.parametrize(
    ("first", "last", "tickers", "expected"),
    [
        (dt.date(2021, 1, 4), dt.date(2022, 12, 30), ("SYN000", "SYN001"), "different periods, not comparable"),
        (dt.date(2023, 1, 3), dt.date(2024, 12, 31), ("NVDA",), "overlapping but different periods"),
        (*PAPER_TEST_PERIOD, ("SYN000",), "none of the paper's tickers, not comparable"),
    ],
)
def test_a_run_over_another_period_or_universe_says_why_it_is_not_comparable(first, last, tickers, expected):
    table, why = paper_comparison(_run_metrics(first, last, tickers), (first, last))
    assert table is None
    assert f"this run tests {first} .. {last} on {', '.join(sorted(tickers))}" in why
    assert "the paper tests 2023-01-03 .. 2026-01-15 on INTC, NVDA, JPM, XOM, PFE, TSLA" in why
    assert expected in why


def test_the_report_has_the_comparison_table_and_a_context_line(ci_settings):
    from kinematic_pipeline.stages.report import _context, build_tables
    from kinematic_pipeline.stages.report_titles import TABLE_TITLES

    metrics = _run_metrics(dt.date(2021, 1, 4), dt.date(2022, 12, 30))
    built = build_tables(ci_settings, metrics)
    assert set(built) == set(TABLE_TITLES)
    assert built["paper_comparison"].columns == ["Paper comparison"]
    (sentence,) = built["paper_comparison"]["Paper comparison"]
    assert sentence.endswith("different periods, not comparable")
    assert _context(ci_settings, metrics)["paper's published numbers"] == sentence
    metrics = _run_metrics(*PAPER_TEST_PERIOD)
    assert build_tables(ci_settings, metrics)["paper_comparison"].height == len(PAPER_MODELS) * 2
