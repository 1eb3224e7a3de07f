"""The scaling table's skill beyond the trailing-volatility reference (issue 38, item 3), on small hand-made prediction
frames (no warehouse, no training): each learner's column is its log-loss skill minus the reference's on exactly the
ticker-days it scored, computed here by hand; a learner that predicts the reference's p scores 0 beyond it; the
reference's own row is scored on the ticker-days every learner scored.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import numpy as np
import polars as pl
import pytest

from kinematic_pipeline.backtest.volatility_reference import (
    REFERENCE,
    REFERENCE_CLASS_WEIGHTS,
    REFERENCE_SEED,
    normal_class_probabilities,
)
from kinematic_pipeline.stages.scaling_scores import BEYOND_VOL20, shared_ticker_days, skill_beyond_vol20
from kinematic_pipeline.tasks.actions import SOFTMAX_COLUMNS
from kinematic_pipeline.tasks.buy_sell_hold import predictions_frame

TICKERS = ("AAA", "BBB", "CCC", "DDD", "EEE")
DAYS = [dt.date(2022, 3, 1) + dt.timedelta(days=i) for i in range(80)]
RATES = np.array([0.3, 0.25, 0.45])  # the fold's training base rates of close-to-close Buy, Sell, Hold


@pytest.fixture
def settings(tmp_path):
    from kinematic_pipeline.config import load_settings

    loaded = load_settings("ci", warehouse=tmp_path / "wh", env={})
    ev = dataclasses.replace(loaded.evaluate, skill_bootstrap_resamples=100)
    return dataclasses.replace(loaded, evaluate=ev)


def _grid(days=DAYS) -> pl.DataFrame:
    rows = [(t, d) for t in TICKERS for d in days]
    return pl.DataFrame(rows, schema={"ticker": pl.String, "date": pl.Date}, orient="row").with_columns(
        pl.lit(100.0).alias("close"), pl.lit(-1, dtype=pl.Int8).alias("label")
    )


def _returns(rng) -> pl.DataFrame:
    grid = _grid()
    r = rng.normal(0.0, 0.015, grid.height)
    r[3] = np.nan  # a ticker-day without a next close: unlabelled, out of both sides
    return grid.select("ticker", "date").with_columns(pl.Series("r_close", r))


def _frame(rows: pl.DataFrame, variant: str, tau: float, seed: int, softmax: np.ndarray, weights) -> pl.DataFrame:
    """A learner's predictions as the pipeline stores them: its ``softmax``, and p that softmax de-weighted."""
    return predictions_frame(rows, (variant, tau, seed), softmax, "label", weights)


def _reference(rng, tau: float) -> pl.DataFrame:
    """The reference on every ticker-day and then some (the learner's rows are a subset, but for one it lacks)."""
    rows = _grid().filter(~((pl.col("ticker") == "AAA") & (pl.col("date") == DAYS[0])))  # no vol20 there
    vol = rng.uniform(0.005, 0.03, rows.height)
    return _frame(rows, REFERENCE, tau, REFERENCE_SEED, normal_class_probabilities(vol, tau), REFERENCE_CLASS_WEIGHTS)


def _close_class(r: float, tau: float) -> int:
    return -1 if not np.isfinite(r) else (0 if r > tau else (1 if r < -tau else 2))


def _skill_by_hand(frame: pl.DataFrame, keys: set, returns: pl.DataFrame, weights, tau: float) -> tuple[float, int]:
    """(1 - log loss / log loss of RATES, rows) of ``frame``'s softmax de-weighted by hand with ``weights`` on its
    ticker-days in ``keys`` that have a close-to-close label."""
    r_close = dict(zip(returns.select("ticker", "date").iter_rows(), returns["r_close"].to_list()))
    w = np.asarray(weights, dtype=np.float64)
    loss = loss_rates = 0.0
    n = 0
    for t, d, b, s, h in frame.select("ticker", "date", *SOFTMAX_COLUMNS).iter_rows():
        y = _close_class(r_close[(t, d)], tau)
        if y < 0 or (t, d) not in keys:
            continue
        p = np.array([b, s, h], dtype=np.float64) / w
        loss -= np.log(p[y] / p.sum())
        loss_rates -= np.log(RATES[y])
        n += 1
    return 1 - loss / loss_rates, n


def _keys(frame: pl.DataFrame) -> set:
    return set(frame.select("ticker", "date").iter_rows())


