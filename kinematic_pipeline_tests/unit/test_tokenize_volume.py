"""Volume tokens (paper eq. (2)) against a dense KKT solve built from first principles, plus the
spline's own properties and the wrapper's input checks."""

from __future__ import annotations

import numpy as np
import pytest

from kinematic_pipeline.tokenize import tokenize_volume_windows
from kinematic_pipeline_tests.naive import assert_close, dense_volume_tokens, irregular_knots

ALPHAS = (0.5, 5.0, 50.0)


def _log_volumes(rng, n):
    return 14.0 + np.cumsum(rng.normal(0.0, 0.3, (n, 64)), axis=1) + rng.normal(0.0, 0.4, (n, 64))


def _piece(tok_k, s):
    """Value and derivatives 1..3 of the quartic with Taylor coefficients tok_k at offset s."""
    c0, c1, c2, c3, c4 = tok_k
    return (
        c0 + c1 * s + c2 * s**2 / 2 + c3 * s**3 / 6 + c4 * s**4 / 24,
        c1 + c2 * s + c3 * s**2 / 2 + c4 * s**3 / 6,
        c2 + c3 * s + c4 * s**2 / 2,
        c3 + c4 * s,
    )


@pytest.mark.parametrize("alpha", ALPHAS)
def test_fast_path_matches_dense_solve(alpha):
    rng = np.random.default_rng(1)
    v = _log_volumes(rng, 6)
    tokens = tokenize_volume_windows(v, alpha)
    assert tokens.shape == (6, 64, 5) and tokens.dtype == np.float64
    for i in range(len(v)):
        assert_close(tokens[i], dense_volume_tokens(v[i], alpha))


@pytest.mark.parametrize("alpha", ALPHAS)
def test_windows_with_gaps_match_dense_solve(alpha):
    rng = np.random.default_rng(2)
    v = _log_volumes(rng, 8)
    v[0, 0] = v[1, 63] = np.nan  # first / last interval missing
    v[2, [0, 1, 2, 30, 31, 62, 63]] = np.nan
    v[3, :62] = np.nan  # only two observed intervals, at the end
    for i in range(4, 8):
        v[i, rng.choice(64, size=rng.integers(1, 25), replace=False)] = np.nan
    tokens = tokenize_volume_windows(v, alpha)
    for i in range(len(v)):
        assert_close(tokens[i], dense_volume_tokens(v[i], alpha))


@pytest.mark.parametrize("alpha", ALPHAS)
def test_nonuniform_knots_shared_and_per_window(alpha):
    rng = np.random.default_rng(3)
    v = _log_volumes(rng, 4)
    v[3, [5, 6, 40]] = np.nan
    shared = irregular_knots(rng)
    per_window = np.stack([irregular_knots(rng) for _ in range(4)])
    tok_shared = tokenize_volume_windows(v, alpha, times=shared)
    tok_per = tokenize_volume_windows(v, alpha, times=per_window)
    for i in range(4):
        assert_close(tok_shared[i], dense_volume_tokens(v[i], alpha, shared))
        assert_close(tok_per[i], dense_volume_tokens(v[i], alpha, per_window[i]))


def test_spline_is_c3_with_natural_ends():
    rng = np.random.default_rng(4)
    v = _log_volumes(rng, 3)
    v[1, [0, 20, 21, 22]] = np.nan
    t = irregular_knots(rng)
    tok = tokenize_volume_windows(v, 5.0, times=t)
    h = np.diff(t)
    for i in range(3):
        for k in range(63):
            end = _piece(tok[i, k], h[k])
            np.testing.assert_allclose(end, tok[i, k + 1, :4], rtol=0, atol=1e-9)
        last = _piece(tok[i, 63], h[63])
        np.testing.assert_allclose(tok[i, 0, 2:4], 0.0, atol=1e-10)  # x'' = x''' = 0 at t_0
        np.testing.assert_allclose(last[2:], 0.0, atol=1e-9)  # and at t_64


