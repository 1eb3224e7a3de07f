"""Volume tokens: the quartic smoothing spline of paper eq. (2), one window at a time.

For one window with knots t_0 < ... < t_64 and log volumes ỹ_0..ỹ_63 (NaN = missing), measurement k
being the integral of the volume intensity over [t_k, t_{k+1}]:

    min_x  ½ ∫_{t_0}^{t_64} (x'')² dt + (α²/2) Σ_{k observed} (ỹ_k - ∫_{t_k}^{t_{k+1}} x dt)²

Euler-Lagrange: x'''' is constant on each interval, so the minimiser is a C3 quartic spline with
x'' = x''' = 0 at both ends (its antiderivative is a natural quintic spline; but the misfit is on
increments, so a quintic smoothing spline of cumulative sums is not the answer). On an interval with
a missing measurement x'''' = 0 (the piece is cubic). Token k describes [t_k, t_{k+1}]:
x(t) = c0 + c1 s + c2 s²/2 + c3 s³/6 + c4 s⁴/24, s = t - t_k (Taylor coefficients at the left knot).

Exact reduction to the price machinery (_hermite.py). On [t_k, t_k + h] write the quartic as the
cubic Hermite piece H through (x_k, x'_k, x_{k+1}, x'_{k+1}) plus μ b(s/h), b(σ) = σ²(1-σ)². b and b'
vanish at both ends and ∫H''b'' = 0, so ∫(x'')² = ∫(H'')² + (4/5) μ²/h³ and ∫x = ∫H + hμ/30.
Minimising over μ in closed form leaves the Hermite energy plus a weighted misfit on ∫H:

    (ω_k/2) (ỹ_k - h (x_k + x_{k+1})/2 - h² (x'_k - x'_{k+1})/12)²,   ω_k = 720 α² / (720 + α² h⁵),
    μ_k = 30 α² h⁴ ρ_k / (720 + α² h⁵)   (ρ_k the residual inside the square; μ_k = 0 if missing).

So the normal equations are again block tridiagonal in (x_k, x'_k), and the tokens follow as
c2 = H'' + 2μ/h², c3 = H''' - 12μ/h³, c4 = 24μ/h⁴.

Paths as in price.py: fast (shared knots, no missing value; factor cached per (α, knots)) and general
(per window). The penalty's null space is the lines, so at least 2 observed intervals are needed:
windows with fewer get NaN tokens (a single integral fixes only the line's mean over its interval).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import njit, prange

from kinematic_pipeline.tokenize._driver import factor_fast_system, run_tokenizer
from kinematic_pipeline.tokenize._hermite import (
    _FMA,
    LANES,
    add_beam_stiffness,
    factor_block_tridiag,
    solve_block_tridiag,
    solve_block_tridiag_lanes,
    write_tokens,
)
from kinematic_pipeline.tokenize._validate import (
    N_KNOTS,
    N_TOKENS,
    STATUS_FAST,
    STATUS_GENERAL,
    STATUS_INFINITE,
    STATUS_UNDETERMINED,
)

N_VOLUME_COEF = 5  # c~0..c~4
_CHUNK = 512  # windows per parallel task


def tokenize_volume_windows(log_volume, alpha: float = 5.0, times=None, *, out_dtype=np.float64, out=None):
    """Volume tokens [n, 64, 5] of windows of log volumes [n, 64] (NaN = missing), paper eq. (2).

    alpha: α > 0 (units time^-5/2). times: knot times, [65] shared or [n, 65] per window, strictly
    increasing; default 0..64. Measurement k is the integral over [t_k, t_{k+1}].
    out_dtype: float64 (default) or float32. out: optional preallocated C-contiguous [n, 64, 5].
    Windows with fewer than 2 observed volumes get NaN tokens. Raises ValueError on bad input.
    """
    return run_tokenizer(
        log_volume, N_TOKENS, "log_volume", alpha, times, out_dtype, out, N_VOLUME_COEF, _fast_factor, _volume_kernel
    )


def _fill_fast_system(h, A, B, alpha):
    _assemble(h, np.ones(N_TOKENS), alpha * alpha, A, B, np.zeros((N_KNOTS, 2)))  # every interval observed


@functools.lru_cache(maxsize=32)
def _fast_factor(alpha: float, knots: tuple | None):
    """Factor of the fast-path matrix for (α, shared knots); knots None = 0..64. Cached per key."""
    return factor_fast_system(_fill_fast_system, alpha, knots, "volume")


@njit(cache=True)
def _assemble(h, yv, a2, A, B, r):
    """Normal equations of one window: Hermite energy + reduced misfit of every observed element.
    h[E] element lengths, yv[E] their measurements (NaN = none); A[E+1], B[E], r[E+1] overwritten."""
    A[:] = 0.0
    B[:] = 0.0
    r[:] = 0.0
    add_beam_stiffness(h, A, B)
    for k in range(yv.shape[0]):
        v = yv[k]
        if v == v:
            hk = h[k]
            w = 720.0 * a2 / (720.0 + a2 * hk**5)
            l0 = 0.5 * hk  # ∫H = l0 (x_k + x_k+1) + l1 (x'_k - x'_k+1)
            l1 = hk * hk / 12.0
            A[k, 0] += w * l0 * l0
            A[k, 1] += w * l0 * l1
            A[k, 2] += w * l1 * l1
            A[k + 1, 0] += w * l0 * l0
            A[k + 1, 1] -= w * l0 * l1
            A[k + 1, 2] += w * l1 * l1
            B[k, 0] += w * l0 * l0
            B[k, 1] -= w * l0 * l1
            B[k, 2] += w * l1 * l0
            B[k, 3] -= w * l1 * l1
            r[k, 0] += w * v * l0
            r[k, 1] += w * v * l1
            r[k + 1, 0] += w * v * l0
            r[k + 1, 1] -= w * v * l1


@njit(cache=True)
def _bump(h, a2, v, x0, d0, x1, d1):
    """Amplitude μ of the quartic bump of an interval with measurement v (0 if v is missing)."""
    if v != v:
        return 0.0
    resid = v - (0.5 * h * (x0 + x1) + h * h * (d0 - d1) / 12.0)
    h4 = h * h * h * h
    return 30.0 * a2 * h4 * resid / (720.0 + a2 * h4 * h)


@njit(cache=True)
def _solve_general(row, t, a2, A, B, M, Sinv, P, r, u, h, ye, nodes, mu, tok):
    """One window on the knots that bound an observed interval (see write_tokens); False if undetermined.
    A run of missing intervals becomes one data-free element, ye[e] its measurement or NaN."""
    m = 0
    for k in range(N_TOKENS):
        if row[k] == row[k]:
            if m == 0 or nodes[m - 1] != k:
                nodes[m] = k
                m += 1
            nodes[m] = k + 1
            m += 1
    for e in range(m - 1):
        h[e] = t[nodes[e + 1]] - t[nodes[e]]
        ye[e] = row[nodes[e]] if nodes[e + 1] == nodes[e] + 1 else np.nan
    _assemble(h[: m - 1], ye[: m - 1], a2, A[:m], B[: m - 1], r[:m])
    if not factor_block_tridiag(A[:m], B[: m - 1], M[:m], Sinv[:m], P[: m - 1]):
        return False
    solve_block_tridiag(M[:m], Sinv[:m], P[: m - 1], r[:m], u[:m])
    for e in range(m - 1):
        mu[e] = _bump(h[e], a2, ye[e], u[e, 0], u[e, 1], u[e + 1, 0], u[e + 1, 1])
    write_tokens(t, nodes, m, u, mu, tok)
    return True


@njit(cache=True, parallel=True, fastmath=_FMA)
def _volume_kernel(y, knots, shared, a2, fM, fSinv, fP, fh, out, status):
    """Tokens of every window into out[n, 64, 5]; status[n] records the path (see _validate).
    Fast windows are solved LANES at a time (SIMD across windows), the others one by one."""
    n = y.shape[0]
    n_chunks = (n + _CHUNK - 1) // _CHUNK
    for c in prange(n_chunks):
        # scratch of the general path
        r = np.empty((N_KNOTS, 2))
        u = np.empty((N_KNOTS, 2))
        A = np.empty((N_KNOTS, 3))
        B = np.empty((N_TOKENS, 4))
        M = np.empty((N_KNOTS, 4))
        Sinv = np.empty((N_KNOTS, 3))
        P = np.empty((N_TOKENS, 4))
        h = np.empty(N_TOKENS)
        ye = np.empty(N_TOKENS)
        nodes = np.empty(N_KNOTS, dtype=np.int64)
        mu = np.empty(N_TOKENS)
        # scratch of the fast path: [knot or interval, lane]
        yl = np.empty((N_TOKENS, LANES))
        r0 = np.empty((N_KNOTS, LANES))
        r1 = np.empty((N_KNOTS, LANES))
        u0 = np.empty((N_KNOTS, LANES))
        u1 = np.empty((N_KNOTS, LANES))
        cs = np.empty((N_TOKENS, 3, LANES))
        wl0 = np.empty(N_TOKENS)  # ω_k h_k / 2 and ω_k h_k² / 12 of the shared knots
        wl1 = np.empty(N_TOKENS)
        for k in range(N_TOKENS):
            hk = fh[k]
            w = 720.0 * a2 / (720.0 + a2 * hk**5)
            wl0[k] = w * 0.5 * hk
            wl1[k] = w * hk * hk / 12.0
        lane_rows = np.empty(LANES, dtype=np.int64)
        n_lanes = 0
        stop = min(n, (c + 1) * _CHUNK)
        for i in range(c * _CHUNK, stop):
            row = y[i]
            n_obs = 0
            infinite = False
            for k in range(N_TOKENS):
                v = row[k]
                if v == v:
                    n_obs += 1
                    if np.abs(v) == np.inf:
                        infinite = True
            if infinite:
                status[i] = STATUS_INFINITE
                out[i] = np.nan
            elif shared and n_obs == N_TOKENS:
                for k in range(N_TOKENS):
                    yl[k, n_lanes] = row[k]
                lane_rows[n_lanes] = i
                n_lanes += 1
                status[i] = STATUS_FAST
            elif n_obs < 2:
                status[i] = STATUS_UNDETERMINED
                out[i] = np.nan
            else:
                t = knots[0] if shared else knots[i]
                if _solve_general(row, t, a2, A, B, M, Sinv, P, r, u, h, ye, nodes, mu, out[i]):
                    status[i] = STATUS_GENERAL
                else:
                    status[i] = STATUS_UNDETERMINED
                    out[i] = np.nan
            if n_lanes == LANES or (i == stop - 1 and n_lanes > 0):
                for w in range(n_lanes, LANES):  # idle lanes of the last batch
                    for k in range(N_TOKENS):
                        yl[k, w] = 0.0
                _solve_lanes(yl, a2, wl0, wl1, fM, fSinv, fP, fh, r0, r1, u0, u1, cs)
                for w in range(n_lanes):
                    tok = out[lane_rows[w]]
                    for k in range(N_TOKENS):
                        tok[k, 0] = u0[k, w]
                        tok[k, 1] = u1[k, w]
                        tok[k, 2] = cs[k, 0, w]
                        tok[k, 3] = cs[k, 1, w]
                        tok[k, 4] = cs[k, 2, w]
                n_lanes = 0


@njit(cache=True, fastmath=_FMA)
def _solve_lanes(yl, a2, wl0, wl1, fM, fSinv, fP, fh, r0, r1, u0, u1, cs):
    """Fast path for LANES fully observed windows yl[64, LANES] (shared knots, pre-factored)."""
    for w in range(LANES):
        r0[0, w] = wl0[0] * yl[0, w]
        r1[0, w] = wl1[0] * yl[0, w]
    for k in range(1, N_TOKENS):
        a0 = wl0[k - 1]
        a1 = wl1[k - 1]
        b0 = wl0[k]
        b1 = wl1[k]
        for w in range(LANES):
            r0[k, w] = a0 * yl[k - 1, w] + b0 * yl[k, w]
            r1[k, w] = b1 * yl[k, w] - a1 * yl[k - 1, w]
    k = N_TOKENS
    for w in range(LANES):
        r0[k, w] = wl0[k - 1] * yl[k - 1, w]
        r1[k, w] = -wl1[k - 1] * yl[k - 1, w]
    solve_block_tridiag_lanes(fM, fSinv, fP, r0, r1, u0, u1)
    for k in range(N_TOKENS):  # hermite_taylor and _bump inlined (no missing value) to vectorise
        hk = fh[k]
        ih = 1.0 / hk
        ih2 = ih * ih
        l0 = 0.5 * hk
        l1 = hk * hk / 12.0
        h4 = hk * hk * hk * hk
        g = 30.0 * a2 * h4 * ih2 / (720.0 + a2 * h4 * hk)  # μ / h² per unit residual
        for w in range(LANES):
            x0 = u0[k, w]
            d0 = u1[k, w]
            x1 = u0[k + 1, w]
            d1 = u1[k + 1, w]
            delta = x1 - x0
            mu = g * (yl[k, w] - (l0 * (x0 + x1) + l1 * (d0 - d1)))
            cs[k, 0, w] = 6.0 * delta * ih2 - (4.0 * d0 + 2.0 * d1) * ih + 2.0 * mu
            cs[k, 1, w] = (6.0 * (d0 + d1) - 12.0 * delta * ih) * ih2 - 12.0 * mu * ih
            cs[k, 2, w] = 24.0 * mu * ih2
