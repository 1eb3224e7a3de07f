"""RawGPT-FD and RawGPT tokens against their loop twins, hand-built cases and the missing-value policy."""

from __future__ import annotations

import numpy as np
import pytest

from kinematic_pipeline.tokenize.baselines import fd_tokens, raw_tokens
from kinematic_pipeline_tests.naive_baselines import naive_fd_tokens, naive_raw_tokens

RAW_ZERO_CHANNELS = [2, 3, 6, 7, 8]  # D^2, D^3 of price; D^2..D^4 of volume


def random_windows(n: int, seed: int, missing: float = 0.0):
    rng = np.random.default_rng(seed)
    log_price = 4.0 + np.cumsum(rng.normal(0, 0.02, (n, 65)), axis=1)
    log_volume = rng.normal(14.0, 1.0, (n, 64))
    log_price[rng.random(log_price.shape) < missing] = np.nan
    log_volume[rng.random(log_volume.shape) < missing] = np.nan
    return log_price, log_volume


def adversarial_windows():
    """Leading, trailing, interior and total gaps, single valid values, in both channels."""
    log_price, log_volume = random_windows(8, seed=1)
    log_price[0, :5] = np.nan  # leading gap
    log_volume[0, -3:] = np.nan  # trailing gap
    log_price[1, 20:40] = np.nan  # long interior gap
    log_volume[1, ::2] = np.nan
    log_price[2] = np.nan  # a channel entirely missing
    log_volume[3] = np.nan
    log_price[4, :64] = np.nan  # only the last value
    log_volume[4, 1:] = np.nan  # only the first value
    log_price[5, 1:] = np.nan
    log_volume[5, :63] = np.nan
    return log_price, log_volume


@pytest.mark.parametrize("missing", [0.0, 0.1, 0.6])
def test_fd_tokens_match_the_binomial_loop(missing):
    log_price, log_volume = random_windows(40, seed=int(missing * 10), missing=missing)
    np.testing.assert_allclose(
        fd_tokens(log_price, log_volume), naive_fd_tokens(log_price, log_volume), rtol=0, atol=1e-12
    )


def test_tokens_match_the_loop_on_adversarial_gaps():
    log_price, log_volume = adversarial_windows()
    for fast, slow in ((fd_tokens, naive_fd_tokens), (raw_tokens, naive_raw_tokens)):
        got = fast(log_price, log_volume)
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, slow(log_price, log_volume), rtol=0, atol=1e-12)
    assert (fd_tokens(log_price[2:3], log_volume[2:3])[0, :, :4] == 0).all()  # all-missing -> zeros


def test_tokens_equal_the_loop_exactly_on_dyadic_values():
    # Small multiples of 1/8: every sum is exact, so the two summation orders must agree bit for bit.
    rng = np.random.default_rng(9)
    log_price = rng.integers(-64, 64, (30, 65)) / 8.0
    log_volume = rng.integers(-64, 64, (30, 64)) / 8.0
    log_price[rng.random(log_price.shape) < 0.2] = np.nan
    log_volume[rng.random(log_volume.shape) < 0.2] = np.nan
    np.testing.assert_array_equal(fd_tokens(log_price, log_volume), naive_fd_tokens(log_price, log_volume))
    np.testing.assert_array_equal(raw_tokens(log_price, log_volume), naive_raw_tokens(log_price, log_volume))


def test_raw_tokens_are_fd_tokens_with_higher_orders_zeroed():
    log_price, log_volume = random_windows(20, seed=3, missing=0.1)
    fd = fd_tokens(log_price, log_volume)
    raw = raw_tokens(log_price, log_volume)
    assert (raw[:, :, RAW_ZERO_CHANNELS] == 0).all()
    keep = [0, 1, 4, 5]
    np.testing.assert_array_equal(raw[:, :, keep], fd[:, :, keep])


