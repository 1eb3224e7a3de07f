"""Throughput of the spline tokenizers (not a test): windows/s of the price and volume kernels on random
walk windows, against SciPy's per-window make_smoothing_spline loop, plus the general path on windows
with gaps and the baselines' finite-difference and raw tokens (1% missing) beside them.

    python benchmarks/bench_tokenize_kernels.py [n_windows]     (default 1,000,000)

Kernels write into preallocated, already touched outputs (what a shard writer does); "alloc" rows
include allocating a fresh output array each call. Best of `REPEATS` runs, after a warm-up that
compiles the kernels.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from scipy.interpolate import make_smoothing_spline

from kinematic_pipeline.tokenize import fd_tokens, raw_tokens, tokenize_price_windows, tokenize_volume_windows

ALPHA = 5.0  # the paper's default
REPEATS = 3  # best-of runs per row
N_SCIPY = 2_000  # windows for the (slow) SciPy loop; its rate is extrapolated
GAP_FRACTION = 0.05  # share of missing measurements in the general-path rows


def _best_rate(fn, n: int) -> float:
    best = np.inf
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return n / best


def _scipy_price_tokens(y: np.ndarray) -> np.ndarray:
    t = np.arange(65.0)
    out = np.empty((len(y), 64, 4))
    for i, row in enumerate(y):
        spl = make_smoothing_spline(t, row, lam=1.0 / ALPHA**2)
        for j in range(4):
            out[i, :, j] = spl(t[:-1], nu=j)
    return out


def _fast_rows(log_price, log_volume, dtype, label):
    """Fast-path rates into preallocated (touched) outputs, freed on return."""
    n = len(log_price)
    price_out = tokenize_price_windows(log_price, ALPHA, out_dtype=dtype)
    volume_out = tokenize_volume_windows(log_volume, ALPHA, out_dtype=dtype)
    r_price = _best_rate(lambda: tokenize_price_windows(log_price, ALPHA, out=price_out), n)
    r_volume = _best_rate(lambda: tokenize_volume_windows(log_volume, ALPHA, out=volume_out), n)
    return [
        (f"price  fast  {label}", n, r_price),
        (f"volume fast  {label}", n, r_volume),
        (f"price+volume fast {label}", n, 1.0 / (1.0 / r_price + 1.0 / r_volume)),
    ]


def main(n: int) -> None:
    rng = np.random.default_rng(0)
    log_price = 4.0 + np.cumsum(rng.normal(0.0, 0.02, (n, 65)), axis=1)
    log_volume = 14.0 + np.cumsum(rng.normal(0.0, 0.3, (n, 64)), axis=1)
    rows = []

    # warm-up: compile every specialisation, touch the outputs once
    for dtype in (np.float64, np.float32):
        tokenize_price_windows(log_price[:64], ALPHA, out_dtype=dtype)
        tokenize_volume_windows(log_volume[:64], ALPHA, out_dtype=dtype)
    for dtype, label in ((np.float64, "float64"), (np.float32, "float32")):
        rows += _fast_rows(log_price, log_volume, dtype, label)

    r_alloc = _best_rate(lambda: tokenize_price_windows(log_price, ALPHA), n)
    rows.append(("price  fast  float64 alloc", n, r_alloc))

    n_gap = min(n, 200_000)
    gp = log_price[:n_gap].copy()
    gv = log_volume[:n_gap].copy()
    gp[rng.random(gp.shape) < GAP_FRACTION] = np.nan
    gv[rng.random(gv.shape) < GAP_FRACTION] = np.nan
    gp_out = tokenize_price_windows(gp, ALPHA)
    gv_out = tokenize_volume_windows(gv, ALPHA)
    rows.append(
        ("price  general (5% gaps)", n_gap, _best_rate(lambda: tokenize_price_windows(gp, ALPHA, out=gp_out), n_gap))
    )
    rows.append(
        ("volume general (5% gaps)", n_gap, _best_rate(lambda: tokenize_volume_windows(gv, ALPHA, out=gv_out), n_gap))
    )
    knots = np.tile(np.arange(65.0), (n_gap, 1))
    rows.append(
        (
            "price  general (per-window knots)",
            n_gap,
            _best_rate(lambda: tokenize_price_windows(log_price[:n_gap], ALPHA, knots, out=gp_out), n_gap),
        )
    )

    bp, bv = log_price[:n_gap].copy(), log_volume[:n_gap].copy()  # the baselines' tokens: 1% missing per channel
    bp[rng.random(bp.shape) < 0.01] = np.nan
    bv[rng.random(bv.shape) < 0.01] = np.nan
    fd_tokens(bp[:10], bv[:10]), raw_tokens(bp[:10], bv[:10])  # compile
    b_out = fd_tokens(bp, bv)  # touched once; then written in place
    for name, kernel in (("fd_tokens (RawGPT-FD, 1% gaps)", fd_tokens), ("raw_tokens (RawGPT, 1% gaps)", raw_tokens)):
        rows.append((name, n_gap, _best_rate(lambda k=kernel: k(bp, bv, out=b_out), n_gap)))

    sub = log_price[:N_SCIPY]
    t0 = time.perf_counter()
    ref = _scipy_price_tokens(sub)
    r_scipy = N_SCIPY / (time.perf_counter() - t0)
    rows.append(("scipy make_smoothing_spline loop", N_SCIPY, r_scipy))
    err = np.abs(tokenize_price_windows(sub, ALPHA) - ref).max()

    print(f"{'kernel':36s} {'windows':>10s} {'windows/s':>14s}")
    for name, count, rate in rows:
        print(f"{name:36s} {count:10,d} {rate:14,.0f}")
    r_price = rows[0][2]
    print(
        f"speed-up price fast float64 vs SciPy: {r_price / r_scipy:,.0f}x "
        f"(max |token diff| on {N_SCIPY} windows: {err:.1e})"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
