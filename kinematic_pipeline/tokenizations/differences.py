"""Tokens of backward differences (the paper's internal ablations): RawGPT-FD's finite differences of log price
(orders 0-3) and log volume (0-4), the same [64, 9] shape and channels as the spline tokens.

``DifferenceTokenization.tokenize`` wraps the kernel ``tokenize.difference_tokens`` (``tokenize/baselines.py``:
the layout of a window, the missing-value policy); the raw tokens are the same kernel at orders (2, 2)
(``raw.py``). Nothing is smoothed or fitted. No dagster; numba only when tokenizing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kinematic_pipeline.tokenizations.base import Channel, Tokenization, Workspace

DIFFERENCE_CHANNELS = (  # the spline channels' names (corpus_stats' channel_name), y = ln close, y~ = ln volume
    Channel("c0", "log price y", "anchor"),
    Channel("c1", "first difference of y"),
    Channel("c2", "second difference of y"),
    Channel("c3", "third difference of y"),
    Channel("v0", "log volume y~", "anchor"),
    Channel("v1", "first difference of y~"),
    Channel("v2", "second difference of y~"),
    Channel("v3", "third difference of y~"),
    Channel("v4", "fourth difference of y~"),
)


@dataclass(frozen=True)
class DifferenceTokenization(Tokenization):
    """Backward differences of orders below ``price_orders`` / ``volume_orders``; the higher channels zero."""

    price_orders: int = 4
    volume_orders: int = 5

    def tokenize(self, windows, alphas, workspace: Workspace | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        from kinematic_pipeline.tokenize import difference_tokens  # numba: 2 s at import

        out = self._out(workspace, len(windows.tickers))
        return difference_tokens(
            windows.log_price, windows.log_volume, self.price_orders, self.volume_orders, out=out
        ), {}


FD = DifferenceTokenization(
    name="fd",
    channels=DIFFERENCE_CHANNELS,
    called="finite differences",
    description="RawGPT-FD baseline: backward finite differences of log price (orders 0-3) and log volume (0-4).",
)
