"""Slow, obviously correct twins of the project's numerical kernels (one window at a time)."""

from __future__ import annotations

import math

import numpy as np
from scipy.interpolate import make_smoothing_spline

# ----------------------------------------------------------------------------------------------------
# Spline tokens (twins of kinematic_pipeline/tokenize/price.py and volume.py)
#
# Token k of a window holds the Taylor coefficients of its spline at the left knot t_k (right-hand
# limits): price c0..c3, volume c~0..c~4. A window with fewer than 2 measurements gets NaN tokens.


def scipy_price_tokens(y: np.ndarray, alpha: float, t: np.ndarray | None = None) -> np.ndarray:
    """Price tokens [64, 4] of one window y[65] by SciPy's natural cubic smoothing spline.

    Fitted on the observed knots only (lam = 1/alpha²); outside [first, last observed knot] the
    minimiser of eq. (1) is the tangent line (zero curvature is free), which BSpline's polynomial
    extrapolation would not give, so it is written out here. Needs >= 5 observed points (SciPy).
    """
    t = np.arange(65.0) if t is None else np.asarray(t, dtype=float)
    obs = ~np.isnan(y)
    if obs.sum() < 2:
        return np.full((64, 4), np.nan)
    to, yo = t[obs], y[obs]
    spl = make_smoothing_spline(to, yo, lam=1.0 / alpha**2)
    tokens = np.empty((64, 4))
    for k in range(64):
        if t[k] < to[0] or t[k] >= to[-1]:
            edge = to[0] if t[k] < to[0] else to[-1]
            value, slope = float(spl(edge)), float(spl(edge, nu=1))
            tokens[k] = (value + slope * (t[k] - edge), slope, 0.0, 0.0)
        else:
            tokens[k] = [float(spl(t[k], nu=j)) for j in range(4)]
    return tokens


def dense_price_tokens(y: np.ndarray, alpha: float, t: np.ndarray | None = None) -> np.ndarray:
    """Price tokens [64, 4] of eq. (1) by the dense KKT solve of `dense_spline_tokens`."""
    return dense_spline_tokens(_knots(t), alpha, degree=3, point_values=np.asarray(y, float))


def dense_volume_tokens(yv: np.ndarray, alpha: float, t: np.ndarray | None = None) -> np.ndarray:
    """Volume tokens [64, 5] of eq. (2) by the dense KKT solve of `dense_spline_tokens`."""
    return dense_spline_tokens(_knots(t), alpha, degree=4, interval_values=np.asarray(yv, float))


def dense_spline_tokens(t, alpha, degree, point_values=None, interval_values=None) -> np.ndarray:
    """Solve eq. (1) (point_values[65]) or eq. (2) (interval_values[64]) from first principles.

    Unknowns: the Taylor coefficients c[k, j] (j = 0..degree) of every piece at its left knot, so
    x(t_k + s) = sum_j c[k, j] s^j / j!. Constraints: C0..C(degree-1) continuity at interior knots.
    Objective: ½ ∫(x'')² (exact per piece: x''(s) = sum_{j>=2} c_j s^(j-2)/(j-2)!) plus
    (alpha²/2) sum of squared misfits over the observed measurements (NaN = missing). The KKT system
    [[H, Cᵀ], [C, 0]] is solved densely. The penalty's null space is the lines, so fewer than 2
    measurements give NaN. Any C(degree-1) spline of this degree with knots t_k is admissible, and the
    minimiser of (1) or (2) is one (Euler-Lagrange), so this is the exact solution.
    """
    n_int = len(t) - 1
    m = degree + 1
    nv = n_int * m
    values = point_values if point_values is not None else interval_values
    obs = ~np.isnan(values)
    if obs.sum() < 2:
        return np.full((n_int, m), np.nan)
    H = np.zeros((nv, nv))
    g = np.zeros(nv)
    for k in range(n_int):
        h = t[k + 1] - t[k]
        for i in range(2, m):
            for j in range(2, m):
                p = i + j - 3  # ∫_0^h s^(i-2) s^(j-2) ds = h^p / p
                H[k * m + i, k * m + j] = h**p / (p * math.factorial(i - 2) * math.factorial(j - 2))
    rows, data = [], []
    if point_values is not None:
        for k in range(n_int + 1):
            row = np.zeros(nv)
            if k < n_int:
                row[k * m] = 1.0
            else:  # last knot: end of the last piece
                h = t[k] - t[k - 1]
                row[(k - 1) * m : k * m] = [h**j / math.factorial(j) for j in range(m)]
            rows.append(row)
            data.append(point_values[k])
    else:
        for k in range(n_int):
            row = np.zeros(nv)
            h = t[k + 1] - t[k]
            row[k * m : (k + 1) * m] = [h ** (j + 1) / math.factorial(j + 1) for j in range(m)]
            rows.append(row)
            data.append(interval_values[k])
    for row, v in zip(rows, data, strict=True):
        if not np.isnan(v):
            H += alpha**2 * np.outer(row, row)
            g += alpha**2 * v * row
    C = np.zeros(((n_int - 1) * degree, nv))
    for k in range(n_int - 1):
        h = t[k + 1] - t[k]
        for i in range(degree):  # i-th derivative at the end of piece k = that of piece k+1 at 0
            for j in range(i, m):
                C[k * degree + i, k * m + j] = h ** (j - i) / math.factorial(j - i)
            C[k * degree + i, (k + 1) * m + i] = -1.0
    kkt = np.block([[H, C.T], [C, np.zeros((C.shape[0], C.shape[0]))]])
    sol = np.linalg.solve(kkt, np.concatenate([g, np.zeros(C.shape[0])]))
    return sol[:nv].reshape(n_int, m)


def _knots(t) -> np.ndarray:
    return np.arange(65.0) if t is None else np.asarray(t, dtype=float)


def assert_close(got, ref, rtol=1e-9):
    """``got`` equals the reference ``ref`` to ``rtol`` of its largest magnitude (at least 1), NaN where it is NaN."""
    assert got.shape == ref.shape
    scale = max(1.0, float(np.nanmax(np.abs(ref))))
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    assert float(np.nanmax(np.abs(got - ref), initial=0.0)) <= rtol * scale


def irregular_knots(rng):
    """65 knot times in calendar days, gaps of 0.2 to 3 days (weekends, holidays)."""
    return 100.0 + np.cumsum(rng.uniform(0.2, 3.0, 65))
