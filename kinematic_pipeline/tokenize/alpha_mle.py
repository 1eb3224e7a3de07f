"""Smoothing parameter alpha by maximum (restricted) marginal likelihood.

Price, paper eq. (1): min 1/2 int v^2 dt + alpha^2/2 sum_k w_k^2 with x'' = v, y_k = x(t_k) + w_k.
Read as a negative log posterior, 1/2 int v^2 is the prior of v = white noise of spectral density
sigma_p^2 = 1 and alpha^2/2 sum w^2 the likelihood of w ~ N(0, 1/alpha^2); multiplying both by any common
scale s leaves the minimizer unchanged, so the spline is the posterior mean of the integrated Wiener
process (IWP) model

    x'' = white noise of density q,   y_k = x(t_k) + w_k,   w_k ~ N(0, r),   alpha^2 = q / r,

for every s = q. The likelihood is computed with q = 1, r = 1 / alpha^2 in units of s, and s is
concentrated out (profile likelihood), so only alpha is searched.

The initial state [x, x'] has an improper flat prior (the penalty's null space: constants and lines).
It is handled exactly by the univariate exact diffuse Kalman filter of Koopman & Durbin (2000): the
state covariance is P_* + kappa P_inf with kappa -> infinity, the first two informative observations
carry the diffuse part and contribute only log F_inf (free of alpha), after which P_inf is exactly 0
(the diffuse rank is 2 and any two distinct observations identify a line). The result is the restricted
(REML) likelihood up to a constant that depends on the design only; the tests check that against a dense
REML computation.

Volume, paper eq. (2): y~_k = int over [t_k, t_k+1] of x~(t) dt + w~_k, the same IWP prior. This is exact
too: over each interval the 2-state [x, x'] is augmented with the running integral I (started at 0 at
the left knot), the measurement observes I at the right knot, and I is dropped again. Same alpha^2 = q/r,
but alpha has units time^-5/2 instead of time^-3/2.

Missing measurements (NaN) skip the update; non-uniform times change the step h. O(N) per series.

Pooled estimate (corpus): one alpha shared by all series, each series with its own scale s_j (its own
volatility level), i.e. the sum of the per-series profile log-likelihoods. Tickers differ in volatility
by an order of magnitude; a shared scale would let the noisiest names dominate. ``shared_scale=True``
gives the one-scale variant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit, prange
from scipy.optimize import minimize_scalar

from kinematic_pipeline.tokenize._validate import check_alpha

LOG_ALPHA_BOUNDS = (math.log(1e-3), math.log(1e3))  # search range of ln(alpha)
_GRID_POINTS = 49  # coarse grid on ln(alpha) that brackets the global maximum before Brent refines it
_XATOL = 1e-7  # Brent's tolerance on ln(alpha)
_N_DIFFUSE = 2  # rank of the diffuse prior: level and slope


@dataclass(frozen=True)
class AlphaEstimate:
    alpha: float  # maximizer of the profile restricted likelihood (units time^-3/2 price, ^-5/2 volume)
    log_likelihood: float  # profile restricted (REML) log-likelihood at alpha, trend basis [1, t - t_0]
    n_obs: int  # non-missing measurements used (summed over series when pooled)
    converged: bool  # optimizer succeeded and the maximum is not on a bound of LOG_ALPHA_BOUNDS
    scale: float = float("nan")  # profiled process-noise density q (measurement variance q / alpha^2);
    # NaN for a pooled estimate with per-series scales


# ----------------------------------------------------------------------------------------------------
# Kernels


@njit(cache=True)
def _propagate(a, P, U, G, Q, a3, P3, U3):
    """a3 = G a, P3 = G P G' + Q, U3 = G U G' for G of shape (m, 2)."""
    m = G.shape[0]
    for i in range(m):
        a3[i] = G[i, 0] * a[0] + G[i, 1] * a[1]
    for i in range(m):
        for j in range(m):
            sp = 0.0
            su = 0.0
            for k in range(2):
                for q in range(2):
                    sp += G[i, k] * P[k, q] * G[j, q]
                    su += G[i, k] * U[k, q] * G[j, q]
            P3[i, j] = sp + Q[i, j]
            U3[i, j] = su


@njit(cache=True)
def _observe(a, P, U, j, y, r, diffuse, acc, m_inf, m_star):
    """Exact diffuse univariate update observing state component j; returns True if it was diffuse.

    acc accumulates [sum v^2/F, sum log F, sum log F_inf] over the updates.
    """
    m = a.shape[0]
    v = y - a[j]
    f_star = P[j, j] + r
    for i in range(m):
        m_inf[i] = U[i, j]
        m_star[i] = P[i, j]
    if diffuse:
        f_inf = U[j, j]
        for i in range(m):
            a[i] += m_inf[i] * v / f_inf
        for i in range(m):
            for k in range(m):
                U[i, k] -= m_inf[i] * m_inf[k] / f_inf
                P[i, k] += (m_inf[i] * m_inf[k] * f_star / f_inf - m_star[i] * m_inf[k] - m_inf[i] * m_star[k]) / f_inf
        acc[2] += math.log(f_inf)
        return True
    for i in range(m):
        a[i] += m_star[i] * v / f_star
    for i in range(m):
        for k in range(m):
            P[i, k] -= m_star[i] * m_star[k] / f_star
    acc[0] += v * v / f_star
    acc[1] += math.log(f_star)
    return False


@njit(cache=True)
def _iwp_transition(h, integrated, G, Q):
    """Exact IWP step of length h (q = 1); integrated adds the interval integral as a third state."""
    G[0, 0] = 1.0
    G[0, 1] = h
    G[1, 0] = 0.0
    G[1, 1] = 1.0
    Q[0, 0] = h**3 / 3.0
    Q[0, 1] = h**2 / 2.0
    Q[1, 0] = Q[0, 1]
    Q[1, 1] = h
    if integrated:
        G[2, 0] = h
        G[2, 1] = h * h / 2.0
        Q[2, 2] = h**5 / 20.0
        Q[0, 2] = h**4 / 8.0
        Q[2, 0] = Q[0, 2]
        Q[1, 2] = h**3 / 6.0
        Q[2, 1] = Q[1, 2]


@njit(cache=True)
def _iwp_profile_terms(values, times, r, integrated, out):
    """Kalman pass of one series; out = [sum v^2/F, sum log F, sum log F_inf, n_obs].

    Price (integrated=False): values[k] observes x(times[k]); len(times) == len(values).
    Volume (integrated=True): values[k] observes int x over [times[k], times[k+1]].
    """
    m = 3 if integrated else 2
    a = np.zeros(2)
    P = np.zeros((2, 2))
    U = np.eye(2)  # diffuse part of the state covariance at times[0]
    G = np.zeros((m, 2))
    Q = np.zeros((m, m))
    a3 = np.zeros(m)
    P3 = np.zeros((m, m))
    U3 = np.zeros((m, m))
    m_inf = np.zeros(m)
    m_star = np.zeros(m)
    acc = np.zeros(3)
    n_diffuse = 0
    n_obs = 0
    j_obs = 2 if integrated else 0
    for k in range(values.shape[0]):
        if integrated:
            h = times[k + 1] - times[k]
        elif k > 0:
            h = times[k] - times[k - 1]
        else:
            h = 0.0
        _iwp_transition(h, integrated, G, Q)
        _propagate(a, P, U, G, Q, a3, P3, U3)
        y = values[k]
        if not math.isnan(y):
            n_obs += 1
            if _observe(a3, P3, U3, j_obs, y, r, n_diffuse < _N_DIFFUSE, acc, m_inf, m_star):
                n_diffuse += 1
                if n_diffuse == _N_DIFFUSE:
                    U3[:, :] = 0.0  # exactly 0 in exact arithmetic; drop the round-off
        for i in range(2):
            a[i] = a3[i]
            for q in range(2):
                P[i, q] = 0.5 * (P3[i, q] + P3[q, i])
                U[i, q] = U3[i, q]
    out[0] = acc[0]
    out[1] = acc[1]
    out[2] = acc[2]
    out[3] = n_obs


@njit(cache=True, parallel=True)
def _iwp_profile_terms_many(values, value_starts, times, time_starts, r, integrated):
    """_iwp_profile_terms for series concatenated in values/times; returns [n_series, 4]."""
    n_series = value_starts.shape[0] - 1
    out = np.empty((n_series, 4))
    for s in prange(n_series):
        _iwp_profile_terms(
            values[value_starts[s] : value_starts[s + 1]],
            times[time_starts[s] : time_starts[s + 1]],
            r,
            integrated,
            out[s],
        )
    return out


# ----------------------------------------------------------------------------------------------------
# Profile likelihood


def _profile_from_terms(terms: np.ndarray, shared_scale: bool) -> tuple[float, float]:
    """Profile restricted log-likelihood and profiled scale from the [n_series, 4] kernel terms."""
    dof = terms[:, 3] - _N_DIFFUSE
    if shared_scale:
        scale = terms[:, 0].sum() / dof.sum()
        ll = -0.5 * (dof.sum() * (math.log(2.0 * math.pi * scale) + 1.0) + terms[:, 1].sum() + terms[:, 2].sum())
        return float(ll), float(scale)
    scales = terms[:, 0] / dof
    ll = -0.5 * (dof * (np.log(2.0 * math.pi * scales) + 1.0) + terms[:, 1] + terms[:, 2]).sum()
    return float(ll), float(scales[0]) if len(scales) == 1 else float("nan")


class _Corpus:
    """Validated, concatenated series of one kind, ready for the kernel."""

    def __init__(self, series_list, times_list, integrated: bool, what: str):
        vals, tims = [], []
        for i, s in enumerate(series_list):
            label = f"{what} series {i}" if len(series_list) > 1 else f"{what} series"
            y, t = _validate_series(s, None if times_list is None else times_list[i], integrated, label)
            vals.append(y)
            tims.append(t)
        self.values = np.concatenate(vals)
        self.times = np.concatenate(tims)
        self.value_starts = np.concatenate([[0], np.cumsum([len(v) for v in vals])]).astype(np.int64)
        self.time_starts = np.concatenate([[0], np.cumsum([len(t) for t in tims])]).astype(np.int64)
        self.integrated = integrated

    def terms(self, alpha: float) -> np.ndarray:
        return _iwp_profile_terms_many(
            self.values, self.value_starts, self.times, self.time_starts, 1.0 / (alpha * alpha), self.integrated
        )


def _validate_series(series, times, integrated: bool, label: str) -> tuple[np.ndarray, np.ndarray]:
    y = np.ascontiguousarray(series, dtype=np.float64)
    if y.ndim != 1:
        raise ValueError(f"{label}: expected a 1-D array, got shape {y.shape}")
    if np.isinf(y).any():
        raise ValueError(
            f"{label}: infinite value at position {int(np.flatnonzero(np.isinf(y))[0])} "
            "(use NaN for a missing measurement, e.g. zero volume)"
        )
    n_obs = int(np.count_nonzero(~np.isnan(y)))
    if n_obs <= _N_DIFFUSE:
        raise ValueError(f"{label}: {n_obs} non-missing measurements; at least {_N_DIFFUSE + 1} needed")
    n_times = len(y) + 1 if integrated else len(y)
    if times is None:
        t = np.arange(n_times, dtype=np.float64)
    else:
        t = np.ascontiguousarray(times, dtype=np.float64)
        if t.shape != (n_times,):
            raise ValueError(
                f"{label}: times has shape {t.shape}, expected ({n_times},)"
                + (" (interval boundaries: one more than measurements)" if integrated else "")
            )
        if not np.isfinite(t).all() or not (np.diff(t) > 0).all():
            raise ValueError(f"{label}: times must be finite and strictly increasing")
    _check_not_a_line(y, t, integrated, label)
    return y, t


def _check_not_a_line(y: np.ndarray, t: np.ndarray, integrated: bool, label: str) -> None:
    """Data in the penalty's null space (a line; for volume, integrals of a line) say nothing of alpha."""
    keep = ~np.isnan(y)
    t = t - t[0]
    if integrated:
        X = np.column_stack([np.diff(t), np.diff(t**2) / 2.0])[keep]
    else:
        X = np.column_stack([np.ones_like(t), t])[keep]
    coef = np.linalg.lstsq(X, y[keep], rcond=None)[0]
    if np.linalg.norm(y[keep] - X @ coef) <= 1e-12 * np.linalg.norm(y[keep]):
        raise ValueError(
            f"{label}: the measurements lie exactly on a line (the penalty's null space), "
            "which carries no information about alpha"
        )


