"""Price tokens (paper eq. (1)) against SciPy's smoothing spline and a dense KKT solve, plus the
spline's own properties and the wrapper's input checks."""

from __future__ import annotations

import numpy as np
import pytest

from kinematic_pipeline.tokenize import tokenize_price_windows
from kinematic_pipeline_tests.naive import assert_close, dense_price_tokens, irregular_knots, scipy_price_tokens

ALPHAS = (0.5, 5.0, 50.0)


def _walks(rng, n):
    return 4.0 + np.cumsum(rng.normal(0.0, 0.02, (n, 65)), axis=1)


@pytest.mark.parametrize("alpha", ALPHAS)
def test_fast_path_matches_scipy_smoothing_spline(alpha):
    rng = np.random.default_rng(1)
    y = _walks(rng, 12)
    tokens = tokenize_price_windows(y, alpha)
    assert tokens.shape == (12, 64, 4) and tokens.dtype == np.float64
    for i in range(len(y)):
        assert_close(tokens[i], scipy_price_tokens(y[i], alpha))


@pytest.mark.parametrize("alpha", ALPHAS)
def test_windows_with_gaps_match_scipy_on_observed_knots(alpha):
    rng = np.random.default_rng(2)
    y = _walks(rng, 10)
    y[0, 0] = y[1, 64] = np.nan  # first / last knot missing
    y[2, [0, 1, 2, 63, 64]] = np.nan
    for i in range(3, 10):
        y[i, rng.choice(65, size=rng.integers(1, 20), replace=False)] = np.nan
    tokens = tokenize_price_windows(y, alpha)
    for i in range(len(y)):
        assert_close(tokens[i], scipy_price_tokens(y[i], alpha))


@pytest.mark.parametrize("alpha", ALPHAS)
def test_nonuniform_knots_shared_and_per_window(alpha):
    rng = np.random.default_rng(3)
    y = _walks(rng, 6)
    y[4, [5, 6, 40]] = np.nan
    shared = irregular_knots(rng)
    per_window = np.stack([irregular_knots(rng) for _ in range(6)])
    tok_shared = tokenize_price_windows(y, alpha, times=shared)
    tok_per = tokenize_price_windows(y, alpha, times=per_window)
    for i in range(6):
        assert_close(tok_shared[i], scipy_price_tokens(y[i], alpha, shared))
        assert_close(tok_per[i], scipy_price_tokens(y[i], alpha, per_window[i]))


@pytest.mark.parametrize("alpha", ALPHAS)
def test_few_observations_match_dense_solve(alpha):
    # SciPy needs >= 5 points; the dense KKT twin covers 2..4 and long data-free stretches
    y = np.full((4, 65), np.nan)
    y[0, [0, 1]] = [1.0, 1.5]
    y[1, [30, 64]] = [2.0, 1.0]
    y[2, [3, 10, 61]] = [0.5, 0.7, 0.2]
    y[3, [0, 2, 4, 62]] = [1.0, 1.1, 0.9, 1.3]
    t = irregular_knots(np.random.default_rng(4))
    for times in (None, t):
        tokens = tokenize_price_windows(y, alpha, times=times)
        for i in range(len(y)):
            assert_close(tokens[i], dense_price_tokens(y[i], alpha, times))


def test_scipy_and_dense_twins_agree():
    rng = np.random.default_rng(5)
    y = _walks(rng, 1)[0]
    y[[0, 7, 8, 64]] = np.nan
    t = irregular_knots(rng)
    assert_close(dense_price_tokens(y, 5.0, t), scipy_price_tokens(y, 5.0, t))


def test_spline_is_c2_and_natural_at_both_ends():
    rng = np.random.default_rng(6)
    y = _walks(rng, 3)
    y[1, [0, 20, 21]] = np.nan
    t = irregular_knots(rng)
    tok = tokenize_price_windows(y, 5.0, times=t)
    h = np.diff(t)[:, None]
    c0, c1, c2, c3 = (tok[..., j] for j in range(4))
    s = h[:-1, 0]
    # value, slope and curvature at the right end of piece k equal those of piece k+1
    np.testing.assert_allclose(
        c0[:, :-1] + c1[:, :-1] * s + c2[:, :-1] * s**2 / 2 + c3[:, :-1] * s**3 / 6, c0[:, 1:], rtol=0, atol=1e-11
    )
    np.testing.assert_allclose(c1[:, :-1] + c2[:, :-1] * s + c3[:, :-1] * s**2 / 2, c1[:, 1:], atol=1e-11)
    np.testing.assert_allclose(c2[:, :-1] + c3[:, :-1] * s, c2[:, 1:], atol=1e-10)
    # natural ends: x''(t_0) = 0 and x''(t_64) = 0, i.e. the last token has c3 = -c2 / h
    np.testing.assert_allclose(c2[:, 0], 0.0, atol=1e-11)
    np.testing.assert_allclose(c2[:, -1] + c3[:, -1] * h[-1, 0], 0.0, atol=1e-11)


