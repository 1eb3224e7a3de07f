"""Per-policy frames (backtest/policy_frames.py) over a predictions frame: one row per (variant, tau, seed), or per
(variant, tau) for the seed mean, the same numbers as the array functions, days resampled as dates, rows
independent of the other policies."""

from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl
import pytest

from kinematic_pipeline.backtest import skill as s
from kinematic_pipeline.backtest.policy_frames import SkillOptions, decision_frame, seed_mean_skill_frame, skill_frame
from kinematic_pipeline.backtest.skill_seeds import seed_mean_skill
from kinematic_pipeline.backtest.sweep import INPUT_SCHEMA, bootstrap_seed
from kinematic_pipeline.tasks.actions import PROB_COLUMNS, stored_probabilities

# the predictions frame as stages.predict writes it (the float32 softmax q de-weighted: p), without importing torch
PREDICTIONS_SCHEMA = INPUT_SCHEMA
W = (2.0, 10.0, 1.0)


def _with_softmax(frame: pl.DataFrame, q) -> pl.DataFrame:
    """``frame`` with p the de-weighted softmax ``q`` ((3,) on every row, or (n, 3)), as the predictions store it."""
    q = np.broadcast_to(np.asarray(q, dtype=np.float64), (frame.height, 3))
    p = stored_probabilities(q, W)
    return frame.with_columns(*[pl.Series(c, p[:, k]) for k, c in enumerate(PROB_COLUMNS)])


RATES = {0.01: np.array([0.25, 0.23, 0.52]), 0.02: np.array([0.15, 0.13, 0.72])}


def _predictions(variants=("splinegpt", "rawgpt"), taus=(0.01, 0.02), n_days=15, tickers=("A", "B", "C"), seeds=(0,)):
    rng = np.random.default_rng(0)
    rows = []
    for v in variants:
        for tau in taus:
            for seed in seeds:
                for ticker in tickers:
                    for k in range(n_days):
                        q = rng.dirichlet([1, 1, 1])
                        label = int(rng.integers(-1, 3))
                        day = dt.date(2023, 1, 2) + dt.timedelta(k)
                        rows.append((v, tau, seed, ticker, day, 100.0, *q, int(q.argmax()), label))
    frame = pl.DataFrame(rows, schema=PREDICTIONS_SCHEMA, orient="row")
    return _with_softmax(frame, frame.select(PROB_COLUMNS).to_numpy())  # the rows' q, stored as p


def _arrays(group: pl.DataFrame, label_column: str = "label"):
    """(p, labels, days, actions) of one policy's rows as skill_frame orders them (date, ticker)."""
    group = group.sort("date", "ticker")
    p = group.select("p_buy", "p_sell", "p_hold").to_numpy()
    days = group["date"].to_physical().to_numpy()
    return p, group[label_column].to_numpy(), days, group["action"].to_numpy()


def test_skill_frame_has_one_row_per_policy_with_the_numbers_of_skill_table():
    preds = _predictions()
    frame = skill_frame(preds, RATES, SkillOptions(n_boot=50, boot_seed=3))
    assert frame.select("variant", "tau", "seed").rows() == [
        ("rawgpt", 0.01, 0),
        ("rawgpt", 0.02, 0),
        ("splinegpt", 0.01, 0),
        ("splinegpt", 0.02, 0),
    ]
    p, labels, days, actions = _arrays(preds.filter(variant="splinegpt", tau=0.02))
    want = s.skill_table(
        p, labels, days, RATES[0.02], actions=actions, n_boot=50, seed=bootstrap_seed(3, ("splinegpt", 0.02, 0))
    )
    got = frame.filter(variant="splinegpt", tau=0.02).row(0, named=True)
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-12, nan_ok=True), k
    assert got["n_days"] == 15  # three tickers per date, resampled together


def test_a_policys_row_does_not_depend_on_the_other_policies():
    preds = _predictions()
    both = skill_frame(preds, RATES, SkillOptions(n_boot=40))
    alone = skill_frame(
        preds.filter(variant="rawgpt", tau=0.02).sample(fraction=1.0, shuffle=True, seed=1),
        RATES,
        SkillOptions(n_boot=40),
    )
    assert both.filter(variant="rawgpt", tau=0.02).equals(alone)


def test_decision_frame_names_a_cause_per_policy_and_refuses_a_tau_without_rates():
    preds = _predictions()
    always_sell = _with_softmax(preds, [0.05, 0.9, 0.05]).with_columns(action=pl.lit(1, pl.Int8))
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
        skill_frame(preds.drop("label"), RATES)


