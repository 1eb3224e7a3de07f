"""The paper's tables under both argmax rules, their captions, and what each label says about its rule: a hand-made
run whose raw softmax buys while its calibrated argmax never does; the Buy threshold ln(w_sell/w_buy) of the weights
passed; the tau sweep's test period per tau; the skill intervals' block from the settings."""

from __future__ import annotations

import dataclasses
import datetime as dt

import numpy as np
import polars as pl
import pytest

from kinematic_pipeline.config import EvalConfig, load_settings
from kinematic_pipeline.report import tau_sweep
from kinematic_pipeline.stages import report
from kinematic_pipeline.stages.oracle_control import RULE_LABELS
from kinematic_pipeline.stages.pooled import PAPER_BACKTESTS
from kinematic_pipeline.stages.report_titles import (
    ALL_TITLES,
    FIGURE_HEADINGS,
    RULE_TABLES,
    SEE_RULES,
    all_titles,
    convention_notes,
    rule_caption,
    table_headings,
)
from kinematic_pipeline.warehouse import BACKTESTS
from kinematic_pipeline_tests.helpers.frames import ALWAYS_SELL, DATES, metric_row, metrics_frame

TICKERS = ("NVDA", "PFE")
PAPER, CALIBRATED = RULE_LABELS["paper"], RULE_LABELS["calibrated"]


def _settings(tmp_path, class_weights=(2.0, 10.0, 1.0), block_days: int = 20):
    settings = load_settings("ci", warehouse=tmp_path / "wh", env={})
    return dataclasses.replace(
        settings,
        train=dataclasses.replace(settings.train, class_weights=class_weights),
        evaluate=dataclasses.replace(
            settings.evaluate,
            report_tau=0.01,
            report_cost_bps=0.0,
            focus_ticker="NVDA",
            skill_bootstrap_block_days=block_days,
        ),
    )


def _records(buys: bool) -> pl.DataFrame:
    """SplineGPT's pooled records at tau 1% and no cost on both tickers, two seeds: long on half the days with 20
    Buys (``buys``: the raw softmax's argmax), or selling every day (its calibrated argmax); Buy & Hold beside."""
    rows = [metric_row("buy_and_hold", ticker=t, total_return=0.3) for t in TICKERS]
    for ticker in TICKERS:
        for seed in (0, 1):
            own = {} if buys else ALWAYS_SELL
            rows.append(metric_row("splinegpt", 0.01, seed, ticker, **own))
    return metrics_frame(rows)


@pytest.fixture
def built(tmp_path, monkeypatch):
    """``rule_tables`` of the hand-made run: the pooled records read by name, no equity curves."""
    pooled = {PAPER_BACKTESTS: _records(buys=True).filter(pl.col("variant") != "buy_and_hold")}
    pooled[BACKTESTS] = _records(buys=False)
    monkeypatch.setattr(report, "read_pooled", lambda settings, name: pooled.get(name, pl.DataFrame()))
    monkeypatch.setattr(report, "portfolio_summaries", lambda settings, equity, by: None)
    return report.rule_tables(_settings(tmp_path))


def test_every_paper_table_stacks_both_rules_and_only_the_raw_argmax_buys(built):
    tables, metrics = built
    for name in RULE_TABLES:
        assert tables[name].columns[0] == "Rule", name
        assert tables[name]["Rule"].unique(maintain_order=True).to_list() == [PAPER, CALIBRATED], name
    assert "Rule" not in tables["paper_comparison"].columns  # one table, not a table per rule
    spline = tables["liquidation_equilibrium"].filter(pl.col("Model") == "SplineGPT")
    by_rule = {row["Rule"]: row for row in spline.iter_rows(named=True)}
    assert (by_rule[PAPER]["Buy"], by_rule[PAPER]["Liquidation Equilibrium"]) == ("20 ± 0.0", "no")
    assert (by_rule[CALIBRATED]["Buy"], by_rule[CALIBRATED]["Sell"]) == ("0 ± 0.0", "60 ± 0.0")
    assert (by_rule[CALIBRATED]["Liquidation Equilibrium"], by_rule[CALIBRATED]["Sharpe"]) == ("yes", "N/A")
    risk = tables["risk_adjusted"].filter(pl.col("Ticker") == "NVDA")
    sharpe = dict(zip(risk["Rule"].to_list(), risk["Sharpe: Spline"].to_list()))
    assert sharpe == {PAPER: "1.50 ± 0.00", CALIBRATED: "N/A"}
    assert set(risk["Sharpe: Mkt"].to_list()) == {"1.50"}  # Buy & Hold rides with both rules' rows
    # what the evidence tables read: the calibrated argmax's records, which never buy
    assert metrics.filter(pl.col("variant") == "splinegpt")["n_buy"].to_list() == [0] * 4


