"""The exact optimal-spline tokens (paper eq. 1 and 2): per window, the Taylor coefficients at each knot of the
natural cubic smoothing spline of log price (c0..c3) and of the C3 quartic spline of log volume (c~0..c~4).

``SplineTokenization.tokenize`` wraps the kernels ``tokenize.tokenize_price_windows`` and
``tokenize_volume_windows`` (one call per distinct alpha pair) and writes each window's ``end_position``, the
fitted log price at its last knot (the paper's spline labels read it). Token 63 is also the kinematic state a
window reports (``window_end_kinematics``, the report's manifold). No dagster; numba only when tokenizing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import polars as pl

from kinematic_pipeline.tokenizations.base import Channel, Tokenization, Workspace
from kinematic_pipeline.windows import N_CHANNELS, N_PRICE_COEFFS, N_TOKENS, N_VOLUME_COEFFS

KINEMATIC_CHANNELS = (  # price spline c0..c3, quartic log-volume profile v0..v4; c0 and c~0 anchored
    Channel("c0", "position (log price)", "anchor"),
    Channel("c1", "velocity"),
    Channel("c2", "acceleration"),
    Channel("c3", "jerk"),
    Channel("v0", "log-volume level", "anchor"),
    Channel("v1", "volume velocity"),
    Channel("v2", "volume acceleration"),
    Channel("v3", "volume jerk"),
    Channel("v4", "volume snap"),
)


def spline_end_position(price_tokens, h=1.0) -> np.ndarray:
    """Fitted log price at the window's last knot: the cubic of token 63 evaluated at s = h.

    price_tokens: [n, 64, 4] Taylor coefficients (c0, c1, c2, c3) at each token's left knot.
    h: the last interval's length (scalar or [n]; 1 trading day by default).
    """
    tokens = np.asarray(price_tokens, dtype=np.float64)
    if tokens.ndim != 3 or tokens.shape[1:] != (N_TOKENS, N_PRICE_COEFFS):
        raise ValueError(f"price_tokens must have shape [n, {N_TOKENS}, {N_PRICE_COEFFS}], got {tokens.shape}")
    h = np.asarray(h, dtype=np.float64)
    if h.ndim > 1 or (h.ndim == 1 and h.shape != (tokens.shape[0],)):
        raise ValueError(f"h must be a scalar or have shape ({tokens.shape[0]},), got {h.shape}")
    if not (np.isfinite(h).all() and (h > 0).all()):
        raise ValueError("h must be finite and > 0")
    c0, c1, c2, c3 = (tokens[:, N_TOKENS - 1, j] for j in range(N_PRICE_COEFFS))
    return c0 + h * (c1 + h * (c2 / 2.0 + h * c3 / 6.0))


def window_end_kinematics(tokens: np.ndarray) -> np.ndarray:
    """The kinematic state each causal window reports [n, 9]: its last token (index 63), as stored.

    Token 63 holds the Taylor coefficients (c0..c3 of log price, v0..v4 of log volume) at the window's last
    interior knot, fitted on bars up to the window's end only. It is not carried to the end knot itself:
    the natural end condition makes the acceleration there 0 by construction, which would hide c2.
    """
    tokens = np.asarray(tokens, dtype=np.float64)
    if tokens.ndim != 3 or tokens.shape[1:] != (N_TOKENS, N_CHANNELS):
        raise ValueError(f"tokens must have shape [n, {N_TOKENS}, {N_CHANNELS}], got {tokens.shape}")
    return tokens[:, N_TOKENS - 1, :].copy()


@dataclass(frozen=True)
class SplineTokenization(Tokenization):
    """Exact optimal splines, smoothed by ``alpha_price`` / ``alpha_volume`` (scalar or per window)."""

    extra_columns: ClassVar[dict[str, pl.DataType]] = {"end_position": pl.Float64}

    def tokenize(self, windows, alphas, workspace: Workspace | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Its tokens and end positions (float64); ``alphas.for_tickers``: scalar or per window."""
        from kinematic_pipeline.tokenize import tokenize_price_windows, tokenize_volume_windows  # numba: 2 s at import

        ws = workspace or Workspace()
        n = len(windows.tickers)
        out = self._out(ws, n)
        end = np.empty(n, dtype=np.float64)
        alpha_price, alpha_volume = alphas.for_tickers(windows.tickers)
        a_p = np.broadcast_to(np.asarray(alpha_price, dtype=np.float64), (n,))
        a_v = np.broadcast_to(np.asarray(alpha_volume, dtype=np.float64), (n,))
        for ap, av in sorted(set(zip(a_p.tolist(), a_v.tolist()))):  # one kernel call per distinct alpha pair
            every = bool((a_p == ap).all() and (a_v == av).all())
            rows = slice(None) if every else np.flatnonzero((a_p == ap) & (a_v == av))
            m = n if every else len(rows)
            times = None if windows.times is None else windows.times[rows]
            price = tokenize_price_windows(
                windows.log_price[rows], ap, times, out=ws.get("price", (m, N_TOKENS, N_PRICE_COEFFS), np.float64)
            )
            volume = tokenize_volume_windows(
                windows.log_volume[rows], av, times, out=ws.get("volume", (m, N_TOKENS, N_VOLUME_COEFFS), np.float64)
            )
            out[rows, :, :N_PRICE_COEFFS] = price
            out[rows, :, N_PRICE_COEFFS:] = volume
            h = 1.0 if times is None else times[:, -1] - times[:, -2]
            end[rows] = spline_end_position(price, h)
        return out, {"end_position": end}

    def parameters(self, alphas) -> dict[str, str]:
        return {"alpha_price": alphas.describe("price"), "alpha_volume": alphas.describe("volume")}


SPLINE = SplineTokenization(
    name="spline",
    channels=KINEMATIC_CHANNELS,
    called="spline",
    description="Exact optimal-spline tokens (paper eq. 1 and 2): per ticker, the 64x9 window ending on "
    "the day (c0..c3 of log price, c~0..c~4 of log volume), float32, unanchored.",
)