def test_the_seed_mean_frame_of_one_seed_is_skill_table_under_the_variant_and_tau_draws():
    preds = _predictions()
    frame = seed_mean_skill_frame(preds, RATES, SkillOptions(n_boot=50, boot_seed=3))
    assert frame.select("variant", "tau", "n_seeds").rows() == [
        ("rawgpt", 0.01, 1),
        ("rawgpt", 0.02, 1),
        ("splinegpt", 0.01, 1),
        ("splinegpt", 0.02, 1),
    ]
    p, labels, days, actions = _arrays(preds.filter(variant="rawgpt", tau=0.01))
    seed = bootstrap_seed(3, ("rawgpt", 0.01))  # one draw per (variant, tau), shared by its seeds
    want = s.skill_table(p, labels, days, RATES[0.01], actions=actions, n_boot=50, seed=seed)
    got = frame.filter(variant="rawgpt", tau=0.01).row(0, named=True)
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-12, nan_ok=True), k


def test_the_seed_mean_frame_pools_the_seeds_of_a_policy_under_one_draw():
    preds = _predictions(variants=("splinegpt",), taus=(0.01,), seeds=(1, 2, 3))
    got = seed_mean_skill_frame(preds, RATES, SkillOptions(n_boot=40, boot_seed=1)).row(0, named=True)
    seeds = [_arrays(preds.filter(seed=k)) for k in (1, 2, 3)]
    want = seed_mean_skill(
        *([x[i] for x in seeds] for i in range(3)),
        RATES[0.01],
        actions=[x[3] for x in seeds],
        n_boot=40,
        seed=bootstrap_seed(1, ("splinegpt", 0.01)),
    )
    assert got["n_seeds"] == 3
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-12, nan_ok=True), k


def test_a_policy_that_sells_while_its_probabilities_say_hold_is_scored_on_its_actions():
    # q = w p / sum(w p) with p = (0.25, 0.2, 0.55): the weighted argmax (the action) is Sell, the argmax of
    # the de-weighted p is Hold. Labels are Buy or Hold only, so the policy recalls nothing (0) and the
    # argmax of p recalls every Hold (1/2 over the two classes present).
    preds = _predictions(variants=("splinegpt",), taus=(0.01,))
    q = np.array(W) * np.array([0.25, 0.2, 0.55])
    q /= q.sum()
    preds = _with_softmax(preds, q).with_columns(
        action=pl.lit(1, pl.Int8),
        label=pl.when(pl.col("label") == 1).then(2).otherwise(pl.col("label")).cast(pl.Int8),
    )
    row = seed_mean_skill_frame(preds, RATES, SkillOptions(n_boot=30)).row(0, named=True)
    assert row["policy_balanced_accuracy"] == 0.0 and row["policy_balanced_accuracy_ci_high"] == 0.0
    assert row["balanced_accuracy"] == pytest.approx(0.5)
    n_buy, n_hold = (preds["label"] == 0).sum(), (preds["label"] == 2).sum()
    assert row["macro_f1"] == pytest.approx((0 + 2 * n_hold / (2 * n_hold + n_buy)) / 2)  # F1 of Buy, Hold
    assert skill_frame(preds, RATES, SkillOptions(n_boot=0))["policy_balanced_accuracy"].to_list() == [0.0]


def test_other_label_columns_are_scored_with_their_own_base_rates():
    preds = _predictions(variants=("splinegpt",), taus=(0.01,))
    flipped = preds.with_columns(label_close=pl.when(pl.col("label") >= 0).then(2 - pl.col("label")).otherwise(-1))
    on_label = seed_mean_skill_frame(flipped, RATES, SkillOptions(n_boot=0))
    on_close = seed_mean_skill_frame(flipped, RATES, SkillOptions(n_boot=0, label_column="label_close"))
    assert on_label["brier"].item() != on_close["brier"].item()
    p, labels, days, actions = _arrays(flipped, "label_close")
    want = s.skill_table(p, labels, days, RATES[0.01], actions=actions, n_boot=0)
    assert on_close["brier_skill"].item() == pytest.approx(want["brier_skill"], rel=1e-12)
    with pytest.raises(ValueError, match="label_close"):
        seed_mean_skill_frame(preds, RATES, SkillOptions(label_column="label_close"))