def test_hand_built_cubic_and_alignment():
    k = np.arange(65.0)
    log_price = (k**3)[None, :]  # D^3 of a cubic is 3! = 6
    log_volume = (2.0 * np.arange(64.0) + 1.0)[None, :]  # a line: D = 2, higher orders 0
    tok = fd_tokens(log_price, log_volume)[0]
    np.testing.assert_array_equal(tok[:, 0], k[1:] ** 3)  # price token k carries knot k+1
    np.testing.assert_array_equal(tok[:, 1], k[1:] ** 3 - k[:-1] ** 3)
    np.testing.assert_array_equal(tok[1:, 2], 6.0 * k[1:-1])  # D^2 (k+1)^3 = 6k at knot k+1, k >= 1
    assert tok[0, 2] == 0.0 and tok[0, 3] == 0.0 and tok[1, 3] == 0.0  # would reach before knot 0
    np.testing.assert_array_equal(tok[2:, 3], 6.0)
    np.testing.assert_array_equal(tok[:, 4], log_volume[0])  # volume token k carries measurement k
    np.testing.assert_array_equal(tok[1:, 5], 2.0)
    assert tok[0, 5] == 0.0
    assert (tok[:, 6:] == 0).all()


def test_a_gap_is_carried_forward_and_the_jump_lands_after_it():
    log_price = np.full((1, 65), 1.0)
    log_price[0, 30:] = 2.0
    log_price[0, 28:33] = np.nan  # knots 28..32 missing: 1.0 carried until knot 33 shows 2.0
    log_volume = np.zeros((1, 64))
    tok = fd_tokens(log_price, log_volume)[0]
    np.testing.assert_array_equal(tok[26:32, 0], 1.0)  # tokens 26..31 carry knots 27..32
    assert tok[32, 0] == 2.0 and tok[32, 1] == 1.0
    assert (np.delete(tok[:, 1], 32) == 0).all()


def test_tokens_do_not_depend_on_later_knots_without_gaps():
    log_price, log_volume = random_windows(1, seed=5)
    base = fd_tokens(log_price, log_volume)[0]
    for j in (10, 40, 64):
        p = log_price.copy()
        p[0, j] += 1.0
        changed = np.flatnonzero((fd_tokens(p, log_volume)[0, :, :4] != base[:, :4]).any(axis=1))
        assert changed.min() == j - 1  # price token k sees knots <= k+1 only
    for j in (0, 33, 63):
        v = log_volume.copy()
        v[0, j] += 1.0
        changed = np.flatnonzero((fd_tokens(log_price, v)[0, :, 4:] != base[:, 4:]).any(axis=1))
        assert changed.min() == j  # volume token k sees measurements <= k only
        assert (fd_tokens(log_price, v)[0, :, :4] == base[:, :4]).all()


def test_out_dtype_and_out_argument():
    log_price, log_volume = random_windows(10, seed=6, missing=0.1)
    ref = fd_tokens(log_price, log_volume)
    f32 = fd_tokens(log_price, log_volume, out_dtype=np.float32)
    assert f32.dtype == np.float32
    np.testing.assert_allclose(f32, ref.astype(np.float32), rtol=1e-6, atol=1e-6)
    out = np.full((10, 64, 9), np.nan)
    assert raw_tokens(log_price, log_volume, out=out) is out
    np.testing.assert_array_equal(out, raw_tokens(log_price, log_volume))
    assert fd_tokens(np.empty((0, 65)), np.empty((0, 64))).shape == (0, 64, 9)


def test_bad_inputs_raise():
    log_price, log_volume = random_windows(3, seed=2)
    with pytest.raises(ValueError, match="log_price"):
        fd_tokens(log_price[:, :64], log_volume)
    with pytest.raises(ValueError, match="windows"):
        fd_tokens(log_price, log_volume[:2])
    log_volume[1, 5] = -np.inf
    with pytest.raises(ValueError, match="log_volume: infinite value in window 1"):
        raw_tokens(log_price, log_volume)
