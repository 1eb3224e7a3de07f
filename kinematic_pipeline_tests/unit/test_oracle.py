"""The informed (oracle) policy on the synthetic source: the predictions schema, causality, and a skill far
above a base-rate predictor's on the realized labels."""

from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl
import pytest

from kinematic_pipeline.backtest.oracle import (
    ORACLE,
    close_labels,
    latent_drift,
    oracle_predictions,
    skill_table,
)
from kinematic_pipeline.backtest.sweep import run_sweep
from kinematic_pipeline.config import SyntheticConfig
from kinematic_pipeline.paper_conventions import BacktestConfig
from kinematic_pipeline.sources.synthetic import SyntheticSource
from kinematic_pipeline.tasks.actions import BUY, HOLD, SELL, UNKNOWN_LABEL
from kinematic_pipeline.tasks.buy_sell_hold import PREDICTIONS_SCHEMA

START, END = dt.date(2021, 1, 4), dt.date(2022, 12, 30)
TEST_START = dt.date(2022, 1, 3)


@pytest.fixture(scope="module")
def universe() -> tuple[pl.DataFrame, pl.DataFrame]:
    source = SyntheticSource(SyntheticConfig(n_tickers=8), START, END)
    return source.ground_truth(), source.read(START, END)


def _accuracy_and_base_rate(frame: pl.DataFrame) -> tuple[float, float]:
    labelled = frame.filter(pl.col("label") != UNKNOWN_LABEL)
    labels = labelled["label"].to_numpy()
    return float((labelled["action"].to_numpy() == labels).mean()), float(np.bincount(labels).max() / labels.size)


@pytest.mark.parametrize("drift", ["velocity", "close"])
def test_oracle_predictions_have_the_schema_no_nan_and_one_row_per_ticker_and_day(universe, drift):
    truth, bars = universe
    days = [d for d in bars["date"].unique().sort().to_list() if d >= TEST_START]
    frame = oracle_predictions(truth, bars, 0.01, days=days, drift=drift)
    assert frame.schema == pl.Schema(PREDICTIONS_SCHEMA)
    assert frame.null_count().sum_horizontal().item() == 0
    assert not frame.select(pl.col(pl.Float32, pl.Float64).is_nan().any()).to_numpy().any()
    expected = bars.filter(pl.col("date") >= TEST_START).select("ticker", "date").sort("ticker", "date")
    assert frame.select("ticker", "date").equals(expected)  # one row per (ticker, day) with a bar, sorted
    assert set(frame["variant"]) == {ORACLE} and set(frame["tau"]) == {0.01} and set(frame["seed"]) == {0}
    probs = frame.select("p_buy", "p_sell", "p_hold").to_numpy()
    assert np.array_equal(probs.sum(axis=1), np.ones(frame.height, dtype=np.float32))  # one-hot
    assert np.array_equal(probs.argmax(axis=1), frame["action"].to_numpy())  # action = argmax
    # Only each ticker's last session has no realized label.
    assert frame.filter(pl.col("label") == UNKNOWN_LABEL).height == frame["ticker"].n_unique()


def test_the_action_follows_the_sign_and_size_of_the_latent_velocity_against_tau():
    truth = pl.DataFrame(
        {
            "ticker": ["A"] * 4,
            "date": [dt.date(2023, 1, 3) + dt.timedelta(days=i) for i in range(4)],
            "position": [4.0, 4.02, 4.0, 4.0],
            "velocity": [0.02, -0.02, 0.005, -0.01],
        }
    )
    bars = truth.select("ticker", "date", pl.col("position").exp().alias("close"))
    frame = oracle_predictions(truth, bars, 0.01)
    assert frame["action"].to_list() == [BUY, SELL, HOLD, HOLD]  # |v| = tau is Hold, as in the label rule
    assert frame["label"].to_list() == [BUY, SELL, HOLD, UNKNOWN_LABEL]  # ln C: 4.0, 4.02, 4.0, 4.0
    drift = latent_drift(truth, bars.with_columns(pl.col("close") * np.exp(0.03)), drift="close")
    assert drift["drift"].to_list() == pytest.approx([0.02 - 0.03, -0.02 - 0.03, 0.005 - 0.03, -0.01 - 0.03])