def test_missing_interval_is_a_cubic_piece_and_others_integrate_close_to_data():
    rng = np.random.default_rng(5)
    v = _log_volumes(rng, 1)
    v[0, 10] = np.nan
    tok = tokenize_volume_windows(v, 50.0)[0]
    assert tok[10, 4] == 0.0
    c0, c1, c2, c3, c4 = tok.T
    integrals = c0 + c1 / 2 + c2 / 6 + c3 / 24 + c4 / 120  # ∫_0^1 of each piece
    obs = ~np.isnan(v[0])
    assert np.abs(integrals[obs] - v[0, obs]).max() < 0.05  # alpha = 50: close to interpolation


def test_linear_intensity_is_reproduced_exactly():
    t = np.arange(65.0)
    a, b = 12.0, 0.03
    v = a * np.diff(t) + b * np.diff(t**2) / 2  # exact integrals of a + b t
    tok = tokenize_volume_windows(v[None], 5.0)[0]
    np.testing.assert_allclose(tok[:, 0], a + b * t[:64], atol=1e-11)
    np.testing.assert_allclose(tok[:, 1], b, atol=1e-11)
    np.testing.assert_allclose(tok[:, 2:], 0.0, atol=1e-11)


def test_not_a_quintic_smoothing_spline_of_cumulative_sums():
    # the antiderivative is a natural quintic spline, but the misfit is on increments: the tokens
    # must match the dense solve of eq. (2), which a cumulative-sum fit would not
    v = _log_volumes(np.random.default_rng(6), 1)[0]
    tok = tokenize_volume_windows(v[None], 0.5)[0]
    assert_close(tok, dense_volume_tokens(v, 0.5))


def test_zero_volume_days_as_nan_keep_tokens_finite():
    rng = np.random.default_rng(7)
    v = _log_volumes(rng, 5)
    v[:, [0, 17, 18, 63]] = np.nan  # zero volume: ln(0) is not a measurement
    tok = tokenize_volume_windows(v, 5.0)
    assert np.isfinite(tok).all()


def test_too_few_observations_give_nan_tokens():
    v = _log_volumes(np.random.default_rng(8), 3)
    v[1, :] = np.nan
    v[2, 1:] = np.nan  # one integral fixes only the line's mean over its interval
    tok = tokenize_volume_windows(v, 5.0)
    assert np.isfinite(tok[0]).all()
    assert np.isnan(tok[1:]).all()


@pytest.mark.slow  # nightly lane (the fast lane keeps its budget)
def test_fast_and_general_paths_agree_and_float32_output():
    v = _log_volumes(np.random.default_rng(9), 20)
    fast = tokenize_volume_windows(v, 5.0)
    general = tokenize_volume_windows(v, 5.0, times=np.tile(np.arange(65.0), (20, 1)))
    assert_close(fast, general, rtol=1e-12)
    tok32 = tokenize_volume_windows(v, 5.0, out_dtype=np.float32)
    assert tok32.dtype == np.float32
    np.testing.assert_allclose(tok32, fast, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"log_volume": np.zeros((3, 65))}, r"log_volume: expected shape \[n, 64\]"),
        ({"alpha": 0}, r"alpha"),
        ({"alpha": "five"}, r"alpha"),
        ({"times": np.r_[np.arange(64.0), np.inf]}, r"times: non-finite"),
        ({"times": np.arange(65.0)[::-1]}, r"strictly increasing"),
        ({"out": np.empty((3, 64, 5), dtype=np.float16)}, r"out: expected"),
    ],
)
def test_invalid_input_raises_value_error(kwargs, match):
    args = {"log_volume": np.zeros((3, 64)), "alpha": 5.0, **kwargs}
    with pytest.raises(ValueError, match=match):
        tokenize_volume_windows(**args)


def test_infinite_volume_names_the_window():
    v = np.zeros((3, 64))
    v[1, 0] = -np.inf  # log(0) slipped through: must be NaN instead
    with pytest.raises(ValueError, match="log_volume: infinite value in window 1"):
        tokenize_volume_windows(v)
