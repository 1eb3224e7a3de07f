"""Slow, obviously correct twins of the kernels in tokenize/alpha_mle.py, tokenize/baselines.py and tasks/buy_sell_hold.py."""

from __future__ import annotations

import math

import numpy as np

# ----------------------------------------------------------------------------------------------------
# Marginal likelihood of alpha, densely: y = X beta + z + w with beta flat (the penalty's null space),
# z the integrated Wiener process started at 0 (density q = s), w ~ N(0, s / alpha^2). The restricted
# likelihood integrates beta out; s is concentrated out.


def _iwp_cov(t: np.ndarray) -> np.ndarray:
    """Cov(z(t_i), z(t_j)) for the IWP started at z(0) = z'(0) = 0, unit density: m^2 (3M - m) / 6."""
    lo = np.minimum.outer(t, t)
    hi = np.maximum.outer(t, t)
    return lo**2 * (3 * hi - lo) / 6


def _iwp_double_integral(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C(a, b) = int_0^a int_0^b Cov(z(s), z(u)) du ds (worked out by hand; C(a, a) = a^5 / 20)."""
    lo = np.minimum(a, b)
    hi = np.maximum(a, b)
    return lo**5 / 120 + lo**3 * hi**2 / 12 - lo**4 * hi / 24


def _reml_profile(y, X, K, alpha) -> float:
    """-1/2 [(n-p)(ln(2 pi s) + 1) + ln|V| + ln|X'V^-1 X|], V = K + I / alpha^2, s = y'Py / (n-p)."""
    n, p = X.shape
    V = K + np.eye(n) / alpha**2
    Vi = np.linalg.inv(V)
    XtViX = X.T @ Vi @ X
    Pm = Vi - Vi @ X @ np.linalg.solve(XtViX, X.T @ Vi)
    scale = float(y @ Pm @ y) / (n - p)
    logdet_V = np.linalg.slogdet(V)[1]
    logdet_XtViX = np.linalg.slogdet(XtViX)[1]
    return -0.5 * ((n - p) * (math.log(2.0 * math.pi * scale) + 1.0) + logdet_V + logdet_XtViX)


def _reml_profile_mp(y, X, K, alpha) -> float:
    """The same in mpmath (object arrays of mpf), at the caller's working precision."""
    import mpmath as mp

    n, p = X.shape
    V = mp.matrix(K.tolist()) + mp.eye(n) / mp.mpf(alpha) ** 2
    Vi = V**-1
    Xm, ym = mp.matrix(X.tolist()), mp.matrix(y.tolist())
    XtViX = Xm.T * Vi * Xm
    Pm = Vi - Vi * Xm * XtViX**-1 * Xm.T * Vi
    scale = (ym.T * Pm * ym)[0] / (n - p)
    return float(-0.5 * ((n - p) * (mp.log(2 * mp.pi * scale) + 1) + mp.log(mp.det(V)) + mp.log(mp.det(XtViX))))


def _dense_reml(y, alpha, t, integrated: bool, digits: int) -> float:
    """Restricted profile log-likelihood; digits > 0: in mpmath (V is ill-conditioned at extreme alpha)."""
    keep = ~np.isnan(y)
    y = y[keep]
    if digits:
        import mpmath as mp

        with mp.workdps(digits):
            to_mp = np.vectorize(mp.mpf, otypes=[object])
            y, t = to_mp(y), to_mp(t)
            X, K = _design_and_cov(t, keep, integrated, np.array([mp.mpf(1)] * int(keep.sum()), dtype=object))
            return _reml_profile_mp(y, X, K, alpha)
    X, K = _design_and_cov(t, keep, integrated, np.ones(int(keep.sum())))
    return _reml_profile(y, X, K, alpha)


def _design_and_cov(t, keep, integrated: bool, ones):
    t = t - t[0]
    if not integrated:
        t = t[keep]
        return np.column_stack([ones, t]), _iwp_cov(t)
    a, b = t[:-1][keep], t[1:][keep]
    A, B = a[:, None], b[:, None]
    K = (
        _iwp_double_integral(B, b[None, :])
        - _iwp_double_integral(A, b[None, :])
        - _iwp_double_integral(B, a[None, :])
        + _iwp_double_integral(A, a[None, :])
    )
    return np.column_stack([b - a, (b**2 - a**2) / 2]), K


def dense_reml_price(y, alpha: float, times=None, digits: int = 0) -> float:
    """Profile restricted log-likelihood of alpha for point observations y_k = x(t_k) + w_k."""
    y = np.asarray(y, dtype=float)
    t = np.arange(len(y), dtype=float) if times is None else np.asarray(times, dtype=float)
    return _dense_reml(y, alpha, t, False, digits)


def dense_reml_volume(y, alpha: float, times=None, digits: int = 0) -> float:
    """Same for interval integrals y_k = int_{t_k}^{t_k+1} x dt + w_k (times: len(y) + 1 boundaries)."""
    y = np.asarray(y, dtype=float)
    t = np.arange(len(y) + 1, dtype=float) if times is None else np.asarray(times, dtype=float)
    return _dense_reml(y, alpha, t, True, digits)


# ----------------------------------------------------------------------------------------------------
# Baseline tokens, one value at a time, straight from the paper's binomial formula.


def _fill_window(values: list[float]) -> list[float] | None:
    """Carry the last valid value forward; leading gaps take the first valid value; None if all NaN."""
    valid = [v for v in values if not math.isnan(v)]
    if not valid:
        return None
    filled, last = [], valid[0]
    for v in values:
        if not math.isnan(v):
            last = v
        filled.append(last)
    return filled


def _backward_difference(y: list[float], n: int, k: int) -> float:
    """Delta^n y_k = sum_i (-1)^(n-i) C(n, i) y_{k-(n-i)}; 0 if it reaches before y[0]."""
    if k - n < 0:
        return 0.0
    return sum((-1) ** (n - i) * math.comb(n, i) * y[k - (n - i)] for i in range(n + 1))


def naive_difference_tokens(log_price, log_volume, price_orders: int, volume_orders: int) -> np.ndarray:
    """[n, 64, 9]: price token k from knot k+1 (orders < price_orders), volume from measurement k."""
    log_price = np.asarray(log_price, dtype=float)
    log_volume = np.asarray(log_volume, dtype=float)
    out = np.zeros((log_price.shape[0], 64, 9))
    for w in range(log_price.shape[0]):
        y = _fill_window(log_price[w].tolist())
        yv = _fill_window(log_volume[w].tolist())
        for k in range(64):
            for n in range(price_orders):
                if y is not None:
                    out[w, k, n] = _backward_difference(y, n, k + 1)
            for n in range(volume_orders):
                if yv is not None:
                    out[w, k, 4 + n] = _backward_difference(yv, n, k)
    return out


def naive_fd_tokens(log_price, log_volume) -> np.ndarray:
    return naive_difference_tokens(log_price, log_volume, 4, 5)


def naive_raw_tokens(log_price, log_volume) -> np.ndarray:
    return naive_difference_tokens(log_price, log_volume, 2, 2)


# ----------------------------------------------------------------------------------------------------
# Labels, one return at a time.


def naive_label(r: float, tau: float) -> int:
    if math.isnan(r):
        return -1
    if r > tau:
        return 0  # Buy
    if r < -tau:
        return 1  # Sell
    return 2  # Hold


def naive_spline_end_position(tokens_window, h: float = 1.0) -> float:
    """x(t_63 + h) of the last token's cubic, by its Taylor series written out term by term."""
    c0, c1, c2, c3 = (float(c) for c in tokens_window[63])
    return c0 + c1 * h + c2 * h**2 / 2.0 + c3 * h**3 / 6.0
