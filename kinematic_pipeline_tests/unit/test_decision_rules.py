"""The paper's rule next to the calibrated argmax, and what either can do with perfect information (issue 38).

Answers known by hand: a softmax whose own argmax buys while its calibrated argmax does not; the oracle of a planted
universe at IC 0.1, which the class-weighted argmax never buys (w = (2, 10, 1) needs a one-day expected return of
about 0.53-0.77 sd) while the margin rule does; the implied thresholds themselves.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl
import pytest

from kinematic_pipeline.backtest.calibration import Calibration, calibrate_predictions
from kinematic_pipeline.backtest.decisions import buy_threshold
from kinematic_pipeline.backtest.oracle import (
    conditional_class_probabilities,
    conditional_oracle_predictions,
    least_buying_drift,
)
from kinematic_pipeline.backtest.sweep import run_sweep
from kinematic_pipeline.config import load_settings
from kinematic_pipeline.folds import Fold
from kinematic_pipeline.paper_conventions import PAPER
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.predictors.base import purge_labels
from kinematic_pipeline.report import tables
from kinematic_pipeline.sources.synthetic import PLANTED_NOISE
from kinematic_pipeline.tasks.actions import BUY, SELL, SOFTMAX_COLUMNS, UNKNOWN_LABEL
from kinematic_pipeline.tasks.buy_sell_hold import BuySellHold, predictions_frame
from kinematic_pipeline.tasks.rules import CalibratedArgmax, PaperArgmax

PAPER_WEIGHTS = (2.0, 10.0, 1.0)


def _frame(q: np.ndarray, days: int = 40) -> pl.DataFrame:
    dates = [dt.date(2022, 1, 3) + dt.timedelta(days=k) for k in range(days)]
    rows = pl.DataFrame(
        {
            "ticker": ["AAA"] * days,
            "date": dates,
            "close": 100.0 * np.exp(np.cumsum(np.full(days, 0.001))),
            "label_tau": np.zeros(days, dtype=np.int8),
        }
    )
    q = np.tile(q, (days, 1)).astype(np.float32)  # a model's softmax, trained with the paper's weights
    return predictions_frame(rows, ("splinegpt", 0.01, 1234), q, "label_tau", PAPER_WEIGHTS)


def test_the_papers_rule_buys_on_the_raw_softmax_where_the_calibrated_argmax_does_not():
    # q_buy is the model's top class; a calibration that lifts Sell by 1.0 makes Sell the calibrated top class
    lift_sell = Calibration(1.0, (0.0, 1.0, 0.0), 100, 1, 1, True)
    frame = calibrate_predictions(_frame(np.array([0.5, 0.3, 0.2])), lift_sell, PAPER_WEIGHTS)
    assert (frame["action"] == SELL).all()  # the calibrated argmax: 0.5 vs 0.3 e = 0.82
    assert (CalibratedArgmax(PAPER_WEIGHTS).actions(frame) == SELL).all()  # the weights applied to the stored p
    assert frame["softmax_buy"].to_list() == pytest.approx([0.5] * frame.height)  # the model's own, kept
    paper = PaperArgmax(PAPER_WEIGHTS).decide(frame)
    own_p = 0.5 / 2 / (0.5 / 2 + 0.3 / 10 + 0.2 / 1)  # its own softmax de-weighted: the p its sweep scores
    assert (paper["action"] == BUY).all() and paper["p_buy"].to_list() == pytest.approx([own_p] * frame.height)
    sweeps = {rule: run_sweep(f, PAPER, benchmark=False) for rule, f in (("paper", paper), ("calibrated", frame))}
    at = {r: s.metrics.filter(pl.col("cost_bps") == 0.0).row(0, named=True) for r, s in sweeps.items()}
    assert at["paper"]["n_buy"] == 40 and at["paper"]["exposure"] > 0.9  # Buy every day: filled once, then long
    assert at["calibrated"]["n_buy"] == 0 and at["calibrated"]["exposure"] == 0.0
    # the paper's Liquidation Equilibrium table, one per rule: the column of the model says which
    le = {r: tables.liquidation_equilibrium(s.metrics, 0.01, 0.0, "AAA") for r, s in sweeps.items()}
    row = {r: t.filter(pl.col("Model") == "SplineGPT").row(0, named=True) for r, t in le.items()}
    assert (
        row["paper"]["Buy"] == "40"
        and row["paper"]["Liquidation Equilibrium"] != row["calibrated"]["Liquidation Equilibrium"]
    )
    assert row["calibrated"]["Buy"] == "0"


def test_predictions_without_the_softmax_columns_name_the_fix():
    with pytest.raises(ValueError, match="re-materialize the predictions"):
        PaperArgmax(PAPER_WEIGHTS).decide(_frame(np.array([0.5, 0.3, 0.2])).drop(list(SOFTMAX_COLUMNS)))


def test_the_weighted_argmax_demands_half_a_sigma_or_more_of_the_next_day():
    # by hand (science-5 H1): Buy first appears at mu = 0.53 / 0.70 / 0.77 sd for sd = 1 / 2 / 3% at tau = 1%
    for sd, expected in ((0.01, 0.53), (0.02, 0.70), (0.03, 0.77)):
        assert least_buying_drift(0.01, sd, PAPER_WEIGHTS) == pytest.approx(expected, abs=0.01)
    # equal weights: Buy as soon as P(r > tau) beats P(|r| <= tau), far below
    assert least_buying_drift(0.01, 0.02, (1, 1, 1)) < 0.5
    assert "ln(10/2) = 1.61" in buy_threshold(PAPER_WEIGHTS) and "= -0.69" in buy_threshold(PAPER_WEIGHTS)
    assert "ln(4/2) = 0.69" in buy_threshold((2, 4, 1))


def test_class_probabilities_are_the_normal_law_by_hand():
    p = conditional_class_probabilities([0.0, 0.01], [0.01, 0.01], 0.01)
    # N(0, 1%): P(r > 1%) = P(r < -1%) = 1 - Phi(1) = 0.158655; N(1%, 1%): P(r > 1%) = 0.5, P(r < -1%) = Phi(-2)
    assert p[0] == pytest.approx([0.158655, 0.158655, 0.682689], abs=1e-6)
    assert p[1] == pytest.approx([0.5, 0.022750, 0.477250], abs=1e-6)


def _planted_rows(ic: float, n: int, seed: int = 0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    sd_mu = ic * PLANTED_NOISE / np.sqrt(1 - ic**2)
    return pl.DataFrame(
        {
            "ticker": [f"T{k % 50:02d}" for k in range(n)],
            "date": [dt.date(2000, 1, 1) + dt.timedelta(days=k // 50) for k in range(n)],
            "close": np.full(n, 100.0),
            "label": np.zeros(n, dtype=np.int8),
            "drift": sd_mu * rng.standard_normal(n),
            "sd": np.full(n, PLANTED_NOISE),
        }
    )


def test_the_planted_oracle_at_ic_01_is_never_bought_by_the_weighted_argmax():
    frame = conditional_oracle_predictions(_planted_rows(0.1, 100_000), 0.01, PAPER_WEIGHTS)
    assert int((frame["action"] == BUY).sum()) == 0  # 6 sd of the drift away: not one row in 100,000
    assert int((PaperArgmax(PAPER_WEIGHTS).decide(frame)["action"] == BUY).sum()) == 0  # its softmax: the same q
    strong = conditional_oracle_predictions(_planted_rows(0.4, 100_000), 0.01, PAPER_WEIGHTS)
    assert 0.01 < float((strong["action"] == BUY).mean()) < 0.2  # a strong signal does trade (~9.5% by hand)
    # what the oracle knows is all there: the stored (de-weighted) probabilities are the law itself
    from kinematic_pipeline.tasks.actions import unweighted_probabilities

    p = frame.select("p_buy", "p_sell", "p_hold").to_numpy()
    np.testing.assert_array_equal(p, unweighted_probabilities(frame.select(SOFTMAX_COLUMNS).to_numpy(), PAPER_WEIGHTS))
    rows = _planted_rows(0.1, 100_000).sort("ticker", "date")
    law = conditional_class_probabilities(rows["drift"].to_numpy(), rows["sd"].to_numpy(), 0.01)
    assert np.abs(p - law).max() < 1e-6
    assert float((p[:, BUY] > p[:, SELL]).mean()) > 0.4  # the margin rule at m = 0 buys where the drift is up


def test_the_oracle_table_on_a_planted_universe(tmp_path):
    from kinematic_pipeline.sources.synthetic import SyntheticSource
    from kinematic_pipeline.stages.oracle_control import RULE_LABELS, oracle_rule_table

    settings = load_settings("ci", warehouse=tmp_path / "wh", env={"KP_PLANTED_IC": "0.1"})
    source = SyntheticSource(settings.synthetic, settings.data.start_date, settings.data.end_date)
    bars = source.read(dt.date(2022, 1, 1), dt.date(2022, 6, 30))
    test = bars.filter(pl.col("ticker").is_in(["SYN000", "SYN001"]))
    predictions = test.select("ticker", "date", "close").with_columns(
        pl.lit(0.01).alias("tau"), pl.lit(0, pl.Int8).alias("label")
    )
    table = oracle_rule_table(settings, predictions)
    by_rule = {row["Rule"]: row for row in table.iter_rows(named=True)}
    assert by_rule[RULE_LABELS["paper"]]["Buys (% of ticker-days)"] == "0.00%"
    assert by_rule[RULE_LABELS["calibrated"]]["Tickers ever long"] == "0/2"
    assert by_rule[RULE_LABELS["margin"]]["Buys (% of ticker-days)"] != "0.00%"
    # real data has no law: no table
    real = load_settings("ci", warehouse=tmp_path / "wh", source="parquet", source_path=str(tmp_path), env={})
    assert oracle_rule_table(real, predictions) is None


def test_validation_labels_that_read_a_day_after_the_purge_are_unknown():
    fold = Fold(None, dt.date(2022, 1, 7), dt.date(2022, 1, 6), dt.date(2022, 1, 10), None)
    frame = _frame(np.array([0.5, 0.3, 0.2]), days=8).with_columns(pl.lit(1, pl.Int8).alias("label"))
    purged = purge_labels(frame, Policy("splinegpt", BuySellHold(0.01), 7, fold))
    late = purged.filter(pl.col("date") > fold.label_end)
    assert late.height and (late["label"] == UNKNOWN_LABEL).all()
    assert (purged.filter(pl.col("date") <= fold.label_end)["label"] == 1).all()


def test_the_calibrated_prior_scores_what_its_base_rates_earn_not_zero():
    """A model that learned nothing is calibrated to the validation days' base rates: its skill against the training
    base rates is the log loss of those rates against the training ones, by hand, not 0 (science-5 L2)."""
    from kinematic_pipeline.backtest.policy_frames import PRIOR, FoldRates, SkillOptions, seed_mean_skill_frame
    from kinematic_pipeline.stages.base_rates import calibrated_prior_rows

    rng = np.random.default_rng(3)
    n = 600
    labels = rng.choice(3, size=n, p=[0.3, 0.2, 0.5]).astype(np.int8)
    rows = pl.DataFrame(
        {
            "ticker": [f"T{k % 6}" for k in range(n)],
            "date": [dt.date(2022, 1, 3) + dt.timedelta(days=k // 6) for k in range(n)],
            "close": np.full(n, 10.0),
            "label": labels,
        }
    )
    validation, training = np.array([0.28, 0.22, 0.50]), np.array([0.25, 0.25, 0.50])
    rates = FoldRates((dt.date(2022, 1, 1),), (validation,))
    frame = calibrated_prior_rows(rows, rates, 0.01, PAPER_WEIGHTS, "label")
    assert frame["variant"].unique().to_list() == [PRIOR] and frame.height == n
    skill = seed_mean_skill_frame(
        frame, {0.01: FoldRates((dt.date(2022, 1, 1),), (training,))}, SkillOptions(n_boot=0)
    ).row(0, named=True)
    frame_order = frame.join(rows.with_row_index("i"), on=["ticker", "date"]).sort("i")
    y = frame_order["label"].to_numpy()
    by_hand = 1 - np.mean(-np.log(validation[y])) / np.mean(-np.log(training[y]))
    assert skill["log_loss_skill"] == pytest.approx(by_hand, abs=1e-6) and abs(by_hand) > 1e-3
