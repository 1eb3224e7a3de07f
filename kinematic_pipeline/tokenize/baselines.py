"""Baseline tokens of the paper's internal ablations, the same shape as the spline tokens.

``fd_tokens`` (RawGPT-FD): backward finite differences of y = ln(close) and y~ = ln(volume) up to the
orders of the spline, Delta^n y_k = sum_i (-1)^(n-i) C(n, i) y_{k-(n-i)}.
``raw_tokens`` (RawGPT): raw values and first differences, higher orders zeroed.

Layout of one window (ending on day i), as in tokenize/price.py and volume.py: log_price[65] on days
i-64..i (knots t_0..t_64), log_volume[64] on days i-63..i (measurement k over [t_k, t_k+1]). Token k
(interval [t_k, t_k+1]) has 9 channels:

    price  [y_k+1, Dy_k+1, D^2 y_k+1, D^3 y_k+1]     (the knot at the right end of the interval, so that
                                                      token 63 carries the window's last close)
    volume [y~_k, Dy~_k, D^2 y~_k, D^3 y~_k, D^4 y~_k] (the measurement of the interval itself)

Policies (tokens are always finite):
- A difference that needs a value before the window start is 0 (each window is self-contained, as the
  spline windows are). Price token 0 thus has D^2 = D^3 = 0; volume token k has D^n = 0 for n > k.
- Missing values (NaN) are filled within the window before differencing: carried forward from the last
  valid value; leading missing values take the window's first valid value (flat start, zero
  differences). Every filled value lies within the window, so no token depends on a bar after the
  window's last day; like the spline tokens (a whole-window smoother), an early token may depend on a
  later value of the same window. A window whose channel is entirely missing gets zeros there.
- No anchoring here: c0 and c~0 are raw levels, anchored downstream like the spline tokens.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from kinematic_pipeline.tokenize._validate import N_KNOTS, N_TOKENS, check_out, check_windows

PRICE_ORDERS = 4  # channels y, D, D^2, D^3 (the cubic's c0..c3)
VOLUME_ORDERS = 5  # channels y~, D .. D^4 (the quartic's c~0..c~4)
N_CHANNELS = PRICE_ORDERS + VOLUME_ORDERS


@njit(cache=True)
def _fill_missing(src, dst):
    """dst = src with NaNs carried forward and leading NaNs set to the first valid value; False if none."""
    n = src.shape[0]
    first = -1
    for k in range(n):
        if not np.isnan(src[k]):
            first = k
            break
    if first < 0:
        return False
    last = src[first]
    for k in range(n):
        v = src[k]
        if not np.isnan(v):
            last = v
        dst[k] = last
    return True


@njit(cache=True)
def _write_differences(buf, n_orders, out_w, channel0, shift):
    """out_w[k, channel0 + o] = Delta^o buf[k + shift] (0 where it needs a value before buf[0]).

    Differences are taken in place, highest index first; buf is destroyed.
    """
    n = buf.shape[0]
    for o in range(n_orders):
        for k in range(out_w.shape[0]):
            j = k + shift
            out_w[k, channel0 + o] = buf[j] if j >= o else 0.0
        for j in range(n - 1, o, -1):
            buf[j] -= buf[j - 1]


_CHUNK = 2048  # windows per parallel task (scratch buffers are allocated once per task)


@njit(cache=True, parallel=True)
def _difference_tokens_kernel(log_price, log_volume, price_orders, volume_orders, out):
    """out[w, k, :] for every window w; channels beyond the requested orders are 0."""
    n = log_price.shape[0]
    n_chunks = (n + _CHUNK - 1) // _CHUNK
    for c in prange(n_chunks):
        buf_p = np.empty(N_KNOTS)
        buf_v = np.empty(N_TOKENS)
        for w in range(c * _CHUNK, min(n, (c + 1) * _CHUNK)):
            out_w = out[w]
            out_w[:, :] = 0.0
            if _fill_missing(log_price[w], buf_p):
                _write_differences(buf_p, price_orders, out_w, 0, 1)  # price token k: knot k+1
            if _fill_missing(log_volume[w], buf_v):
                _write_differences(buf_v, volume_orders, out_w, PRICE_ORDERS, 0)  # token k: measurement k


def _check_finite_or_nan(arr: np.ndarray, name: str) -> None:
    bad = np.isinf(arr).any(axis=1)
    if bad.any():
        raise ValueError(
            f"{name}: infinite value in window {int(np.flatnonzero(bad)[0])} "
            f"({int(bad.sum())} window(s) in all); use NaN for a missing measurement"
        )


def difference_tokens(
    log_price, log_volume, price_orders: int, volume_orders: int, *, out_dtype=np.float64, out=None
) -> np.ndarray:
    """Tokens [n, 64, 9] of backward differences of orders 0 .. ``price_orders`` - 1 of log price and
    0 .. ``volume_orders`` - 1 of log volume, higher orders zeroed; arguments as ``fd_tokens``."""
    p = check_windows(log_price, N_KNOTS, "log_price")
    v = check_windows(log_volume, N_TOKENS, "log_volume")
    if p.shape[0] != v.shape[0]:
        raise ValueError(f"log_price has {p.shape[0]} windows, log_volume {v.shape[0]}")
    _check_finite_or_nan(p, "log_price")
    _check_finite_or_nan(v, "log_volume")
    out = check_out(out, p.shape[0], N_CHANNELS, out_dtype)  # (n, 64, 9)
    if p.shape[0]:
        _difference_tokens_kernel(p, v, price_orders, volume_orders, out)
    return out


def fd_tokens(log_price, log_volume, *, out_dtype=np.float64, out=None) -> np.ndarray:
    """RawGPT-FD tokens [n, 64, 9]: price [y, Dy, D^2 y, D^3 y], volume [y~, Dy~, .., D^4 y~].

    log_price [n, 65], log_volume [n, 64], NaN = missing; out_dtype float64 or float32, or a
    caller-provided C-contiguous ``out`` of shape [n, 64, 9].
    """
    return difference_tokens(log_price, log_volume, PRICE_ORDERS, VOLUME_ORDERS, out_dtype=out_dtype, out=out)


def raw_tokens(log_price, log_volume, *, out_dtype=np.float64, out=None) -> np.ndarray:
    """RawGPT tokens [n, 64, 9]: price [y, Dy, 0, 0], volume [y~, Dy~, 0, 0, 0]; arguments as fd_tokens."""
    return difference_tokens(log_price, log_volume, 2, 2, out_dtype=out_dtype, out=out)
