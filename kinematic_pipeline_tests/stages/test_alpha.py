"""Marginal-likelihood alpha: the exact diffuse Kalman filter against dense REML, and recovery of a known
alpha from simulated integrated-Wiener-plus-noise data."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kinematic_pipeline.tokenize.alpha_mle import (
    AlphaEstimate,
    estimate_alpha_price,
    estimate_alpha_price_pooled,
    estimate_alpha_volume,
    estimate_alpha_volume_pooled,
    price_profile_log_likelihood,
    volume_profile_log_likelihood,
)
from kinematic_pipeline_tests.naive_baselines import dense_reml_price, dense_reml_volume

KINDS = {
    "price": (price_profile_log_likelihood, dense_reml_price, 0),
    "volume": (volume_profile_log_likelihood, dense_reml_volume, 1),
}


def simulate_iwp(n: int, alpha: float, rng, integrated: bool, q: float = 1e-4, times=None) -> np.ndarray:
    """Exact simulation of x'' = white noise (density q) observed with noise variance q / alpha^2.

    integrated: measurement k is int x over [times[k], times[k+1]] (len(times) == n + 1), else x(times[k]).
    """
    t = np.arange(n + integrated, dtype=float) if times is None else np.asarray(times, dtype=float)
    steps = np.diff(t) if integrated else np.diff(t, prepend=t[0])
    noise_sd = math.sqrt(q) / alpha
    x, v = rng.normal(), rng.normal() * 0.01
    out = np.empty(n)
    chol = {}
    for k in range(n):
        h = steps[k]
        if h > 0:
            if h not in chol:
                Q = q * np.array(
                    [[h**3 / 3, h**2 / 2, h**4 / 8], [h**2 / 2, h, h**3 / 6], [h**4 / 8, h**3 / 6, h**5 / 20]]
                )
                chol[h] = np.linalg.cholesky(Q)
            e = chol[h] @ rng.normal(size=3)
        else:
            e = np.zeros(3)
        integral = h * x + h * h / 2 * v + e[2]
        x, v = x + h * v + e[0], v + e[1]
        out[k] = (integral if integrated else x) + noise_sd * rng.normal()
    return out


# ----------------------------------------------------------------------------------------------------
# The kernel against its dense twin


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("gaps", [False, True])
@pytest.mark.parametrize("calendar_times", [False, True])
def test_kalman_likelihood_matches_dense_reml(kind, gaps, calendar_times):
    # The dense twin runs in 30-digit mpmath: in float64 the volume covariance (entries ~ t^5) loses
    # ~1e-7 already at n = 40; the Kalman filter does not (see the extreme-alpha test).
    kalman, dense, extra_knot = KINDS[kind]
    rng = np.random.default_rng(7)
    n = 24
    y = np.cumsum(np.cumsum(rng.normal(size=n))) + rng.normal(size=n)
    if gaps:
        y[[0, 5, 6, 17, n - 1]] = np.nan  # a leading, an interior run and a trailing gap
    t = np.cumsum(rng.uniform(0.3, 2.5, n + extra_knot)) if calendar_times else None
    alphas = (0.3, 3.0)
    ll_kalman = [kalman(y, a, t) for a in alphas]
    ll_dense = [dense(y, a, t, digits=30) for a in alphas]
    # differences between alphas (what the optimizer sees) and, with this X = [1, t], the values too
    assert ll_kalman[0] - ll_kalman[1] == pytest.approx(ll_dense[0] - ll_dense[1], abs=1e-8)
    np.testing.assert_allclose(ll_kalman, ll_dense, rtol=0, atol=1e-8)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_kalman_likelihood_is_exact_at_extreme_alpha(kind):
    # Dense float64 loses ~1e-6 here (V = K + I/alpha^2 has condition ~1e15); 40-digit mpmath does not.
    kalman, dense, extra_knot = KINDS[kind]
    rng = np.random.default_rng(3)
    n = 14
    y = np.cumsum(np.cumsum(rng.normal(size=n))) + rng.normal(size=n)
    y[[0, 6]] = np.nan
    t = np.cumsum(rng.uniform(0.3, 2.5, n + extra_knot))
    for a in (1e-3, 1e3):
        assert kalman(y, a, t) == pytest.approx(dense(y, a, t, digits=40), abs=1e-10)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_likelihood_ignores_the_penalty_null_space(kind):
    # Restricted likelihood: adding a + b t to the latent path changes nothing.
    kalman, _, extra_knot = KINDS[kind]
    rng = np.random.default_rng(11)
    n = 200
    y = np.cumsum(np.cumsum(rng.normal(size=n))) + 3 * rng.normal(size=n)
    y[rng.random(n) < 0.1] = np.nan
    t = np.cumsum(rng.uniform(0.5, 2.0, n + extra_knot))
    a, b = 4.2, -0.37
    if kind == "price":
        shifted = y + a + b * t
    else:
        shifted = y + a * np.diff(t) + b * np.diff(t**2) / 2
    for alpha in (0.1, 1.0, 10.0):
        assert kalman(shifted, alpha, t) == pytest.approx(kalman(y, alpha, t), abs=1e-7)


def test_likelihood_scale_equivariance():
    # y -> c y shifts the profile log-likelihood by -(n_obs - 2) ln c and leaves alpha alone.
    rng = np.random.default_rng(5)
    y = simulate_iwp(500, 2.0, rng, integrated=False)
    for alpha in (0.2, 2.0):
        diff = price_profile_log_likelihood(1000 * y, alpha) - price_profile_log_likelihood(y, alpha)
        assert diff == pytest.approx(-498 * math.log(1000), abs=1e-8)
    assert estimate_alpha_price(1000 * y).alpha == pytest.approx(estimate_alpha_price(y).alpha, rel=1e-5)


# ----------------------------------------------------------------------------------------------------
# Recovery of a known alpha


@pytest.mark.parametrize("true_alpha", [0.5, 5.0])
@pytest.mark.parametrize("gap_fraction", [0.0, 0.2])
def test_price_alpha_is_recovered(true_alpha, gap_fraction):
    rng = np.random.default_rng(int(true_alpha * 10) + int(gap_fraction * 100))
    y = simulate_iwp(5000, true_alpha, rng, integrated=False)
    y[rng.random(y.size) < gap_fraction] = np.nan
    est = estimate_alpha_price(y)
    assert isinstance(est, AlphaEstimate) and est.converged
    assert est.n_obs == int(np.isfinite(y).sum())
    assert est.alpha == pytest.approx(true_alpha, rel=0.15)
    assert est.scale == pytest.approx(1e-4, rel=0.25)
    assert est.log_likelihood == pytest.approx(price_profile_log_likelihood(y, est.alpha), abs=1e-9)


@pytest.mark.parametrize("true_alpha", [0.5, 5.0])
@pytest.mark.parametrize("gap_fraction", [0.0, 0.2])
def test_volume_alpha_is_recovered(true_alpha, gap_fraction):
    rng = np.random.default_rng(100 + int(true_alpha * 10) + int(gap_fraction * 100))
    y = simulate_iwp(5000, true_alpha, rng, integrated=True)
    y[rng.random(y.size) < gap_fraction] = np.nan
    est = estimate_alpha_volume(y)
    assert est.converged
    assert est.alpha == pytest.approx(true_alpha, rel=0.15)


def test_price_alpha_is_recovered_in_calendar_time():
    # Five trading days, then a weekend: steps 1,1,1,1,3 (alpha in calendar-day units).
    steps = np.tile([1.0, 1.0, 1.0, 1.0, 3.0], 1000)
    t = np.concatenate([[0.0], np.cumsum(steps)])[:5000]
    rng = np.random.default_rng(21)
    y = simulate_iwp(5000, 2.0, rng, integrated=False, times=t)
    assert estimate_alpha_price(y, times=t).alpha == pytest.approx(2.0, rel=0.15)


def test_estimate_is_the_likelihood_maximum():
    rng = np.random.default_rng(8)
    y = simulate_iwp(800, 1.0, rng, integrated=False)
    est = estimate_alpha_price(y)
    for factor in (0.98, 1.02, 0.5, 2.0):
        assert price_profile_log_likelihood(y, est.alpha * factor) < est.log_likelihood


def test_white_noise_hits_the_lower_bound_and_is_flagged():
    # No dynamics beyond a line: the likelihood increases towards alpha -> 0; not 'converged'.
    y = np.random.default_rng(2).normal(size=300)
    est = estimate_alpha_price(y)
    assert est.alpha < 2e-3 and not est.converged


# ----------------------------------------------------------------------------------------------------
# Pooling


def test_pooled_alpha_shares_alpha_across_volatility_levels():
    rng = np.random.default_rng(31)
    series = [simulate_iwp(1500, 1.5, rng, integrated=False, q=q) for q in (1e-6, 1e-4, 1e-2)]
    est = estimate_alpha_price_pooled(series)
    assert est.converged and est.n_obs == 4500 and math.isnan(est.scale)
    assert est.alpha == pytest.approx(1.5, rel=0.15)
    total = sum(price_profile_log_likelihood(s, est.alpha) for s in series)
    assert est.log_likelihood == pytest.approx(total, abs=1e-8)


def test_pooled_of_one_series_is_the_single_estimate():
    rng = np.random.default_rng(4)
    y = simulate_iwp(600, 0.8, rng, integrated=True)
    single = estimate_alpha_volume(y)
    for shared in (False, True):
        pooled = estimate_alpha_volume_pooled([y], shared_scale=shared)
        assert pooled.alpha == pytest.approx(single.alpha, rel=1e-9)
        assert pooled.log_likelihood == pytest.approx(single.log_likelihood, abs=1e-9)


def test_shared_scale_pools_like_one_long_series_scale():
    rng = np.random.default_rng(9)
    series = [simulate_iwp(700, 3.0, rng, integrated=False) for _ in range(3)]
    est = estimate_alpha_price_pooled(series, shared_scale=True)
    assert est.alpha == pytest.approx(3.0, rel=0.25)
    assert est.scale == pytest.approx(1e-4, rel=0.15)


# ----------------------------------------------------------------------------------------------------
# Validation


@pytest.mark.parametrize(
    "bad, match",
    [
        (np.array([1.0, np.nan, 2.0]), "at least 3"),
        (np.array([1.0, 2.0, np.inf, 3.0]), "infinite"),
        (np.ones((4, 2)), "1-D"),
    ],
)
def test_bad_series_raise(bad, match):
    with pytest.raises(ValueError, match=match):
        estimate_alpha_price(bad)


def test_bad_times_raise():
    y = np.arange(6.0) ** 2
    with pytest.raises(ValueError, match="strictly increasing"):
        estimate_alpha_price(y, times=[0, 1, 2, 2, 3, 4])
    with pytest.raises(ValueError, match="interval boundaries"):
        estimate_alpha_volume(y, times=np.arange(6.0))
    with pytest.raises(ValueError, match="alpha"):
        price_profile_log_likelihood(y, -1.0)
    with pytest.raises(ValueError, match="exactly on a line"):
        estimate_alpha_volume(np.full(10, 3.0))
    with pytest.raises(ValueError, match="series 1"):
        estimate_alpha_price_pooled([y, np.array([1.0, np.nan, np.nan])])


def test_float64_dense_twin_agrees_for_a_short_series():
    # The plain float64 twin (no mpmath) on a short, well-conditioned case.
    rng = np.random.default_rng(12)
    y = np.cumsum(np.cumsum(rng.normal(size=20))) + rng.normal(size=20)
    y[[3, 4]] = np.nan
    for kalman, dense, _ in KINDS.values():
        assert kalman(y, 0.7, None) == pytest.approx(dense(y, 0.7, None), abs=1e-8)
