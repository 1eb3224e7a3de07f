"""What the price and volume wrappers share: validate, pick the cached fast-path factor, run the kernel."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kinematic_pipeline.tokenize._hermite import factor_block_tridiag
from kinematic_pipeline.tokenize._validate import (
    N_KNOTS,
    N_TOKENS,
    check_alpha,
    check_out,
    check_times,
    check_windows,
    raise_on_infinite,
)


def factor_fast_system(fill: Callable, alpha: float, knots: tuple | None, label: str):
    """Factor the fast-path matrix for (α, shared knots); ``fill(h, A, B, alpha)`` assembles it."""
    t = np.arange(N_KNOTS, dtype=np.float64) if knots is None else np.asarray(knots, dtype=np.float64)
    h = np.diff(t)
    A = np.zeros((N_KNOTS, 3))
    B = np.zeros((N_TOKENS, 4))
    fill(h, A, B, alpha)
    M = np.zeros((N_KNOTS, 4))
    Sinv = np.zeros((N_KNOTS, 3))
    P = np.zeros((N_TOKENS, 4))
    if not factor_block_tridiag(A, B, M, Sinv, P):
        raise ValueError(f"alpha/times: {label} system not positive definite (alpha={alpha})")
    for arr in (M, Sinv, P, h):
        arr.flags.writeable = False
    return M, Sinv, P, h


def run_tokenizer(values, width: int, name: str, alpha, times, out_dtype, out, n_coef: int, fast_factor, kernel):
    """Validate the inputs, then run ``kernel`` over every window (fast or general path per window)."""
    y = check_windows(values, width, name)
    n = y.shape[0]
    a = check_alpha(alpha)
    t = check_times(times, n)
    tokens = check_out(out, n, n_coef, out_dtype)
    shared = t is None or t.ndim == 1
    M, Sinv, P, h = fast_factor(a, None if t is None or t.ndim == 2 else tuple(t.tolist()))
    knots = np.arange(N_KNOTS, dtype=np.float64)[None, :] if t is None else t.reshape(-1, N_KNOTS)
    status = np.empty(n, dtype=np.int8)
    kernel(y, knots, shared, a * a, M, Sinv, P, h, tokens, status)
    raise_on_infinite(status, name)
    return tokens