def _maximize(corpus: _Corpus, shared_scale: bool) -> AlphaEstimate:
    def negll(log_alpha: float) -> float:
        return -_profile_from_terms(corpus.terms(math.exp(log_alpha)), shared_scale)[0]

    lo, hi = LOG_ALPHA_BOUNDS
    grid = np.linspace(lo, hi, _GRID_POINTS)
    values = np.array([negll(g) for g in grid])
    i = int(np.argmin(values))
    res = minimize_scalar(
        negll,
        bounds=(grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]),
        method="bounded",
        options={"xatol": _XATOL},
    )
    log_alpha, fun = (float(res.x), float(res.fun)) if res.fun <= values[i] else (float(grid[i]), values[i])
    on_bound = min(log_alpha - lo, hi - log_alpha) < 1e-3
    alpha = math.exp(log_alpha)
    terms = corpus.terms(alpha)
    ll, scale = _profile_from_terms(terms, shared_scale)
    return AlphaEstimate(
        alpha=alpha,
        log_likelihood=ll,
        n_obs=int(terms[:, 3].sum()),
        converged=bool(res.success) and not on_bound,
        scale=scale,
    )


# ----------------------------------------------------------------------------------------------------
# Public API


def price_profile_log_likelihood(log_price_series, alpha: float, times=None) -> float:
    """Profile restricted log-likelihood of alpha for one log-price series (NaN = missing)."""
    alpha = check_alpha(alpha)
    corpus = _Corpus([log_price_series], None if times is None else [times], False, "log price")
    return _profile_from_terms(corpus.terms(alpha), False)[0]


