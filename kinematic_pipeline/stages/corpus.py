"""corpus_stats: mean and std of the 7 z-scored channels per tokenization, over the training period only.

Channels 0 (c0) and 4 (c~0) are anchored per window (dual window anchoring) and not z-scored; the
other seven (c1, c2, c3, c~1..c~4, or their fd/raw counterparts) are standardized with these
statistics. Only shards dated on or before ``data.train_end`` are opened: the statistics can never see
the test period. Each row records its fit window and a digest of the shards it was fitted on.
"""

from __future__ import annotations

import datetime as dt
import hashlib

import numpy as np
import polars as pl

from kinematic_pipeline.config import Settings
from kinematic_pipeline.stages.tokenize import TOKEN_ASSETS
from kinematic_pipeline.storage import manifest_path, refresh_view, shard_path, write_parquet_atomic

CORPUS_STATS = "corpus_stats"
ANCHORED_CHANNELS = (0, 4)  # c0 and c~0: anchored to the window's first token, not z-scored
ZSCORED_CHANNELS = (1, 2, 3, 5, 6, 7, 8)
CHANNEL_NAMES = ("c0", "c1", "c2", "c3", "v0", "v1", "v2", "v3", "v4")
STATS_SCHEMA: dict[str, pl.DataType] = {
    "tokenization": pl.String,
    "channel": pl.Int8,
    "channel_name": pl.String,
    "mean": pl.Float64,
    "std": pl.Float64,  # 1.0 where the channel is constant (RawGPT's zeroed orders)
    "n_values": pl.Int64,
    "fit_start": pl.Date,
    "fit_end": pl.Date,  # last shard date used; never after data.train_end
    "shards": pl.Int64,
    "shards_digest": pl.String,  # sha256 over the content hashes of the shards used, in date order
}


def training_days(settings: Settings, asset: str) -> list[dt.date]:
    """Dates of ``asset`` shards on or before the training cut (file names only: nothing later is opened)."""
    folder = settings.warehouse / asset
    days = (dt.date.fromisoformat(p.stem) for p in folder.glob("*.parquet"))
    return sorted(d for d in days if d <= settings.data.train_end)


def channel_moments(
    settings: Settings, asset: str, days: list[dt.date], chunk: int = 64
) -> tuple[np.ndarray, np.ndarray, int]:
    """Mean and std (ddof 0) of each of the 9 channels over every token of ``days``' shards, streamed."""
    total, total_sq, count = np.zeros(9), np.zeros(9), 0
    shift = None  # subtract a first-chunk mean per channel: keeps the sum of squares well conditioned
    for k in range(0, len(days), chunk):
        paths = [shard_path(settings.warehouse, asset, d) for d in days[k : k + chunk]]
        tokens = pl.read_parquet(paths, columns=["tokens"])["tokens"].to_numpy().astype(np.float64)
        values = tokens.reshape(-1, 9)
        values = values[np.isfinite(values).all(axis=1)]
        if shift is None and len(values):
            shift = values.mean(axis=0)
        if len(values):
            centred = values - shift
            total += centred.sum(axis=0)
            total_sq += (centred**2).sum(axis=0)
            count += len(values)
    if count == 0:
        raise ValueError(f"no {asset} tokens on or before {settings.data.train_end}: nothing to fit corpus_stats on")
    mean_c = total / count
    return shift + mean_c, np.sqrt(np.maximum(total_sq / count - mean_c**2, 0.0)), count


def fit_corpus_stats(settings: Settings, assets: tuple[str, ...] = TOKEN_ASSETS) -> pl.DataFrame:
    rows = []
    for asset in assets:
        days = training_days(settings, asset)
        mean, std, count = channel_moments(settings, asset, days)
        hashes = [
            pl.read_parquet(manifest_path(settings.warehouse, asset, d), columns=["content_hash"]).item() for d in days
        ]
        digest = hashlib.sha256("".join(hashes).encode()).hexdigest()
        for ch in ZSCORED_CHANNELS:
            rows.append(
                {
                    "tokenization": asset.removesuffix("_tokens"),
                    "channel": ch,
                    "channel_name": CHANNEL_NAMES[ch],
                    "mean": float(mean[ch]),
                    "std": float(std[ch]) if std[ch] > 1e-12 else 1.0,
                    "n_values": count,
                    "fit_start": days[0],
                    "fit_end": days[-1],
                    "shards": len(days),
                    "shards_digest": digest,
                }
            )
    return pl.DataFrame(rows, schema=STATS_SCHEMA)


def materialize_corpus_stats(settings: Settings) -> pl.DataFrame:
    stats = fit_corpus_stats(settings)
    write_parquet_atomic(stats, shard_path(settings.warehouse, CORPUS_STATS, "stats"))
    refresh_view(settings.warehouse, CORPUS_STATS, settings.warehouse / CORPUS_STATS, STATS_SCHEMA)
    return stats


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