@pytest.mark.parametrize(
    ("weights", "ratio", "threshold"), [((2.0, 10.0, 1.0), "ln(10/2)", 1.609), ((1.0, 4.0, 1.0), "ln(4/1)", 1.386)]
)
def test_the_caption_names_each_rule_and_the_buy_threshold_of_the_weights_passed(tmp_path, weights, ratio, threshold):
    assert np.log(weights[1] / weights[0]) == pytest.approx(threshold, abs=5e-4)
    settings = _settings(tmp_path, class_weights=weights)
    caption = rule_caption(settings)
    assert f"Rule '{PAPER}' is the paper's (its top class, never calibrated)" in caption
    assert f"rule '{CALIBRATED}' takes the argmax of the same softmax after calibration" in caption
    assert f"ln(p_buy/p_sell) > ln(w_sell/w_buy) = {ratio} = {threshold:.2f}" in caption
    assert f"With w = {weights}" in caption
    other = 1.39 if threshold > 1.5 else 1.61
    assert f"= {other:.2f} and" not in caption  # not the other weights' threshold, nor a fixed ln 5
    assert caption in convention_notes(settings)["decision rules"]  # stated once, in the Conventions
    for name, (title, table_caption) in table_headings(settings).items():
        assert caption not in title and caption not in table_caption, name
        assert (SEE_RULES in table_caption) == (name in RULE_TABLES), name


def test_the_tau_sweep_gives_each_tau_its_own_test_period():
    """tau 0.5% swept on the last fold only (from day 30), 1% on every test day: each row says which."""
    late = dict(first_date=DATES[30], days=30)
    rows = [metric_row("splinegpt", 0.005, 0, "NVDA", **late), metric_row("splinegpt", 0.01, 0, "NVDA")]
    table = tau_sweep(metrics_frame(rows), ticker="NVDA", cost_bps=0.0)
    assert table.columns[:2] == ["tau", "Test period"]
    assert table["tau"].to_list() == ["0.50%", "1.00%"]
    assert table["Test period"].to_list() == [f"{DATES[30]} .. {DATES[-1]}", f"{DATES[0]} .. {DATES[-1]}"]
    assert DATES[30] == dt.date(2023, 2, 1)


def test_labels_of_the_calibrated_argmax_never_call_it_the_papers_rule(tmp_path):
    settings = _settings(tmp_path)
    titles, headings = all_titles(settings), table_headings(settings)
    assert "under the calibrated argmax" in titles["decisions"]
    assert "paper, calibrated argmax, margin" in titles["decision_rules"]
    assert "the margin rule" in headings["decision_rules"][1]
    assert "the paper's rule, the argmax of the network's own softmax" in convention_notes(settings)["figures"]
    for name, (title, caption) in headings.items():
        assert "paper's weighted argmax" not in title + caption, name
    # the paper's figures show the calibrated argmax only, and say so
    for name in ("equity_curves", "diagnostics", "sweeps", "responsiveness", "decision_rules"):
        assert "calibrated argmax" in FIGURE_HEADINGS[name][1], name
        assert "weighted argmax" not in FIGURE_HEADINGS[name][1], name


@pytest.mark.parametrize("days", [1, 19, 61])
def test_the_skill_bootstrap_block_outside_20_to_60_trading_days_is_refused(days):
    with pytest.raises(ValueError, match=rf"evaluate.skill_bootstrap_block_days={days}: expected 20-60 trading days"):
        EvalConfig(skill_bootstrap_block_days=days)


def test_the_conventions_state_the_block_the_settings_use_and_the_skill_captions_refer_to_it(tmp_path):
    assert EvalConfig(skill_bootstrap_block_days=60).skill_bootstrap_block_days == 60
    settings = _settings(tmp_path, block_days=40)
    assert "bootstrap of 40-trading-day blocks" in convention_notes(settings)["skill intervals"]
    assert "bootstrap of 20-trading-day blocks" in convention_notes(_settings(tmp_path))["skill intervals"]
    headings = table_headings(settings)
    for name in ("information", "scaling_curves"):
        assert "(Conventions: skill intervals)" in headings[name][1], name
        assert "-trading-day" not in headings[name][1], name
    assert set(all_titles(settings)) == set(ALL_TITLES)
