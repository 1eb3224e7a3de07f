"""Price tokens: the natural cubic smoothing spline of paper eq. (1), one window at a time.

For one window with knots t_0 < ... < t_64 and log prices y_0..y_64 (NaN = missing):

    min_x  ½ ∫_{t_0}^{t_64} (x'')² dt + (α²/2) Σ_{k observed} (y_k - x(t_k))²

The minimiser is the natural cubic smoothing spline, ``scipy.interpolate.make_smoothing_spline(t, y,
lam=1/α²)`` fitted on the observed knots and extended linearly outside them (zero curvature costs
nothing there). Token k describes [t_k, t_{k+1}]: x(t) = c0 + c1 s + c2 s²/2 + c3 s³/6, s = t - t_k, the
Taylor coefficients at the left knot (right-hand limits; c3 = x''' of the piece).

Consequence of the natural end condition, documented rather than hidden: x''(t_64) = 0 in every
window, so the last token always has c3 = -c2/h (h = t_64 - t_63), and likewise x''(t_0) = 0 gives
c2 = 0 in the first token (up to round-off). Tokens near a window's end carry less information
about curvature than interior ones.

Solver (see _hermite.py): unknowns x(t_k), x'(t_k) at the knots, block-tridiagonal normal equations,
O(T) per window. Two paths inside one parallel kernel, chosen per window:
- fast: knots shared by all windows (default 0..64 or a given [65] vector) and no missing value: the
  matrix depends only on (α, knots) and is factored once (cached); a window costs two triangular sweeps.
- general: missing values and/or per-window knots: the window's own matrix is built on its observed
  knots only (exact: no data between them means one cubic piece) and factored; the pieces are then
  evaluated at every knot, and outside the first/last observed knot the spline is the tangent line.
Windows with fewer than 2 observed prices do not determine a line: their tokens are NaN.
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

N_PRICE_COEF = 4  # c0..c3
_CHUNK = 512  # windows per parallel task: amortises the scratch buffers, keeps load balanced


def tokenize_price_windows(log_price, alpha: float = 5.0, times=None, *, out_dtype=np.float64, out=None):
    """Price tokens [n, 64, 4] of windows of log prices [n, 65] (NaN = missing), paper eq. (1).

    alpha: α > 0 (units time^-3/2; α = 5 per trading day is the paper's default).
    times: knot times, [65] shared or [n, 65] per window, strictly increasing; default 0..64.
    out_dtype: float64 (default) or float32 (computed in float64, rounded on store).
    out: optional preallocated C-contiguous array [n, 64, 4] to write into (returned).
    Windows with fewer than 2 observed prices get NaN tokens. Raises ValueError on bad input.
    """
    return run_tokenizer(
        log_price, N_KNOTS, "log_price", alpha, times, out_dtype, out, N_PRICE_COEF, _fast_factor, _price_kernel
    )


def _fill_fast_system(h, A, B, alpha):
    add_beam_stiffness(h, A, B)
    A[:, 0] += alpha * alpha  # every knot observed


@functools.lru_cache(maxsize=32)
def _fast_factor(alpha: float, knots: tuple | None):
    """Factor of the fast-path matrix for (α, shared knots); knots None = 0..64. Cached per key."""
    return factor_fast_system(_fill_fast_system, alpha, knots, "price")


@njit(cache=True, parallel=True, fastmath=_FMA)
def _price_kernel(y, knots, shared, a2, fM, fSinv, fP, fh, out, status):
    """Tokens of every window into out[n, 64, 4]; status[n] records the path (see _validate).

    Fast windows are gathered LANES at a time and solved side by side (SIMD across windows);
    the others are factored one by one."""
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
        nodes = np.empty(N_KNOTS, dtype=np.int64)
        mu = np.empty(N_TOKENS)
        # scratch of the fast path: [knot, lane]
        r0 = np.empty((N_KNOTS, LANES))
        r1 = np.empty((N_KNOTS, LANES))
        u0 = np.empty((N_KNOTS, LANES))
        u1 = np.empty((N_KNOTS, LANES))
        c2 = np.empty((N_TOKENS, LANES))
        c3 = np.empty((N_TOKENS, LANES))
        lane_rows = np.empty(LANES, dtype=np.int64)
        n_lanes = 0
        stop = min(n, (c + 1) * _CHUNK)
        for i in range(c * _CHUNK, stop):
            row = y[i]
            n_obs = 0
            infinite = False
            for k in range(N_KNOTS):
                v = row[k]
                if v == v:
                    n_obs += 1
                    if np.abs(v) == np.inf:
                        infinite = True
            if infinite:
                status[i] = STATUS_INFINITE
                out[i] = np.nan
            elif shared and n_obs == N_KNOTS:
                for k in range(N_KNOTS):
                    r0[k, n_lanes] = a2 * row[k]
                lane_rows[n_lanes] = i
                n_lanes += 1
                status[i] = STATUS_FAST
            elif n_obs < 2:
                status[i] = STATUS_UNDETERMINED
                out[i] = np.nan
            else:
                t = knots[0] if shared else knots[i]
                if _solve_general(row, t, a2, A, B, M, Sinv, P, r, u, h, nodes, mu, out[i]):
                    status[i] = STATUS_GENERAL
                else:
                    status[i] = STATUS_UNDETERMINED
                    out[i] = np.nan
            if n_lanes == LANES or (i == stop - 1 and n_lanes > 0):
                for w in range(n_lanes, LANES):  # idle lanes of the last batch
                    for k in range(N_KNOTS):
                        r0[k, w] = 0.0
                r1[:] = 0.0
                solve_block_tridiag_lanes(fM, fSinv, fP, r0, r1, u0, u1)
                for k in range(N_TOKENS):  # hermite_taylor, inlined so that it vectorises over lanes
                    ih = 1.0 / fh[k]
                    ih2 = ih * ih
                    for w in range(LANES):
                        delta = u0[k + 1, w] - u0[k, w]
                        d0 = u1[k, w]
                        d1 = u1[k + 1, w]
                        c2[k, w] = 6.0 * delta * ih2 - (4.0 * d0 + 2.0 * d1) * ih
                        c3[k, w] = 6.0 * (d0 + d1) * ih2 - 12.0 * delta * ih2 * ih
                for w in range(n_lanes):
                    tok = out[lane_rows[w]]
                    for k in range(N_TOKENS):
                        tok[k, 0] = u0[k, w]
                        tok[k, 1] = u1[k, w]
                        tok[k, 2] = c2[k, w]
                        tok[k, 3] = c3[k, w]
                n_lanes = 0


@njit(cache=True)
def _solve_general(row, t, a2, A, B, M, Sinv, P, r, u, h, nodes, mu, tok):
    """One window on its observed knots only (see write_tokens), tokens into tok; False if undetermined."""
    m = 0
    for k in range(N_KNOTS):
        if row[k] == row[k]:
            nodes[m] = k
            m += 1
    for e in range(m - 1):
        h[e] = t[nodes[e + 1]] - t[nodes[e]]
        mu[e] = 0.0
    A[:m] = 0.0
    B[: m - 1] = 0.0
    add_beam_stiffness(h[: m - 1], A, B)
    for e in range(m):  # data term (α²/2)(y_k - x_k)² at every node
        A[e, 0] += a2
        r[e, 0] = a2 * row[nodes[e]]
        r[e, 1] = 0.0
    if not factor_block_tridiag(A[:m], B[: m - 1], M[:m], Sinv[:m], P[: m - 1]):
        return False
    solve_block_tridiag(M[:m], Sinv[:m], P[: m - 1], r[:m], u[:m])
    write_tokens(t, nodes, m, u, mu, tok)
    return True
