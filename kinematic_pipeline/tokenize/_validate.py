"""Input checks shared by the public tokenizer wrappers: coerce, validate, raise a ValueError that names
the argument (and the window) at fault. The kernels behind the wrappers see only checked arrays."""

from __future__ import annotations

import math

import numpy as np

from kinematic_pipeline.windows import N_KNOTS, N_TOKENS

_OUT_DTYPES = (np.dtype(np.float64), np.dtype(np.float32))

# Kernel status codes, one per window.
STATUS_FAST = 0  # shared knots, no missing value: pre-factored operator
STATUS_GENERAL = 1  # missing values and/or per-window knots: factored per window
STATUS_UNDETERMINED = 2  # too few measurements to determine the fit: NaN tokens
STATUS_INFINITE = 3  # +-inf in the input: an error, reported by the wrapper


def check_windows(values, width: int, name: str) -> np.ndarray:
    """`values` as a C-contiguous float64 array of shape [n, width] (NaN allowed: missing)."""
    try:
        arr = np.ascontiguousarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: cannot be converted to a float64 array ({exc})") from exc
    if arr.ndim != 2 or arr.shape[1] != width:
        raise ValueError(f"{name}: expected shape [n, {width}] (one window per row), got {arr.shape}")
    return arr


def check_alpha(alpha) -> float:
    try:
        a = float(alpha)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"alpha: expected a positive finite number, got {alpha!r}") from exc
    if not (a > 0.0 and math.isfinite(a * a)):
        raise ValueError(f"alpha: expected a positive finite number (with alpha**2 finite), got {alpha!r}")
    return a


def check_times(times, n: int) -> np.ndarray | None:
    """None (default knots 0..64), or float64 knots of shape [65] or [n, 65], finite, strictly increasing."""
    if times is None:
        return None
    try:
        t = np.ascontiguousarray(times, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"times: cannot be converted to a float64 array ({exc})") from exc
    if t.shape != (N_KNOTS,) and t.shape != (n, N_KNOTS):
        raise ValueError(f"times: expected shape [{N_KNOTS}] or [{n}, {N_KNOTS}], got {t.shape}")
    t2 = t.reshape(-1, N_KNOTS)
    bad = ~np.isfinite(t2).all(axis=1)
    if bad.any():
        raise ValueError(f"times: non-finite knot time in {_which(t, bad)}")
    bad = ~(np.diff(t2, axis=1) > 0.0).all(axis=1)
    if bad.any():
        raise ValueError(f"times: knot times must be strictly increasing; violated in {_which(t, bad)}")
    return t


def _which(t: np.ndarray, bad: np.ndarray) -> str:
    if t.ndim == 1:
        return "the shared knot vector"
    return f"window {int(np.flatnonzero(bad)[0])} ({int(bad.sum())} window(s) in all)"


def check_out(out, n: int, n_coef: int, out_dtype) -> np.ndarray:
    """Allocate the token array [n, 64, n_coef], or check a caller-provided one."""
    dtype = np.dtype(out_dtype)
    if dtype not in _OUT_DTYPES:
        raise ValueError(f"out_dtype: expected float64 or float32, got {dtype}")
    shape = (n, N_TOKENS, n_coef)
    if out is None:
        return np.empty(shape, dtype=dtype)
    if not isinstance(out, np.ndarray) or out.shape != shape or out.dtype not in _OUT_DTYPES:
        got = (getattr(out, "shape", None), getattr(out, "dtype", None))
        raise ValueError(f"out: expected a float64/float32 ndarray of shape {shape}, got {got}")
    if not (out.flags.c_contiguous and out.flags.writeable):
        raise ValueError("out: must be a writeable C-contiguous array")
    return out


def raise_on_infinite(status: np.ndarray, name: str) -> None:
    bad = np.flatnonzero(status == STATUS_INFINITE)
    if bad.size:
        raise ValueError(
            f"{name}: infinite value in window {int(bad[0])} ({bad.size} window(s) in all); "
            "use NaN for a missing measurement"
        )