def test_the_skill_beyond_vol20_is_the_models_skill_minus_the_references_on_the_rows_the_model_scored(settings):
    rng = np.random.default_rng(38)
    tau, weights = settings.evaluate.report_tau, settings.train.class_weights
    returns, reference = _returns(rng), _reference(rng, tau)
    rows = _grid(DAYS[:60]).filter(pl.col("ticker") != "EEE")  # the learner scored fewer ticker-days than exist
    model = _frame(rows, "lr_spline", tau, 0, rng.dirichlet([2.0, 2.0, 2.0], rows.height), weights)
    paired = _keys(model) & _keys(reference)
    model_skill, n = _skill_by_hand(model, paired, returns, weights, tau)
    reference_skill, n_reference = _skill_by_hand(reference, paired, returns, (1.0, 1.0, 1.0), tau)
    assert n == n_reference and n < rows.height < reference.height  # the unlabelled day, the one without vol20: out

    got = skill_beyond_vol20(settings, model, reference, returns, {tau: RATES})

    assert got["beyond_vol20_rows"] == n
    assert got[BEYOND_VOL20] == pytest.approx(model_skill - reference_skill, rel=1e-9, abs=1e-12)
    assert got[f"{BEYOND_VOL20}_ci_low"] < got[BEYOND_VOL20] < got[f"{BEYOND_VOL20}_ci_high"]
    # the reference's other ticker-days do not enter: scored on all of them it gives another number
    everywhere, _ = _skill_by_hand(reference, _keys(reference), returns, (1.0, 1.0, 1.0), tau)
    assert abs((model_skill - everywhere) - got[BEYOND_VOL20]) > 1e-6


def test_a_learner_that_predicts_the_references_probabilities_has_no_skill_beyond_it(settings):
    rng = np.random.default_rng(3)
    tau = settings.evaluate.report_tau
    returns, reference = _returns(rng), _reference(rng, tau)
    p = reference.select(SOFTMAX_COLUMNS).to_numpy().astype(np.float64)  # its p, as a softmax of unit weights
    rows = reference.select("ticker", "date", "close", "label")

    same = skill_beyond_vol20(
        settings, _frame(rows, "lr_fd", tau, 0, p, (1.0, 1.0, 1.0)), reference, returns, {tau: RATES}
    )
    assert same[BEYOND_VOL20] == 0.0
    assert same[f"{BEYOND_VOL20}_ci_low"] == same[f"{BEYOND_VOL20}_ci_high"] == 0.0

    # under the run's class weights the learner's softmax is q ∝ w p (in float32), stored de-weighted: the same p, up
    # to rounding
    w = np.asarray(settings.train.class_weights, dtype=np.float64)
    q = p * w / (p * w).sum(axis=1, keepdims=True)
    weighted_frame = _frame(rows, "splinegpt", tau, 0, q, settings.train.class_weights)
    weighted = skill_beyond_vol20(settings, weighted_frame, reference, returns, {tau: RATES})
    assert weighted["beyond_vol20_rows"] == same["beyond_vol20_rows"] > 0
    assert weighted[BEYOND_VOL20] == pytest.approx(0.0, abs=1e-6)


def test_no_paired_ticker_day_leaves_the_column_null(settings):
    rng = np.random.default_rng(5)
    tau = settings.evaluate.report_tau
    returns, reference = _returns(rng), _reference(rng, tau)
    rows = _grid(DAYS[:1]).filter(pl.col("ticker") == "AAA")  # the one ticker-day without a vol20
    model = _frame(rows, "lr_fd", tau, 0, np.full((1, 3), 1 / 3), None)
    got = skill_beyond_vol20(settings, model, reference, returns, {tau: RATES})
    assert got[BEYOND_VOL20] is None and got["beyond_vol20_rows"] == 0


def test_the_references_row_is_on_the_ticker_days_every_learner_scored():
    a = _grid(DAYS[:10])
    b = _grid(DAYS[5:20]).filter(pl.col("ticker") != "BBB")
    c = _grid(DAYS[:8])
    shared = shared_ticker_days([a, b, c])
    expected = {(t, d) for t in TICKERS if t != "BBB" for d in DAYS[5:8]}
    assert set(shared.iter_rows()) == expected and shared.height == len(expected)
    with pytest.raises(ValueError, match="no learner"):
        shared_ticker_days([])
