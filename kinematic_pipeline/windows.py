"""What every stage shares about a token window: its geometry, its channels, its normalization.

Pure numpy/polars (no dagster, no torch): ``training`` and ``stages`` both import it, neither imports the
other's internals for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl

if TYPE_CHECKING:  # the registry's variants read the features, which read the window geometry here
    from kinematic_pipeline.variants import Variant

# The window geometry, its one home: 65 price knots t_0..t_64, 64 intervals (one token each), 9 channels
N_TOKENS, N_CHANNELS = 64, 9  # tokens per window; 4 price + 5 volume coefficients per token
N_KNOTS = N_TOKENS + 1  # price samples per window (volume: one measurement per interval, N_TOKENS)
LOOKBACK = N_KNOTS - 1  # sessions before a window's last day
N_PRICE_COEFFS, N_VOLUME_COEFFS = 4, 5  # c0..c3 of the cubic, c~0..c~4 of the quartic
CHANNEL_NAMES = ("c0", "c1", "c2", "c3", "v0", "v1", "v2", "v3", "v4")
CHANNEL_TITLES = (  # what each channel is: price spline c0..c3, quartic log-volume profile v0..v4
    "position (log price)",
    "velocity",
    "acceleration",
    "jerk",
    "log-volume level",
    "volume velocity",
    "volume acceleration",
    "volume jerk",
    "volume snap",
)
ANCHORED_CHANNELS = (0, 4)  # c0 and c~0: anchored to the window's first token, not z-scored
ZSCORED_CHANNELS = (1, 2, 3, 5, 6, 7, 8)


def normalize_windows(tokens: np.ndarray, stats: pl.DataFrame, tokenization: str) -> np.ndarray:
    """Dual window anchoring (subtract each window's first c0 and c~0) and z-scoring of the other 7."""
    rows = stats.filter(pl.col("tokenization") == tokenization).sort("channel")
    if rows.height != len(ZSCORED_CHANNELS):
        raise ValueError(f"corpus_stats has no statistics for tokenization {tokenization!r}")
    out = np.array(tokens, dtype=np.float32, copy=True)  # [n, 64, 9]
    for ch in ANCHORED_CHANNELS:
        out[:, :, ch] -= out[:, :1, ch]
    channels = list(ZSCORED_CHANNELS)
    out[:, :, channels] = (out[:, :, channels] - rows["mean"].to_numpy()) / rows["std"].to_numpy()
    return out


class WindowNormalizer:
    """Token shard windows -> model input of one variant: anchored + z-scored (GPT variants), or the
    variant's raw channels (PatchTST: ln close and ln volume, normalized by its own RevIN)."""

    def __init__(self, variant: Variant, stats: pl.DataFrame | None) -> None:
        if variant.normalized and stats is None:
            raise ValueError(f"variant {variant.name} ({variant.token_asset}) needs corpus_stats")
        self.variant, self.stats = variant, stats

    def __call__(self, tokens: np.ndarray) -> np.ndarray:  # [n, 64, 9] float32 -> [n, 64, 9 | len(channels)]
        if not self.variant.normalized:
            return np.ascontiguousarray(tokens[:, :, list(self.variant.channels)], dtype=np.float32)
        return normalize_windows(tokens, self.stats, self.variant.tokenization)


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
