"""Buy/Sell/Hold labels of the paper's "Training Objectives & Labeling" (pure numpy, no dagster).

g_j = Buy (0) if r_j > tau, Sell (1) if r_j < -tau, else Hold (2); r_j == +-tau is Hold. A return that
is not known yet (the last day: its next bar does not exist) or not defined gives the label -1.

Two sources of r_j (DESIGN.md "Labels"; record which one was used):
- "spline" (the paper's r_j = c0(t_j+1) - c0(t_j)): the end-of-window positions of two consecutive
  causal fits, x_j+1(t_j+1) - x_j(t_j), each the fitted log price at the last knot of the window ending
  that day (``tokenizations.spline.spline_end_position``).
- "close": the next-day close-to-close log return ln C_t+1 - ln C_t, what the backtest trades.

tau, the labelling threshold, has its one home here: how a tau is spelled as a partition key and folder
(``tau_key``), as a labels column (``tau_column``), and how two taus read back from keys, columns or SQL
compare (``same_tau``, ``at_tau``, ``TAU_SQL``): one tolerance.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from kinematic_pipeline.variants import BUY, HOLD, SELL, UNKNOWN_LABEL

LABEL_SOURCES = ("spline", "close")
TAU_TOLERANCE = 1e-12  # two taus are the same when they differ by less (floats read back from text)
TAU_SQL = f"abs(tau - ?) < {TAU_TOLERANCE}"  # the same comparison in the catalog's SQL (one ? for the tau)


def tau_key(tau: float) -> str:
    """A tau as partition keys, folders and file stems spell it: ``0.01``, ``0.0025``."""
    return f"{float(tau):g}"


def tau_column(tau: float) -> str:
    """The labels column of threshold ``tau``: ``label_tau_0p0025`` for tau = 0.0025."""
    return "label_tau_" + f"{float(tau):.4f}".replace(".", "p")


def same_tau(a: float, b: float) -> bool:
    return abs(float(a) - float(b)) < TAU_TOLERANCE


def at_tau(tau: float, column: str = "tau") -> pl.Expr:
    """Rows whose ``column`` is ``tau`` (null never matches)."""
    return ((pl.col(column) - float(tau)).abs() < TAU_TOLERANCE).fill_null(False)


def label_returns_close(log_close_t, log_close_next) -> np.ndarray:
    """r = ln C_t+1 - ln C_t, elementwise; NaN where either is missing."""
    return _difference(log_close_next, log_close_t, "log_close_next", "log_close_t")


def label_returns_spline(end_position_t, end_position_next) -> np.ndarray:
    """r = x_t+1(t_t+1) - x_t(t_t) from consecutive causal fits' end positions; NaN where missing."""
    return _difference(end_position_next, end_position_t, "end_position_next", "end_position_t")


def labels_from_returns(r, tau: float) -> np.ndarray:
    """int8 labels: 0 Buy (r > tau), 1 Sell (r < -tau), 2 Hold (otherwise), -1 where r is NaN."""
    tau = float(tau)
    if not (np.isfinite(tau) and tau >= 0):
        raise ValueError(f"tau must be finite and >= 0, got {tau!r}")
    r = np.asarray(r, dtype=np.float64)
    if np.isinf(r).any():
        raise ValueError("r has infinite values")
    labels = np.full(r.shape, HOLD, dtype=np.int8)
    labels[r > tau] = BUY
    labels[r < -tau] = SELL
    labels[np.isnan(r)] = UNKNOWN_LABEL
    return labels


def _difference(later, earlier, later_name: str, earlier_name: str) -> np.ndarray:
    a = np.asarray(later, dtype=np.float64)
    b = np.asarray(earlier, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"{later_name} has shape {a.shape}, {earlier_name} {b.shape}")
    return a - b
