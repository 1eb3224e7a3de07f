"""Temperature-and-bias calibration (backtest/calibration.py): recovery of a known miscalibration, agreement with
a brute-force grid search, the identity where there is too little to fit, and the predictions frames it is
applied to (fitted on validation rows only)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl
import pytest

from kinematic_pipeline.backtest.calibration import (
    CALIBRATION_SCHEMA,
    MIN_ROWS,
    calibrate_frames,
    calibrate_predictions,
    fit_calibration,
)
from kinematic_pipeline.backtest.skill import log_loss
from kinematic_pipeline.tasks.actions import PROB_COLUMNS, SOFTMAX_COLUMNS, unweighted_probabilities
from kinematic_pipeline.tasks.buy_sell_hold import predictions_frame

W = np.array([2.0, 10.0, 1.0])  # the paper's class weights [Buy, Sell, Hold]


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _classifier(n: int, scale: float, offset, seed: int, concentration: float = 2.0):
    """True de-weighted probabilities p ~ Dirichlet, labels ~ p, and the weighted softmax of a classifier whose
    logits are ``scale`` * (ln p + ln w) + ``offset``: over-confident for scale > 1, calibrated for scale 1 and
    offset 0. Its calibration is T = scale, b = -offset / scale (up to a common shift). q is float32, as stored."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet([concentration] * 3, n)
    labels = (rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
    q = _softmax(scale * (np.log(p) + np.log(W)) + np.asarray(offset, dtype=float)).astype(np.float32)
    return p, labels, q


def _calibrated_nll(cal, q, labels) -> float:
    """Unweighted NLL of the de-weighted calibrated probabilities: what nll_after measures."""
    return log_loss(unweighted_probabilities(cal.apply(q), W), labels)


# ------------------------------------------------------------------------------------------ recovery


@pytest.mark.parametrize("scale", [0.4, 2.5])  # under- and over-confident
def test_the_fit_recovers_a_known_temperature_and_bias(scale):
    offset = np.array([0.6, -0.5, 0.0])  # c_hold = 0, so b = -c / T with b_hold = 0
    p, labels, q = _classifier(40_000, scale, offset, seed=3)
    fit, held = slice(0, 20_000), slice(20_000, None)
    cal = fit_calibration(q[fit], labels[fit], W)
    assert cal.fitted and cal.n_rows == 20_000
    assert cal.temperature == pytest.approx(scale, rel=0.10)
    np.testing.assert_allclose(cal.bias, -offset / scale, atol=0.1)
    assert cal.bias[2] == 0.0
    assert cal.nll_after < cal.nll_before - 0.01  # the miscalibration was real and is gone
    assert cal.nll_after == pytest.approx(log_loss(p[fit], labels[fit]), abs=0.005)
    # out of sample: as good as the true probabilities
    assert _calibrated_nll(cal, q[held], labels[held]) == pytest.approx(log_loss(p[held], labels[held]), abs=0.005)


def test_a_calibrated_classifier_stays_close_to_the_identity():
    _, labels, q = _classifier(20_000, 1.0, 0.0, seed=5)
    cal = fit_calibration(q, labels, W)
    assert cal.temperature == pytest.approx(1.0, abs=0.05)
    np.testing.assert_allclose(cal.bias, 0.0, atol=0.05)
    assert cal.nll_before - cal.nll_after < 1e-3


# ------------------------------------------------------------------------------------------ the brute-force twin


def _grid_nll(q, labels, log_ts, b_buys, b_sells) -> np.ndarray:
    """Unweighted mean NLL of softmax(ln q / T + b - ln w) at every (ln T, b_buy, b_sell) of the grid, by brute force
    (no optimiser, no gradient): shape (len(log_ts), len(b_buys), len(b_sells))."""
    log_q = np.log(np.clip(q.astype(np.float64), 1e-7, None))
    known = labels >= 0
    log_q, y = log_q[known], labels[known]
    out = np.empty((len(log_ts), len(b_buys), len(b_sells)))
    bias = np.zeros((len(b_buys), len(b_sells), 1, 3))
    bias[..., 0], bias[..., 1] = b_buys[:, None, None], b_sells[None, :, None]
    for i, log_t in enumerate(log_ts):
        z = log_q / np.exp(log_t) + bias - np.log(W)  # (B, S, n, 3)
        log_p = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
        out[i] = -log_p[..., np.arange(y.size), y].mean(axis=-1)
    return out


def test_the_fitted_optimum_agrees_with_a_grid_search():
    _, labels, q = _classifier(300, 1.8, [0.3, -0.4, 0.0], seed=11)
    labels[::7] = -1  # unknown labels are ignored by both
    cal = fit_calibration(q, labels, W, ridge=0.5)  # a prior worth about one row
    coarse = (np.linspace(-1.5, 1.5, 31), np.linspace(-3, 3, 31), np.linspace(-3, 3, 31))
    nll = _grid_nll(q, labels, *coarse)
    best = np.unravel_index(np.argmin(nll), nll.shape)
    fine = tuple(np.linspace(g[k] - 0.12, g[k] + 0.12, 49) for g, k in zip(coarse, best))
    nll = _grid_nll(q, labels, *fine)
    best_fine = np.unravel_index(np.argmin(nll), nll.shape)
    assert abs(cal.nll_after - nll.min()) < 1e-3  # the ridge's pull costs a little NLL on 257 rows
    unpenalized = fit_calibration(q, labels, W, ridge=0.0)
    assert unpenalized.nll_after <= nll.min() + 1e-6  # the optimiser is at least as good as the grid
    at = [fine[k][best_fine[k]] for k in range(3)]
    assert np.log(unpenalized.temperature) == pytest.approx(at[0], abs=0.02)
    np.testing.assert_allclose(unpenalized.bias[:2], at[1:], atol=0.05)
    # nll_before is the grid's value at the identity
    assert cal.nll_before == pytest.approx(_grid_nll(q, labels, [0.0], np.zeros(1), np.zeros(1))[0, 0, 0], abs=1e-9)


# ------------------------------------------------------------------------------------------ the identity


def test_too_few_labelled_rows_or_one_class_keep_the_identity():
    _, labels, q = _classifier(200, 2.5, 0.0, seed=2)
    labels[MIN_ROWS - 1 :] = -1  # 29 labelled rows among 200
    cal = fit_calibration(q, labels, W)
    assert not cal.fitted and cal.temperature == 1.0 and cal.bias == (0.0, 0.0, 0.0) and cal.n_rows == MIN_ROWS - 1
    assert cal.nll_after == cal.nll_before
    assert cal.apply(q) is q  # float32 in, the same array out
    one_class = fit_calibration(q, np.zeros(200, dtype=int), W)
    assert not one_class.fitted and one_class.temperature == 1.0
    nothing = fit_calibration(q, np.full(200, -1), W)
    assert not nothing.fitted and nothing.n_rows == 0 and np.isnan(nothing.nll_before)
    empty = fit_calibration(np.empty((0, 3)), np.empty(0, dtype=int), W)
    assert not empty.fitted
    assert fit_calibration(q, labels, W).to_frame("lr", 0.01, 0, "2019").schema == pl.Schema(CALIBRATION_SCHEMA)


# ------------------------------------------------------------------------------------------ never worse


@pytest.mark.parametrize("seed", range(6))
def test_calibration_never_increases_the_validation_nll(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(MIN_ROWS, 400))
    cases = [
        _classifier(n, rng.uniform(0.2, 4), rng.normal(0, 1, 3), seed)[1:],
        (rng.integers(0, 3, n), rng.dirichlet([0.3] * 3, n).astype(np.float32)),  # q unrelated to the labels
        (rng.integers(0, 3, n), np.eye(3, dtype=np.float32)[rng.integers(0, 3, n)]),  # one-hot q: zeros clipped
    ]
    for labels, q in cases:
        cal = fit_calibration(q, labels, W)
        assert cal.nll_after <= cal.nll_before + 1e-9
        assert cal.nll_after == pytest.approx(_calibrated_nll(cal, q, labels), abs=1e-5)  # float32 q'
        out = cal.apply(q)
        assert out.dtype == np.float32 and out.shape == q.shape
        np.testing.assert_allclose(out.sum(axis=1), 1.0, atol=1e-6)


def test_apply_is_a_softmax_of_the_rescaled_shifted_log_probabilities():
    _, labels, q = _classifier(1000, 2.0, [0.5, 0.0, 0.0], seed=9)
    cal = fit_calibration(q, labels, W)
    expected = _softmax(np.log(q.astype(np.float64)) / cal.temperature + np.asarray(cal.bias))
    np.testing.assert_allclose(cal.apply(q), expected, rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------------------------------------ predictions frames


def _frame(q: np.ndarray, labels: np.ndarray, tickers=("A", "B")) -> pl.DataFrame:
    """PREDICTIONS_SCHEMA rows as ``buy_sell_hold.predictions_frame`` makes them for a model trained with W (days per ticker,
    the float32 softmax q and p, q de-weighted)."""
    n_days = len(q) // len(tickers)
    dates = [dt.date(2022, 1, 3) + dt.timedelta(days=k) for k in range(n_days)]
    raw = pl.DataFrame(
        {
            "ticker": [t for t in tickers for _ in dates],
            "date": dates * len(tickers),
            "close": np.linspace(10, 20, len(q)),
            "label_tau": pl.Series(labels, dtype=pl.Int8),
        }
    )
    return predictions_frame(raw, ("lr", 0.01, 0), q, "label_tau", W)


def test_test_rows_are_transformed_with_parameters_fitted_on_validation_rows_only():
    _, val_labels, val_q = _classifier(2000, 2.5, [0.4, -0.3, 0.0], seed=21)
    _, test_labels, test_q = _classifier(600, 2.5, [0.4, -0.3, 0.0], seed=22)
    validation, test = _frame(val_q, val_labels), _frame(test_q, test_labels)
    (test_cal, val_cal, none), cal = calibrate_frames(validation, [test, validation, None], W)
    assert cal.fitted and none is None
    q_test = test.select(SOFTMAX_COLUMNS).to_numpy()  # the frame's order (sorted by ticker, date)
    np.testing.assert_array_equal(test.select(PROB_COLUMNS).to_numpy(), unweighted_probabilities(q_test, W))
    q_cal = cal.apply(q_test.astype(np.float64))  # the calibrated softmax q' (float32): p' is it de-weighted
    np.testing.assert_array_equal(test_cal.select(PROB_COLUMNS).to_numpy(), unweighted_probabilities(q_cal, W))
    assert test_cal.schema == test.schema
    np.testing.assert_array_equal(test_cal["action"].to_numpy(), q_cal.argmax(1))
    np.testing.assert_array_equal(
        test_cal["action"].to_numpy(), (test_cal.select(PROB_COLUMNS).to_numpy() * W).argmax(1)
    )
    assert (test_cal["action"] != test["action"]).any()  # the argmax moved with the calibration
    assert test_cal.drop(*PROB_COLUMNS, "action").equals(test.drop(*PROB_COLUMNS, "action"))  # the softmax stays
    assert val_cal.select(PROB_COLUMNS).equals(calibrate_predictions(validation, cal, W).select(PROB_COLUMNS))

    # a test label changes nothing; a validation label does
    flipped = test.with_columns((2 - pl.col("label").clip(0, 2)).cast(pl.Int8).alias("label"))
    (test_again,), same = calibrate_frames(validation, [flipped], W)
    assert same == cal
    np.testing.assert_array_equal(test_again.select(PROB_COLUMNS).to_numpy(), test_cal.select(PROB_COLUMNS).to_numpy())
    moved = validation.with_columns(
        pl.when(pl.col("ticker") == "A").then(0).otherwise("label").cast(pl.Int8).alias("label")
    )
    assert calibrate_frames(moved, [test], W)[1] != cal


def test_an_identity_calibration_leaves_the_frames_untouched():
    _, labels, q = _classifier(20, 2.5, 0.0, seed=4)  # fewer than MIN_ROWS
    frame = _frame(q, labels)
    (out,), cal = calibrate_frames(frame, [frame], W)
    assert not cal.fitted and out is frame