def test_the_action_of_day_t_uses_nothing_after_t(universe):
    truth, bars = universe
    cut = dt.date(2022, 6, 15)
    full = oracle_predictions(truth, bars, 0.005).filter(pl.col("date") <= cut)
    # Latent states and bars after t replaced by garbage: every action up to t is unchanged.
    later = pl.col("date") > cut
    noisy_truth = truth.with_columns(pl.when(later).then(pl.col("velocity") * -7.0).otherwise(pl.col("velocity")))
    noisy_bars = bars.with_columns(pl.when(later).then(pl.col("close") * 3.0).otherwise(pl.col("close")))
    cut_off = oracle_predictions(noisy_truth, noisy_bars, 0.005).filter(pl.col("date") <= cut)
    assert cut_off["action"].equals(full["action"])
    assert cut_off.select("p_buy", "p_sell", "p_hold").equals(full.select("p_buy", "p_sell", "p_hold"))


@pytest.mark.parametrize(("drift", "margin"), [("velocity", 0.10), ("close", 0.20)])
@pytest.mark.parametrize("tau", [0.0025, 0.005])
def test_on_the_synthetic_source_the_oracle_is_far_above_a_base_rate_predictor(universe, drift, margin, tau):
    truth, bars = universe
    frame = oracle_predictions(truth, bars, tau, drift=drift)
    accuracy, base_rate = _accuracy_and_base_rate(frame)
    assert accuracy > base_rate + margin, (accuracy, base_rate)


def test_given_labels_are_used_and_missing_ones_read_unknown(universe):
    truth, bars = universe
    labels = close_labels(bars, 0.01).filter(pl.col("date") < dt.date(2022, 1, 1))
    frame = oracle_predictions(truth, bars, 0.01, labels=labels)
    assert (frame.filter(pl.col("date") >= dt.date(2022, 1, 1))["label"] == UNKNOWN_LABEL).all()
    assert frame.filter(pl.col("date") < dt.date(2022, 1, 1))["label"].equals(labels.sort("ticker", "date")["label"])


def test_the_skill_table_puts_each_variant_between_the_base_rate_and_the_oracle(universe):
    truth, bars = universe
    oracle = oracle_predictions(truth, bars, 0.005)
    rng = np.random.default_rng(0)
    coin = oracle.with_columns(  # a policy that guesses at random
        pl.lit("splinegpt").alias("variant"), pl.Series("action", rng.integers(0, 3, oracle.height), dtype=pl.Int8)
    )
    table = skill_table(pl.concat([oracle, coin]))
    rows = {r["variant"]: r for r in table.iter_rows(named=True)}
    assert rows[ORACLE]["share_of_oracle_edge"] == pytest.approx(1.0)
    assert rows["splinegpt"]["accuracy"] == pytest.approx(1 / 3, abs=0.03)
    assert rows["splinegpt"]["share_of_oracle_edge"] < 0  # worse than the constant predictor
    assert rows[ORACLE]["base_rate"] == rows["splinegpt"]["base_rate"]
    assert skill_table(oracle.clear()).is_empty()


def test_the_oracle_predictions_backtest_like_any_policy(universe):
    truth, bars = universe
    frame = oracle_predictions(truth, bars, 0.005, days=[d for d in bars["date"].unique() if d >= TEST_START])
    metrics = run_sweep(frame, BacktestConfig(costs_bps=(0.0,), bootstrap_resamples=0)).metrics
    assert set(metrics["variant"]) >= {ORACLE}
    oracle_rows = metrics.filter(pl.col("variant") == ORACLE)
    assert oracle_rows.height == frame["ticker"].n_unique()
    assert oracle_rows["accuracy"].is_finite().all()
