"""Decision diagnostics and the threshold rule (backtest/decisions.py): hand-made cases, each cause of a
Liquidation Equilibrium, and agreement with the loop twins of naive_skill.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kinematic_pipeline.backtest import decisions as d
from kinematic_pipeline.tasks import rules
from kinematic_pipeline.tasks.actions import unweighted_probabilities
from kinematic_pipeline_tests.naive_skill import naive_choose_margin, naive_threshold_actions, naive_unweighted

B, S, H = 0, 1, 2
W = (2.0, 10.0, 1.0)  # the paper's class weights
PAPER_RATES = np.array([0.25, 0.23, 0.52])  # base rates B/S/H at tau 1% on the real data


def _weighted(p, w=W):
    """What a weighted-CE softmax reports for calibrated p: q ∝ w p."""
    q = np.asarray(p, dtype=float) * np.asarray(w)
    return q / q.sum(axis=1, keepdims=True)


# ------------------------------------------------------------------------------------------ no information


def test_the_no_information_action_under_the_paper_weights_is_sell():
    assert d.no_information_action(PAPER_RATES, W) == S
    np.testing.assert_allclose(np.asarray(W) * PAPER_RATES, [0.5, 2.3, 0.52])
    assert d.no_information_action(PAPER_RATES, (1, 1, 1)) == H  # unweighted: the majority class
    assert d.no_information_action([0.4, 0.4, 0.2], (1, 1, 1)) == B  # ties: the lowest code
    with pytest.raises(ValueError, match="class_weights"):
        d.no_information_action(PAPER_RATES, (2, 0, 1))


def test_undoing_the_weights_recovers_the_calibrated_probabilities():
    rng = np.random.default_rng(0)
    p = rng.dirichlet([1, 1, 1], 50)
    np.testing.assert_allclose(unweighted_probabilities(_weighted(p), W), p, rtol=1e-12)
    q = rng.dirichlet([0.5, 0.5, 0.5], 50)
    np.testing.assert_allclose(unweighted_probabilities(q, W), naive_unweighted(q, W), rtol=1e-12)
    with pytest.raises(ValueError, match="all zero"):
        unweighted_probabilities([[0.0, 0.0, 0.0]], W)


def test_a_margin_above_ln5_is_exactly_the_argmax_ranking_buy_above_sell():
    rng = np.random.default_rng(1)
    q = rng.dirichlet([1, 1, 1], 500)
    margin = d.buy_sell_margin(unweighted_probabilities(q, W), W)  # of the de-weighted p the predictions store
    np.testing.assert_allclose(margin, np.log(q[:, B] / q[:, S]) + np.log(5), rtol=1e-12)
    np.testing.assert_array_equal(margin > np.log(5), q[:, B] > q[:, S])
    assert np.isfinite(d.buy_sell_margin([[0.0, 0.5, 0.5], [0.5, 0.0, 0.5]], W)).all()  # float32 zeros
    # a rule's one-hot Hold: p_buy = p_sell = 0, the argmax's tie, ln(w_sell / w_buy)
    assert d.buy_sell_margin([[0.0, 0.0, 1.0]], W)[0] == pytest.approx(np.log(5))


# ------------------------------------------------------------------------------------------ the threshold rule


def test_threshold_actions_buy_and_sell_only_strictly_beyond_the_margin():
    p = np.array([[0.6, 0.2, 0.2], [0.2, 0.6, 0.2], [0.45, 0.3, 0.25], [0.35, 0.35, 0.3], [0.3, 0.45, 0.25]])
    np.testing.assert_array_equal(rules.threshold_actions(p, 0.2), [B, S, H, H, H])
    np.testing.assert_array_equal(rules.threshold_actions(p, 0.0), [B, S, B, H, S])  # a tie is Hold
    assert rules.threshold_actions(p, 0.2).dtype == np.int8
    with pytest.raises(ValueError, match="margin"):
        rules.threshold_actions(p, -0.1)


@pytest.mark.parametrize("seed", range(4))
def test_threshold_actions_and_choose_margin_match_the_loop_twins(seed):
    rng = np.random.default_rng(seed)
    p = unweighted_probabilities(rng.dirichlet([1, 1, 1], 120), W)
    if seed % 2:
        p = np.round(p * 20) / 20  # edges on the grid: ties between grid points
    labels = rng.integers(-1, 3, 120)
    for m in (0.0, 0.05, 0.2, 0.5):
        np.testing.assert_array_equal(rules.threshold_actions(p, m), naive_threshold_actions(p, m))
    assert rules.choose_margin(p, labels) == naive_choose_margin(p, labels, rules.MARGIN_GRID)


def test_choose_margin_finds_the_band_that_separates_the_classes_and_prefers_the_widest():
    buy, sell, hold = [0.5, 0.2, 0.3], [0.2, 0.5, 0.3], [0.4, 0.3, 0.3]  # edges +0.3, -0.3, +0.1
    p = np.array([buy] * 3 + [sell] * 3 + [hold] * 4)
    labels = np.array([B] * 3 + [S] * 3 + [H] * 4)
    scores = rules.margin_scores(p, labels)
    ok = [m for m, sc in zip(rules.MARGIN_GRID, scores) if sc == 1.0]
    assert ok == [round(0.01 * k, 2) for k in range(11, 30)]  # m in [0.11, 0.29]: every row right
    assert rules.choose_margin(p, labels) == 0.29  # ties: the largest m, the fewest trades
    assert rules.choose_margin(p, labels, grid=[0.0, 0.05]) == 0.05  # a grid with no perfect m


def test_choose_margin_depends_only_on_its_labelled_inputs_and_is_stable():
    rng = np.random.default_rng(5)
    p = unweighted_probabilities(rng.dirichlet([2, 2, 2], 300), W)
    labels = rng.integers(-1, 3, 300)
    p_copy, labels_copy = p.copy(), labels.copy()
    m = rules.choose_margin(p, labels)
    assert all(rules.choose_margin(p, labels) == m for _ in range(3))  # no hidden state or randomness
    np.testing.assert_array_equal(p, p_copy)  # inputs left as they were
    np.testing.assert_array_equal(labels, labels_copy)
    perm = rng.permutation(300)
    assert rules.choose_margin(p[perm], labels[perm]) == m  # row order does not matter
    unknown = labels < 0
    p_other = p.copy()
    p_other[unknown] = rng.dirichlet([1, 1, 1], int(unknown.sum()))
    assert rules.choose_margin(p_other, labels) == m  # unlabelled rows do not enter
    with pytest.raises(ValueError, match="no known validation label"):
        rules.choose_margin(p, np.full(300, -1))


# ------------------------------------------------------------------------------------------ diagnostics


def test_decision_diagnostics_report_rates_margins_and_departures_from_the_prior():
    q = np.array([[0.2, 0.1, 0.7], [0.1, 0.8, 0.1], [0.05, 0.9, 0.05], [0.5, 0.3, 0.2]])
    actions = q.argmax(axis=1)
    diag = d.decision_diagnostics(unweighted_probabilities(q, W), actions, PAPER_RATES, W)
    assert diag["base_rate_sell"] == pytest.approx(0.23) and diag["weighted_rate_sell"] == pytest.approx(2.3)
    assert diag["no_information_action"] == S
    assert diag["margin_threshold"] == pytest.approx(math.log(5))
    assert diag["share_margin_above_threshold"] == 0.5  # rows 0 and 3: q_buy > q_sell
    assert diag["share_hold_outranks_buy_above_threshold"] == 0.5  # row 0
    assert diag["share_differs_from_no_information"] == 0.5  # Hold on row 0, Buy on row 3
    assert (diag["share_buy"], diag["share_sell"], diag["share_hold"]) == (0.25, 0.5, 0.25)
    assert diag["margin_max"] == pytest.approx(math.log(0.2 / 0.1 * 5))  # row 0
    assert diag["margin_q05"] <= diag["margin_q50"] <= diag["margin_q95"]


def test_a_model_without_information_is_in_liquidation_because_of_the_class_weights():
    p = np.tile(PAPER_RATES, (40, 1))  # the base rates on every day
    diag = d.decision_diagnostics(p, _weighted(p).argmax(axis=1), PAPER_RATES, W)
    assert d.liquidation_cause_code(diag) == d.CAUSE_CLASS_WEIGHTS
    text = d.liquidation_cause(diag)
    assert text.startswith("Class weighting: the no-information action under weights [2, 10, 1] is Sell")
    assert "weighted base rates B .50 / S 2.30 / H .52" in text
    assert "takes it on 100% of rows" in text and "100% of margins ln(p_buy/p_sell) are below ln 5" in text


def test_a_policy_that_leaves_the_prior_for_hold_only_lacks_buy_sell_separation():
    rng = np.random.default_rng(2)
    p = np.column_stack([np.full(50, 0.1), rng.uniform(0.05, 0.3, 50), np.zeros(50)])
    p[:, 2] = 1 - p[:, 0] - p[:, 1]
    q = _weighted(p)  # p_buy < 5 p_sell everywhere; Hold wins on some rows
    actions = q.argmax(axis=1)
    assert 0.05 < np.mean(actions == H) < 1 and not (actions == B).any()
    diag = d.decision_diagnostics(p, actions, PAPER_RATES, W)
    assert d.liquidation_cause_code(diag) == d.CAUSE_NO_SEPARATION
    assert d.liquidation_cause(diag).startswith("No Buy/Sell separation:")
    assert "Buy never outranks Sell" in d.liquidation_cause(diag)


def test_buy_beating_sell_but_never_hold_is_reported_as_hold_dominance():
    q = np.array([[0.3, 0.1, 0.6]] * 10 + [[0.1, 0.8, 0.1]] * 10)
    diag = d.decision_diagnostics(unweighted_probabilities(q, W), q.argmax(axis=1), PAPER_RATES, W)
    assert d.liquidation_cause_code(diag) == d.CAUSE_HOLD_DOMINATES
    assert "Buy outranks Sell on 50% of rows" in d.liquidation_cause(diag)


def test_a_policy_that_buys_is_not_in_liquidation_equilibrium():
    q = np.array([[0.6, 0.1, 0.3], [0.1, 0.8, 0.1]])
    diag = d.decision_diagnostics(unweighted_probabilities(q, W), q.argmax(axis=1), PAPER_RATES, W)
    assert d.liquidation_cause_code(diag) == d.NO_LIQUIDATION
    assert d.liquidation_cause(diag) == "No Liquidation Equilibrium: the policy buys on 50.0% of rows."


def test_the_margin_rules_m_comes_from_the_validation_file_whatever_the_test_period_holds(tmp_path):
    """The stage: perturbing every test-period label and probability leaves m (and the validation rows) as they
    were; changing the validation predictions moves it (materialize_backtests passes the policy's validation file). The actions on test days follow the test probabilities."""
    import datetime as dt

    import polars as pl

    from kinematic_pipeline.config import load_settings
    from kinematic_pipeline.stages.backtests import margin_rule_backtests
    from kinematic_pipeline.tasks.buy_sell_hold import PREDICTIONS_SCHEMA

    settings = load_settings("ci", warehouse=tmp_path / "warehouse", env={})
    rng = np.random.default_rng(11)

    def frame(days: int, start: dt.date, scale: float) -> pl.DataFrame:
        q = rng.dirichlet([2, 2, 2], days)  # the softmax; the predictions store p, it de-weighted
        p = unweighted_probabilities(q, W)
        return pl.DataFrame(
            {
                "variant": "splinegpt",
                "tau": 0.01,
                "seed": 1234,
                "ticker": "AAA",
                "date": [start + dt.timedelta(days=i) for i in range(days)],
                "close": 100.0 * np.exp(np.cumsum(rng.normal(0, 0.01 * scale, days))),
                "p_buy": p[:, 0],
                "p_sell": p[:, 1],
                "p_hold": p[:, 2],
                "action": q.argmax(axis=1),
                "label": rng.integers(0, 3, days),
                **{f"softmax_{c}": q[:, k] for k, c in enumerate(("buy", "sell", "hold"))},
            }
        ).cast(PREDICTIONS_SCHEMA)

    validation = frame(120, dt.date(2020, 1, 1), 1.0)
    # validation labels that follow the unweighted Buy - Sell gap: a clear margin to find
    p = validation.select("p_buy", "p_sell", "p_hold").to_numpy()
    gap = p[:, 0] - p[:, 1]
    validation = validation.with_columns(
        pl.Series("label", np.where(gap > 0.1, 0, np.where(gap < -0.1, 1, 2)), dtype=pl.Int8)
    )
    test = frame(80, dt.date(2021, 1, 1), 1.0)
    perturbed = frame(80, dt.date(2021, 1, 1), 3.0)  # other labels, probabilities and prices on every test day
    first = margin_rule_backtests(settings, test, validation)
    second = margin_rule_backtests(settings, perturbed, validation)
    assert first["margin"].unique().to_list() == second["margin"].unique().to_list()
    assert first["validation_rows"].unique().to_list() == [120]
    assert not first.select(pl.exclude("margin", "validation_rows")).equals(
        second.select(pl.exclude("margin", "validation_rows"))
    )  # the test period itself did change the backtest
    shuffled = validation.with_columns(pl.Series("label", rng.permutation(validation["label"].to_numpy())))
    assert (
        margin_rule_backtests(settings, test, shuffled)["margin"].unique().to_list()
        != first["margin"].unique().to_list()
    )
