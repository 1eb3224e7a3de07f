"""corpus_stats: mean and std of the 7 z-scored channels per tokenization, over the training period only.

Channels 0 (c0) and 4 (c~0) are anchored per window (dual window anchoring) and not z-scored; the
other seven (c1, c2, c3, c~1..c~4, or their fd/raw counterparts) are standardized with these
statistics. Only shards dated on or before ``data.train_end`` are opened: the statistics can never see
the test period. Each row records its fit window and a digest of the shards it was fitted on.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl

from kinematic_pipeline.config import Settings
from kinematic_pipeline.storage import CORPUS_STATS, TOKEN_ASSETS, Warehouse, digest, write_parquet_atomic
from kinematic_pipeline.windows import CHANNEL_NAMES, ZSCORED_CHANNELS

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


def channel_moments(
    settings: Settings, asset: str, days: list[dt.date], chunk: int = 64
) -> tuple[np.ndarray, np.ndarray, int]:
    """Mean and std (ddof 0) of each of the 9 channels over every token of ``days``' shards, streamed."""
    total, total_sq, count = np.zeros(9), np.zeros(9), 0
    shift = None  # subtract a first-chunk mean per channel: keeps the sum of squares well conditioned
    for k in range(0, len(days), chunk):
        paths = [Warehouse(settings.warehouse).shard(asset, d) for d in days[k : k + chunk]]
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
    rows, wh = [], Warehouse(settings.warehouse)
    for asset in assets:
        days = wh.shard_days(asset, until=settings.data.train_end)  # file names only: nothing later is opened
        mean, std, count = channel_moments(settings, asset, days)
        shards_digest = digest([wh.content_hash(asset, d) for d in days])
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
                    "shards_digest": shards_digest,
                }
            )
    return pl.DataFrame(rows, schema=STATS_SCHEMA)


def materialize_corpus_stats(settings: Settings) -> pl.DataFrame:
    stats, wh = fit_corpus_stats(settings), Warehouse(settings.warehouse)
    write_parquet_atomic(stats, wh.shard(CORPUS_STATS, "stats"))
    wh.refresh_view(CORPUS_STATS, STATS_SCHEMA)
    return stats