def volume_profile_log_likelihood(log_volume_series, alpha: float, times=None) -> float:
    """Same for log volume; times are the interval boundaries (len(series) + 1 values)."""
    alpha = check_alpha(alpha)
    corpus = _Corpus([log_volume_series], None if times is None else [times], True, "log volume")
    return _profile_from_terms(corpus.terms(alpha), False)[0]


def estimate_alpha_price(log_price_series, times=None) -> AlphaEstimate:
    """ML alpha of eq. (1) for one series y_k = ln(close) at times t_k (default t_k = k trading days)."""
    return _maximize(
        _Corpus([log_price_series], None if times is None else [times], False, "log price"), shared_scale=False
    )


def estimate_alpha_volume(log_volume_series, times=None) -> AlphaEstimate:
    """ML alpha of eq. (2) for one series; measurement k = ln(volume) over [times[k], times[k+1]]."""
    return _maximize(
        _Corpus([log_volume_series], None if times is None else [times], True, "log volume"), shared_scale=False
    )


def estimate_alpha_price_pooled(series_list, times_list=None, shared_scale: bool = False) -> AlphaEstimate:
    """One alpha for a corpus of log-price series; per-series scales unless shared_scale."""
    _check_list(series_list, times_list)
    return _maximize(_Corpus(series_list, times_list, False, "log price"), shared_scale)


def estimate_alpha_volume_pooled(series_list, times_list=None, shared_scale: bool = False) -> AlphaEstimate:
    """One alpha for a corpus of log-volume series; per-series scales unless shared_scale."""
    _check_list(series_list, times_list)
    return _maximize(_Corpus(series_list, times_list, True, "log volume"), shared_scale)


def _check_list(series_list, times_list) -> None:
    if len(series_list) == 0:
        raise ValueError("series_list is empty")
    if times_list is not None and len(times_list) != len(series_list):
        raise ValueError(f"times_list has {len(times_list)} entries for {len(series_list)} series")
