"""The report package: tables laid out like the paper's, reproducible PNGs, and the Markdown document."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import polars as pl
import pytest

from kinematic_pipeline.config import EvalConfig
from kinematic_pipeline.report import (
    absolute_performance,
    calibration_summary,
    cost_sensitivity,
    diagnostics_png,
    equity_curves_png,
    kinematic_manifold_png,
    liquidation_equilibrium,
    render_report,
    responsiveness_png,
    risk_adjusted,
    sweeps_png,
    tau_sweep,
)
from kinematic_pipeline.stages.report import report_conventions
from kinematic_pipeline.stages.report_titles import FIGURE_HEADINGS, TABLE_CAPTIONS
from kinematic_pipeline_tests.helpers.frames import ALWAYS_SELL, DATES, NAN, metric_row, metrics_frame

CONVENTIONS = report_conventions(EvalConfig())

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def metrics() -> pl.DataFrame:
    rows = []
    for ticker in ("NVDA", "PFE"):
        for cost in (0.0, 10.0):
            rows.append(
                metric_row(
                    "buy_and_hold", ticker=ticker, cost_bps=cost, total_return=1.5 if ticker == "NVDA" else -0.412
                )
            )
            for tau in (0.005, 0.01, 0.02):
                rows.append(metric_row("splinegpt", tau, 0, ticker, cost, total_return=2.404, sharpe=1.2 - cost / 100))
                rows.append(metric_row("splinegpt", tau, 1, ticker, cost, total_return=2.0, sharpe=1.4 - cost / 100))
                rows.append(metric_row("patchtst", tau, 0, ticker, cost, **ALWAYS_SELL))
    return metrics_frame(rows)


def test_mkt_column_is_the_buy_and_hold_total_return_formatted(metrics):
    table = absolute_performance(metrics, tau=0.01, cost_bps=0.0)
    assert table["Ticker"].to_list() == ["NVDA", "PFE"]
    assert table["Return: Mkt"].to_list() == ["+150.0%", "-41.2%"]
    assert table["Return: Patch"].to_list() == ["0.0%", "0.0%"]
    assert table["MaxDD: Patch"][0] == "0.0%"


def test_cells_are_means_over_seeds_with_their_std(metrics):
    table = absolute_performance(metrics, tau=0.01, cost_bps=0.0)
    # mean(2.404, 2.0) = 2.202, sample std = 0.2857
    assert table["Return: Spline"][0] == "+220.2% ± 28.6%"
    sharpe = risk_adjusted(metrics, tau=0.01, cost_bps=0.0)["Sharpe: Spline"][0]
    assert sharpe == "1.30 ± 0.14"


def test_undefined_ratios_read_na_and_missing_variants_read_a_dash(metrics):
    table = risk_adjusted(metrics, tau=0.01, cost_bps=0.0)
    assert table["Sharpe: Patch"].to_list() == ["N/A", "N/A"]
    assert table["Sortino: Patch"][0] == "N/A"
    assert table["Sharpe 95% CI: Patch"][0] == "N/A"
    assert table["Sharpe: FD"].to_list() == ["-", "-"]
    assert table["Sharpe 95% CI: Mkt"][0] == "[0.50, 2.50]"


def test_a_metric_defined_for_only_some_seeds_says_so():
    frame = metrics_frame([metric_row(seed=0, sharpe=1.0), metric_row(seed=1, sharpe=NAN)])
    assert risk_adjusted(frame, 0.01, 0.0)["Sharpe: Spline"][0] == "1.00 (1/2 seeds)"


def test_liquidation_table_shows_the_always_sell_policy(metrics):
    table = liquidation_equilibrium(metrics, tau=0.01, cost_bps=0.0, ticker="NVDA")
    assert table["Model"].to_list() == ["SplineGPT", "PatchTST", "RawGPT-FD", "RawGPT"]
    patch = table.row(1, named=True)
    assert (patch["Buy"], patch["Sell"], patch["Hold"]) == ("0", "60", "0")
    assert (patch["Action Rate"], patch["Sharpe"], patch["Exposure"]) == ("100.0%", "N/A", "0.0%")
    assert patch["Liquidation Equilibrium"] == "yes"
    assert table.row(0, named=True)["Liquidation Equilibrium"] == "no"
    assert table.row(2, named=True)["Buy"] == "-"
    assert liquidation_equilibrium(metrics, 0.01, 0.0, "XOM")["Return"].to_list() == ["-"] * 4


def test_tau_sweep_has_one_sorted_row_per_tau_and_names_a_sole_action(metrics):
    table = tau_sweep(metrics, ticker="NVDA", cost_bps=0.0)
    assert table["tau"].to_list() == ["0.50%", "1.00%", "2.00%"]
    assert table["Action Rate: Patch"].to_list() == ["100.0% (Sell)"] * 3
    assert table["Action Rate: Spline"][0] == "66.7% ± 0.0%"
    assert table["Sharpe: Raw"][0] == "-"


def test_cost_sensitivity_has_a_sharpe_column_per_cost_and_the_turnover(metrics):
    table = cost_sensitivity(metrics, variant="splinegpt", tau=0.01)
    assert table.columns == ["Ticker", "Sharpe (0 bps)", "Sharpe (10 bps)", "Days in market", "Ann. Turnover"]
    assert table["Sharpe (10 bps)"][0] == "1.20 ± 0.14"
    assert table["Days in market"][0] == "30 ± 0.0"  # exposure 0.5 of 60 days, both seeds
    assert table["Ann. Turnover"][0] == "40.0x ± 0.0x"


def test_calibration_summary_lists_every_model_and_ticker(metrics):
    table = calibration_summary(metrics, tau=0.01, cost_bps=0.0)
    assert table.height == 4 * 2
    patch_nvda = table.filter((pl.col("Model") == "PatchTST") & (pl.col("Ticker") == "NVDA")).row(0, named=True)
    assert (patch_nvda["Accuracy"], patch_nvda["Brier"], patch_nvda["ECE"]) == ("55.0%", "0.600", "0.050")
    assert table.filter(pl.col("Model") == "RawGPT")["ECE"].to_list() == ["-", "-"]


@pytest.mark.parametrize("empty", ["no rows", "no columns"])
def test_tables_on_empty_metrics_do_not_crash(metrics, empty):
    frame = metrics.clear() if empty == "no rows" else pl.DataFrame()
    assert absolute_performance(frame, 0.01, 0.0).height == 0
    assert risk_adjusted(frame, 0.01, 0.0).height == 0
    assert liquidation_equilibrium(frame, 0.01, 0.0, "NVDA")["Sharpe"].to_list() == ["-"] * 4
    assert tau_sweep(frame, "NVDA", 0.0).height == 0
    assert cost_sensitivity(frame, "splinegpt", 0.01).height == 0
    assert calibration_summary(frame, 0.01, 0.0).height == 0


# --- figures -----------------------------------------------------------------------------------------


def bars_frame(ticker="NVDA") -> pl.DataFrame:
    rng = np.random.default_rng(len(ticker))  # NVDA and PFE get different paths
    close = 100 * np.exp(np.cumsum(rng.normal(0, 0.02, len(DATES))))
    open_ = close * (1 + rng.normal(0, 0.01, len(DATES)))
    high, low = np.maximum(open_, close) * 1.01, np.minimum(open_, close) * 0.99
    volume = rng.integers(1_000_000, 5_000_000, len(DATES)).astype(np.float64)
    return pl.DataFrame(dict(ticker=ticker, date=DATES, open=open_, high=high, low=low, close=close, volume=volume))


def kinematics_frame(ticker="NVDA") -> pl.DataFrame:
    rng = np.random.default_rng(1)
    channels = {c: rng.normal(0, 1, len(DATES)) for c in ("c0", "c1", "c2", "c3", "v0", "v1", "v2", "v3", "v4")}
    return pl.DataFrame(dict(ticker=ticker, date=DATES) | channels)


def predictions_frame() -> pl.DataFrame:
    rng = np.random.default_rng(2)
    parts = []
    for variant in ("splinegpt", "patchtst"):
        for seed in (0, 1):
            probs = rng.dirichlet([1, 1, 1], len(DATES))
            action = probs.argmax(axis=1) if variant == "splinegpt" else np.ones(len(DATES), dtype=int)
            label = rng.integers(-1, 3, len(DATES))
            parts.append(
                pl.DataFrame(
                    dict(variant=variant, tau=0.01, seed=seed, ticker="NVDA", date=DATES, close=bars_frame()["close"])
                    | dict(p_buy=probs[:, 0], p_sell=probs[:, 1], p_hold=probs[:, 2])
                    | dict(action=pl.Series(action, dtype=pl.Int8), label=pl.Series(label, dtype=pl.Int8))
                )
            )
    return pl.concat(parts)


def equity_frame() -> pl.DataFrame:
    parts = []
    for ticker in ("NVDA", "PFE"):
        close = bars_frame(ticker)["close"].to_numpy()
        for variant, tau, seed in (
            ("splinegpt", 0.01, 0),
            ("splinegpt", 0.01, 1),
            ("patchtst", 0.01, 0),
            ("buy_and_hold", None, None),
        ):
            flat = variant == "patchtst"
            parts.append(
                pl.DataFrame(
                    dict(variant=variant, tau=tau, seed=seed, ticker=ticker, cost_bps=0.0, date=DATES)
                    | dict(equity=np.full(len(DATES), 1e4) if flat else 1e4 * close / close[0])
                    | dict(position=pl.Series([0 if flat else 1] * len(DATES), dtype=pl.Int8))
                    | dict(action=pl.Series([1 if flat else 2] * len(DATES), dtype=pl.Int8)),
                    schema_overrides=dict(tau=pl.Float64, seed=pl.Int64),
                )
            )
    return pl.concat(parts)


START, END = DATES[5], DATES[50]


def all_figures(metrics, path_of) -> dict[str, bytes]:
    bars, kin, preds = bars_frame(), kinematics_frame(), predictions_frame()
    return {
        "equity_curves": equity_curves_png(equity_frame(), 0.01, 0.0, path_of("equity_curves")),
        "diagnostics": diagnostics_png(preds, "NVDA", 0.01, path_of("diagnostics")),
        "sweeps": sweeps_png(metrics, "NVDA", path_of("sweeps")),
        "kinematic_manifold": kinematic_manifold_png(bars, kin, "NVDA", START, END, path_of("kinematic_manifold")),
        "responsiveness": responsiveness_png(
            bars, kin, preds, "NVDA", "splinegpt", 0.01, START, END, path_of("responsiveness")
        ),
    }


@pytest.mark.slow  # nightly lane (the fast lane keeps its budget)
def test_figures_are_valid_pngs_and_identical_for_identical_input(metrics, tmp_path):
    first = all_figures(metrics, lambda name: tmp_path / "a" / f"{name}.png")
    second = all_figures(metrics, lambda name: tmp_path / "b" / f"{name}.png")
    for name, png in first.items():
        assert png.startswith(PNG_SIGNATURE), name
        assert len(png) > 20_000, name  # a drawn figure, not the "no data" placeholder
        assert (tmp_path / "a" / f"{name}.png").read_bytes() == png
        assert second[name] == png, name


@pytest.mark.parametrize("empty", ["no rows", "no columns"])
def test_figures_on_empty_inputs_say_no_data_instead_of_crashing(metrics, tmp_path, empty):
    def blank(frame: pl.DataFrame) -> pl.DataFrame:
        return frame.clear() if empty == "no rows" else pl.DataFrame()

    bars, kin, preds = blank(bars_frame()), blank(kinematics_frame()), blank(predictions_frame())
    pngs = [
        equity_curves_png(blank(equity_frame()), 0.01, 0.0, tmp_path / "e.png"),
        diagnostics_png(preds, "NVDA", 0.01, tmp_path / "d.png"),
        sweeps_png(blank(metrics), "NVDA", tmp_path / "s.png"),
        kinematic_manifold_png(bars, kin, "NVDA", START, END, tmp_path / "k.png"),
        responsiveness_png(bars, kin, preds, "NVDA", "splinegpt", 0.01, START, END, tmp_path / "r.png"),
    ]
    assert all(png.startswith(PNG_SIGNATURE) and len(png) > 1_000 for png in pngs)


def test_the_reliability_panel_plots_the_stored_de_weighted_buy_probability():
    from matplotlib.figure import Figure

    from kinematic_pipeline.backtest.metrics import reliability_curve
    from kinematic_pipeline.report.figures import _reliability_panel

    preds = predictions_frame().filter(pl.col("variant") == "splinegpt")
    labelled = preds.filter(pl.col("label") >= 0)
    p_buy = labelled["p_buy"].to_numpy()  # the predictions store p de-weighted: plotted as it is
    ax = Figure().subplots()
    _reliability_panel(ax, {("splinegpt",): preds}, ["splinegpt"])
    mean_p, freq, count = reliability_curve(p_buy, labelled["label"].to_numpy() == 0)
    curve = ax.lines[1]  # after the diagonal
    np.testing.assert_allclose(curve.get_xdata(), mean_p[count > 0])
    np.testing.assert_allclose(curve.get_ydata(), freq[count > 0])
    assert "de-weighted" in ax.get_title()


def test_figures_with_partial_inputs_still_draw(metrics, tmp_path):
    no_kinematics, no_predictions = kinematics_frame().clear(), pl.DataFrame()
    png = responsiveness_png(
        bars_frame(), no_kinematics, no_predictions, "NVDA", "splinegpt", 0.01, START, END, tmp_path / "r.png"
    )
    assert png.startswith(PNG_SIGNATURE)
    only_patch = predictions_frame().filter(pl.col("variant") == "patchtst")
    assert diagnostics_png(only_patch, "NVDA", 0.01, tmp_path / "d.png").startswith(PNG_SIGNATURE)
    only_mkt = metrics.filter(pl.col("variant") == "buy_and_hold")
    assert sweeps_png(only_mkt, "NVDA", tmp_path / "s.png").startswith(PNG_SIGNATURE)


# --- document ----------------------------------------------------------------------------------------


def test_report_has_context_every_table_heading_relative_figures_and_the_conventions(metrics, tmp_path):
    tables = {
        "absolute_performance": absolute_performance(metrics, 0.01, 0.0),
        "risk_adjusted": risk_adjusted(metrics, 0.01, 0.0),
        "liquidation_equilibrium_NVDA": liquidation_equilibrium(metrics, 0.01, 0.0, "NVDA"),
        "tau_sweep": tau_sweep(metrics, "NVDA", 0.0),
        "cost_sensitivity": cost_sensitivity(metrics, "splinegpt", 0.01),
        "calibration": calibration_summary(metrics, 0.01, 0.0).clear(),
        "extra": pl.DataFrame({"a": ["1"]}),
    }
    headings = {name: (f"Title of {name}", caption) for name, caption in TABLE_CAPTIONS.items()}
    report_dir = tmp_path / "reports" / "run1"
    figures = {"sweeps": tmp_path / "reports" / "figures" / "sweeps.png"}
    context = {"profile": "ci", "test period": "2023-01-02 .. 2023-03-02", "run id": "abc123"}
    text = render_report(
        "SplineGPT report", context, tables, figures, CONVENTIONS, report_dir, (), headings, FIGURE_HEADINGS
    )

    assert text.startswith("# SplineGPT report")
    assert "- **run id**: abc123" in text
    for key in set(tables) & set(TABLE_CAPTIONS):  # each table's title, then its caption, keyed by the table's name
        assert f"### Title of {key}" in text and f"\n{TABLE_CAPTIONS[key]}\n" in text, key
    assert "### Title of liquidation_equilibrium (NVDA)" in text
    assert "### extra" in text
    assert "| Ticker | Return: Spline |" in text
    assert f"![{FIGURE_HEADINGS['sweeps'][0]}](../figures/sweeps.png)" in text
    assert text.rstrip().endswith(CONVENTIONS)


def test_a_tasks_tables_and_figures_have_their_own_section_after_the_others(tmp_path):
    tables = {name: pl.DataFrame({"a": [name]}) for name in ("verdict", "paper", "task_vol5_forecasters")}
    figures = {name: tmp_path / f"{name}.png" for name in ("sweeps", "volatility_qlike")}
    text = render_report(
        "r",
        {},
        tables,
        figures,
        CONVENTIONS,
        lead=("verdict",),
        sections={"Next-week volatility": ("task_vol", "volatility_")},
    )
    order = [
        text.index(h)
        for h in (
            "## Verdict",
            "## Tables",
            "### paper",
            "## Figures",
            "### sweeps",
            "## Next-week volatility",
            "### task_vol5_forecasters",
            "### volatility_qlike",
            "## Conventions",
        )
    ]
    assert order == sorted(order)
    assert text.count("## Next-week volatility") == 1
    plain = render_report("r", {}, tables, figures, CONVENTIONS)  # no sections: every table under Tables, as before
    assert "## Next-week volatility" not in plain and plain.index("### task_vol5_forecasters") < plain.index(
        "## Figures"
    )


def test_report_without_tables_or_figures_still_states_the_conventions():
    text = render_report("empty", {}, {}, {}, CONVENTIONS)
    assert CONVENTIONS in text and "## Conventions" in text


def test_orchestration_metadata_reuses_the_report_markdown_helpers():
    from kinematic_pipeline.orchestration import metadata
    from kinematic_pipeline.report import markdown

    assert metadata.markdown_table is markdown.markdown_table
    assert metadata.embedded_image is markdown.embedded_image


def test_report_package_never_imports_dagster():
    code = "import sys, kinematic_pipeline.report\nprint('dagster' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_percent_formatting_matches_the_paper():
    from kinematic_pipeline.report.tables import format_percent

    assert [format_percent(x) for x in (2.404, -0.347, 0.0, -1e-6)] == ["+240.4%", "-34.7%", "0.0%", "0.0%"]


def test_the_papers_sharpe_of_a_nearly_flat_record_reads_na_below_the_minimum_days_in_market():
    """One day long in 1,008: the paper's convention gives -307 (rf subtracted, cash earning nothing); the table
    prints N/A with the days in the market beside it, and a record long on enough days keeps its Sharpe."""
    from kinematic_pipeline.report.tables import with_days_in_market

    rows = [
        metric_row(ticker="NVDA", days=1008, exposure=1 / 1008, sharpe=-307.0, sortino=-20.0),
        metric_row(ticker="XOM", days=1008, exposure=0.5, sharpe=0.8, sortino=1.1),
    ]
    masked = with_days_in_market(metrics_frame(rows), EvalConfig().min_days_in_market)
    table = risk_adjusted(masked, 0.01, 0.0)
    nvda, xom = (table.filter(pl.col("Ticker") == t).row(0, named=True) for t in ("NVDA", "XOM"))
    assert (nvda["Sharpe: Spline"], nvda["Sortino: Spline"], nvda["Days in market: Spline"]) == ("N/A", "N/A", "1")
    assert (xom["Sharpe: Spline"], xom["Days in market: Spline"]) == ("0.80", "504")


def test_the_equity_figure_counts_the_seeds_the_models_were_trained_with_not_a_baselines_zero():
    from kinematic_pipeline.report.figures import trained_seeds

    rows = pl.DataFrame(
        {
            "variant": ["splinegpt", "splinegpt", "rawgpt", "momentum_1d", "lr_spline"],
            "seed": [1234, 1235, 1234, 0, 0],
        }
    )
    assert trained_seeds(rows) == [1234, 1235]  # two, not three: the baselines' seed 0 is not a training seed
    assert trained_seeds(rows.filter(pl.col("seed") == 0)) == [] and trained_seeds(rows.clear()) == []


def test_the_answers_section_is_cut_from_the_report_as_materialize_prints_it():
    from kinematic_pipeline.report.answers import answers_section

    report = "\n".join(
        [
            "# Report",
            "",
            "## Answers",
            "",
            "One line per question (the note).",
            "",
            "- **Q1?** no evidence: ...",
            "- **Q2?** yes: ...",
            "",
            "## Context",
            "",
            "- **profile**: ci",
        ]
    )
    assert answers_section(report) == ["- **Q1?** no evidence: ...", "- **Q2?** yes: ..."]
    assert answers_section("# Report\n\n## Context\n\n- **profile**: ci") == []


def test_materialize_ends_on_three_answers_the_volatility_tasks_where_the_run_has_it():
    """Issue 56: the end of ``make demo`` is the three lines that answer the report's questions (strategies against
    Buy & Hold, a forecaster against its references, spline tokens against the others), cut from the demo's Answers
    section; a run of Buy/Sell/Hold alone answers the last two with its next-day direction rows; none matched: none."""
    from kinematic_pipeline.report.answers import first_screen

    negative = "Next-day direction (the negative control): "
    lines = [
        "- **Does any strategy beat Buy & Hold after costs (10 bps a side) and taxes?** yes: SPA rejects ...",
        "- **Is the best strategy's Sharpe above the average trial's Sharpe by more than the luck of N trials?** no",
        f"- **{negative}Does any model's score rank the next day's returns (rank IC > 0)?** yes: lightgbm_fd ...",
        f"- **{negative}Do spline tokens carry more information than finite differences (or raw values)?** yes in 2",
        "- **Does a learned forecaster beat HAR and GARCH on next-5-session variance (QLIKE)?** yes: lightgbm_spline",
        "- **Do spline tokens beat finite differences on next-5-session variance (QLIKE)?** no evidence: fewer than 3",
        "- **Do spline tokens beat finite differences on next-5-session variance (vol-rank IC)?** no evidence: ...",
    ]
    assert first_screen(lines) == [lines[0], lines[4], lines[5]]
    direction_only = [line.replace(negative, "") for line in lines[:4]]
    assert first_screen(direction_only) == [direction_only[0], direction_only[2], direction_only[3]]
    assert first_screen(["- **Q1?** no evidence: ...", "no question here"]) == []