def test_linear_series_is_reproduced_exactly():
    t = irregular_knots(np.random.default_rng(7))
    y = np.stack([0.3 + 0.01 * np.arange(65.0), 2.0 - 0.5 * (t - t[0])])
    tok = tokenize_price_windows(y[:1], 5.0)
    np.testing.assert_allclose(tok[0, :, 0], y[0, :64], atol=1e-12)
    np.testing.assert_allclose(tok[0, :, 1], 0.01, atol=1e-12)
    np.testing.assert_allclose(tok[0, :, 2:], 0.0, atol=1e-12)
    tok = tokenize_price_windows(y[1:], 0.5, times=t)
    np.testing.assert_allclose(tok[0, :, 0], y[1, :64], atol=1e-12)
    np.testing.assert_allclose(tok[0, :, 1], -0.5, atol=1e-12)


def test_fast_and_general_paths_agree():
    rng = np.random.default_rng(8)
    y = _walks(rng, 20)
    fast = tokenize_price_windows(y, 5.0)
    general = tokenize_price_windows(y, 5.0, times=np.tile(np.arange(65.0), (20, 1)))  # per-window knots
    assert_close(fast, general, rtol=1e-12)


def test_too_few_observations_give_nan_tokens_only_for_that_window():
    y = _walks(np.random.default_rng(9), 3)
    y[1, :] = np.nan
    y[2, 1:] = np.nan  # a single point does not determine a line
    tok = tokenize_price_windows(y, 5.0)
    assert np.isfinite(tok[0]).all()
    assert np.isnan(tok[1:]).all()


@pytest.mark.slow  # nightly lane (the fast lane keeps its budget)
def test_float32_output_and_preallocated_out():
    y = _walks(np.random.default_rng(10), 5)
    ref = tokenize_price_windows(y, 5.0)
    tok32 = tokenize_price_windows(y, 5.0, out_dtype=np.float32)
    assert tok32.dtype == np.float32
    np.testing.assert_allclose(tok32, ref, rtol=1e-6, atol=1e-7)
    out = np.empty((5, 64, 4))
    assert tokenize_price_windows(y, 5.0, out=out) is out
    np.testing.assert_array_equal(out, ref)


def test_tokens_do_not_change_when_other_windows_change():
    y = _walks(np.random.default_rng(11), 1100)  # spans several parallel chunks
    ref = tokenize_price_windows(y, 5.0)
    y2 = y.copy()
    y2[1:] += 1.0
    y2[5, 3] = np.nan
    np.testing.assert_array_equal(tokenize_price_windows(y2, 5.0)[0], ref[0])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"log_price": np.zeros((3, 64))}, r"log_price: expected shape \[n, 65\]"),
        ({"log_price": np.zeros(65)}, r"log_price: expected shape"),
        ({"log_price": [["a"] * 65]}, r"log_price: cannot be converted"),
        ({"alpha": 0.0}, r"alpha"),
        ({"alpha": -1.0}, r"alpha"),
        ({"alpha": np.nan}, r"alpha"),
        ({"alpha": 1e200}, r"alpha"),
        ({"times": np.arange(64.0)}, r"times: expected shape"),
        ({"times": np.r_[np.arange(64.0), 63.0]}, r"strictly increasing; violated in the shared"),
        ({"times": np.tile(np.arange(65.0), (2, 1))}, r"times: expected shape"),
        ({"out_dtype": np.int32}, r"out_dtype"),
        ({"out": np.empty((3, 64, 5))}, r"out: expected"),
    ],
)
def test_invalid_input_raises_value_error(kwargs, match):
    args = {"log_price": np.zeros((3, 65)), "alpha": 5.0, **kwargs}
    with pytest.raises(ValueError, match=match):
        tokenize_price_windows(**args)


def test_errors_name_the_window():
    y = np.zeros((4, 65))
    y[2, 7] = np.inf
    with pytest.raises(ValueError, match="log_price: infinite value in window 2"):
        tokenize_price_windows(y)
    t = np.tile(np.arange(65.0), (4, 1))
    t[3, 10] = t[3, 9]
    with pytest.raises(ValueError, match="violated in window 3"):
        tokenize_price_windows(np.zeros((4, 65)), times=t)
