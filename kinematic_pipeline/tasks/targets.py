"""The returns a task's target is built from (pure numpy, no dagster): what day t's label or forecast reads.

Two sources of the next-day log return r_j (DESIGN.md "Labels"; a run records which one it used):
- "spline" (the paper's r_j = c0(t_j+1) - c0(t_j)): the end-of-window positions of two consecutive
  causal fits, x_j+1(t_j+1) - x_j(t_j), each the fitted log price at the last knot of the window ending
  that day (``tokenizations.spline.spline_end_position``).
- "close": the next-day close-to-close log return ln C_t+1 - ln C_t, what the backtest trades.

A return that is not known yet (its next bar does not exist) or not defined is NaN. The volatility task's target
(``log_realized_variance``) is here too, beside the returns it reads, so that the reference forecasters below the
tasks (``backtest/``) score against the same numbers.
"""

from __future__ import annotations

import numpy as np

LABEL_SOURCES = ("spline", "close")
# RV_h (``volatility.py``) below it (h unchanged closes in a row) is floored: its log and QLIKE stay finite
VARIANCE_FLOOR = 1e-12


def log_realized_variance(forward: np.ndarray) -> np.ndarray:
    """ln max(sum_i r_i^2, VARIANCE_FLOOR) per row of ``forward`` ([n, h] log returns); NaN where a return is NaN."""
    forward = np.asarray(forward, dtype=np.float64)
    if forward.ndim != 2 or forward.shape[1] < 1:
        raise ValueError(f"forward returns must be [rows, h >= 1], got shape {forward.shape}")
    return np.log(np.maximum(np.sum(forward**2, axis=1), VARIANCE_FLOOR))  # a NaN return: NaN (max keeps it)


def label_returns_close(log_close_t, log_close_next) -> np.ndarray:
    """r = ln C_t+1 - ln C_t, elementwise; NaN where either is missing."""
    return _difference(log_close_next, log_close_t, "log_close_next", "log_close_t")


def label_returns_spline(end_position_t, end_position_next) -> np.ndarray:
    """r = x_t+1(t_t+1) - x_t(t_t) from consecutive causal fits' end positions; NaN where missing."""
    return _difference(end_position_next, end_position_t, "end_position_next", "end_position_t")


def _difference(later, earlier, later_name: str, earlier_name: str) -> np.ndarray:
    a = np.asarray(later, dtype=np.float64)
    b = np.asarray(earlier, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"{later_name} has shape {a.shape}, {earlier_name} {b.shape}")
    return a - b
