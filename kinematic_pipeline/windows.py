"""What training and evaluation share about a token window: its channels, its normalization, its label column.

Pure numpy/polars (no dagster, no torch): ``training`` and ``stages`` both import it, neither imports the
other's internals for it.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from kinematic_pipeline.variants import Variant

N_TOKENS, N_CHANNELS = 64, 9  # tokens per window; 4 price + 5 volume coefficients per token
CHANNEL_NAMES = ("c0", "c1", "c2", "c3", "v0", "v1", "v2", "v3", "v4")
ANCHORED_CHANNELS = (0, 4)  # c0 and c~0: anchored to the window's first token, not z-scored
ZSCORED_CHANNELS = (1, 2, 3, 5, 6, 7, 8)


def tau_column(tau: float) -> str:
    """The labels column of threshold ``tau``: ``label_tau_0p0025`` for tau = 0.0025."""
    return "label_tau_" + f"{tau:.4f}".replace(".", "p")


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
