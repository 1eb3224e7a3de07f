"""Buy/Sell/Hold labels: thresholds, ties, unknown returns and the spline end position."""

from __future__ import annotations

import numpy as np
import pytest

from kinematic_pipeline.config import TokenizeConfig
from kinematic_pipeline.tasks.buy_sell_hold import labels_from_returns
from kinematic_pipeline.tasks.targets import label_returns_close, label_returns_spline
from kinematic_pipeline.tokenizations.spline import spline_end_position
from kinematic_pipeline_tests.naive_baselines import naive_label, naive_spline_end_position


def test_hand_built_labels_with_exact_ties():
    tau = 0.01
    r = np.array([0.02, -0.02, tau, -tau, np.nextafter(tau, 1.0), np.nextafter(-tau, -1.0), 0.0, np.nan])
    expected = [0, 1, 2, 2, 0, 1, 2, -1]  # r == +-tau is Hold; NaN is unknown
    labels = labels_from_returns(r, tau)
    assert labels.dtype == np.int8
    assert labels.tolist() == expected


def test_zero_tau_holds_only_on_exactly_zero():
    assert labels_from_returns([1e-300, -1e-300, 0.0, -0.0], 0.0).tolist() == [0, 1, 2, 2]


@pytest.mark.parametrize("tau", TokenizeConfig().taus)
def test_labels_match_the_scalar_rule(tau):
    rng = np.random.default_rng(int(tau * 1e4))
    r = rng.normal(0, 0.015, (50, 7))
    r[rng.random(r.shape) < 0.05] = np.nan
    r[0, :2] = [tau, -tau]
    labels = labels_from_returns(r, tau)
    assert labels.shape == r.shape
    assert labels.ravel().tolist() == [naive_label(x, tau) for x in r.ravel()]


def test_close_returns_and_the_unknown_last_day():
    log_close = np.log([100.0, 103.0, 101.0, 101.0])
    r = label_returns_close(log_close, np.append(log_close[1:], np.nan))  # the last day has no next bar
    np.testing.assert_array_equal(r[:-1], np.diff(log_close))
    assert np.isnan(r[-1])
    assert labels_from_returns(r, 0.01).tolist() == [0, 1, 2, -1]


def test_spline_returns_are_end_position_differences():
    end_t = np.array([1.0, 2.0, np.nan])
    end_next = np.array([1.5, 1.0, 3.0])
    r = label_returns_spline(end_t, end_next)
    np.testing.assert_array_equal(r[:2], [0.5, -1.0])
    assert np.isnan(r[2])
    with pytest.raises(ValueError, match="shape"):
        label_returns_spline(end_t, end_next[:2])


def test_spline_end_position_evaluates_the_last_cubic():
    rng = np.random.default_rng(0)
    tokens = rng.normal(size=(6, 64, 4))
    for h in (1.0, 3.0):
        expected = [naive_spline_end_position(tokens[i], h) for i in range(6)]
        np.testing.assert_allclose(spline_end_position(tokens, h), expected, rtol=1e-14, atol=1e-14)
    h = np.array([1.0, 3.0, 1.0, 1.0, 4.0, 1.0])
    expected = [naive_spline_end_position(tokens[i], h[i]) for i in range(6)]
    np.testing.assert_allclose(spline_end_position(tokens, h), expected, rtol=1e-14, atol=1e-14)
    with pytest.raises(ValueError, match="64, 4"):
        spline_end_position(tokens[:, :, :3])
    with pytest.raises(ValueError, match="h must"):
        spline_end_position(tokens, 0.0)


def test_spline_end_position_is_the_smoothing_spline_at_the_last_knot():
    from scipy.interpolate import make_smoothing_spline

    from kinematic_pipeline.tokenize import price

    rng = np.random.default_rng(1)
    log_price = 4.0 + np.cumsum(rng.normal(0, 0.02, (3, 65)), axis=1)
    alpha = 5.0
    tokens = price.tokenize_price_windows(log_price, alpha)
    t = np.arange(65.0)
    expected = [make_smoothing_spline(t, y, lam=1 / alpha**2)(64.0) for y in log_price]
    np.testing.assert_allclose(spline_end_position(tokens), expected, rtol=0, atol=1e-10)


@pytest.mark.parametrize("tau", [-0.01, np.nan, np.inf])
def test_bad_tau_raises(tau):
    with pytest.raises(ValueError, match="tau"):
        labels_from_returns([0.0], tau)
