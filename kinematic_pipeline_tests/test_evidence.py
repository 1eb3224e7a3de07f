"""Per-policy frames (backtest/evidence.py) over a predictions frame: one row per (variant, tau, seed), the
same numbers as the array functions, days resampled as dates, rows independent of the other policies."""

from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl
import pytest

from kinematic_pipeline.backtest import decisions as d
from kinematic_pipeline.backtest import skill as s
from kinematic_pipeline.backtest.evidence import decision_frame, skill_frame
from kinematic_pipeline.backtest.sweep import INPUT_SCHEMA, bootstrap_seed

# the predictions frame as stages.evaluate writes it (float32 probabilities), without importing torch
PREDICTIONS_SCHEMA = INPUT_SCHEMA | {"p_buy": pl.Float32, "p_sell": pl.Float32, "p_hold": pl.Float32}
W = (2.0, 10.0, 1.0)
RATES = {0.01: np.array([0.25, 0.23, 0.52]), 0.02: np.array([0.15, 0.13, 0.72])}


def _predictions(variants=("splinegpt", "rawgpt"), taus=(0.01, 0.02), n_days=15, tickers=("A", "B", "C")):
    rng = np.random.default_rng(0)
    rows = []
    for v in variants:
        for tau in taus:
            for ticker in tickers:
                for k in range(n_days):
                    q = rng.dirichlet([1, 1, 1])
                    label = int(rng.integers(-1, 3))
                    rows.append(
                        (v, tau, 0, ticker, dt.date(2023, 1, 2) + dt.timedelta(k), 100.0, *q, int(q.argmax()), label)
                    )
    return pl.DataFrame(rows, schema=PREDICTIONS_SCHEMA, orient="row")


def test_skill_frame_has_one_row_per_policy_with_the_numbers_of_skill_table():
    preds = _predictions()
    frame = skill_frame(preds, RATES, W, n_boot=50, boot_seed=3)
    assert frame.select("variant", "tau", "seed").rows() == [
        ("rawgpt", 0.01, 0),
        ("rawgpt", 0.02, 0),
        ("splinegpt", 0.01, 0),
        ("splinegpt", 0.02, 0),
    ]
    group = preds.filter(variant="splinegpt", tau=0.02).sort("ticker", "date")
    q = group.select("p_buy", "p_sell", "p_hold").to_numpy().astype(np.float64)
    want = s.skill_table(
        d.unweighted_probabilities(q, W),
        group["label"].to_numpy(),
        group["date"].to_physical().to_numpy(),
        RATES[0.02],
        n_boot=50,
        seed=bootstrap_seed(3, ("splinegpt", 0.02, 0)),
    )
    got = frame.filter(variant="splinegpt", tau=0.02).row(0, named=True)
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-12, nan_ok=True), k
    assert got["n_days"] == 15  # three tickers per date, resampled together


def test_a_policys_row_does_not_depend_on_the_other_policies():
    preds = _predictions()
    both = skill_frame(preds, RATES, W, n_boot=40)
    alone = skill_frame(
        preds.filter(variant="rawgpt", tau=0.02).sample(fraction=1.0, shuffle=True, seed=1), RATES, W, n_boot=40
    )
    assert both.filter(variant="rawgpt", tau=0.02).equals(alone)


def test_decision_frame_names_a_cause_per_policy_and_refuses_a_tau_without_rates():
    preds = _predictions()
    always_sell = preds.with_columns(
        p_buy=pl.lit(0.05, pl.Float32),
        p_sell=pl.lit(0.9, pl.Float32),
        p_hold=pl.lit(0.05, pl.Float32),
        action=pl.lit(1, pl.Int8),
    )
    frame = decision_frame(
        pl.concat([preds.filter(variant="rawgpt"), always_sell.filter(variant="splinegpt")]), RATES, W
    )
    assert frame.height == 4 and "class_weights" not in frame.columns
    causes = dict(zip(frame["variant"] + "@" + frame["tau"].cast(str), frame["liquidation_cause"]))
    assert causes["rawgpt@0.01"].startswith("No Liquidation Equilibrium")
    assert causes["splinegpt@0.01"].startswith(
        "Class weighting: the no-information action under weights [2, 10, 1] is Sell"
    )
    assert frame.filter(variant="splinegpt")["share_differs_from_no_information"].to_list() == [0.0, 0.0]
    with pytest.raises(ValueError, match="tau=0.02"):
        decision_frame(preds, {0.01: RATES[0.01]}, W)
    with pytest.raises(ValueError, match="lacks the columns"):
        skill_frame(preds.drop("label"), RATES, W)
