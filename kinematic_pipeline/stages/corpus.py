"""corpus_stats: mean and std of the 7 z-scored channels per tokenization, over the training period only.

Channels 0 (c0) and 4 (c~0) are anchored per window (dual window anchoring) and not z-scored; the
other seven (c1, c2, c3, c~1..c~4, or their fd/raw counterparts) are standardized with these
statistics. They are read from the token asset's window store, which holds the shards dated on or before
``data.train_end`` and nothing later: the statistics can never see the test period. Each row records its fit window and a digest of the shards it was fitted on.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl

from kinematic_pipeline.atomic_files import digest, remove_if_exists
from kinematic_pipeline.config import Settings
from kinematic_pipeline.token_kinds import TOKEN_ASSETS, token_kind
from kinematic_pipeline.warehouse import CORPUS_STATS
from kinematic_pipeline.window_store import open_store
from kinematic_pipeline.windows import CHANNEL_NAMES, N_CHANNELS, ZSCORED_CHANNELS

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
    """Mean and std (ddof 0) of each channel over every token of ``days`` (the training period's, all of them
    in the window store), streamed ``chunk`` days at a time from the store: one sequential read of the windows
    the day shards hold, in the same order, instead of a second pass over the Parquet shards."""
    store = open_store(settings, asset)
    first = dict(zip(store.days["date"].to_list(), store.days["first_row"].to_list()))
    windows = dict(zip(store.days["date"].to_list(), store.days["windows"].to_list()))
    total, total_sq, count = np.zeros(N_CHANNELS), np.zeros(N_CHANNELS), 0
    shift = None  # subtract a first-chunk mean per channel: keeps the sum of squares well conditioned
    for k in range(0, len(days), chunk):
        held = [d for d in days[k : k + chunk] if d in first]  # a day without windows adds nothing
        if not held:
            continue
        lo, hi = first[held[0]], first[held[-1]] + windows[held[-1]]
        values = store.read(np.arange(lo, hi)).astype(np.float64).reshape(-1, N_CHANNELS)
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


def fit_corpus_stats(settings: Settings, asset: str) -> pl.DataFrame:
    """STATS_SCHEMA rows of one token asset: its 7 z-scored channels over the training period."""
    wh = settings.warehouse
    days = wh.shard_days(asset, until=settings.data.train_end)  # file names only: nothing later is opened
    mean, std, count = channel_moments(settings, asset, days)
    common = {
        "tokenization": token_kind(asset).tokenization,
        "n_values": count,
        "fit_start": days[0],
        "fit_end": days[-1],
        "shards": len(days),
        "shards_digest": digest(wh.content_hashes(asset, days)),
    }
    rows = [
        {
            **common,
            "channel": ch,
            "channel_name": CHANNEL_NAMES[ch],
            "mean": float(mean[ch]),
            "std": float(std[ch]) if std[ch] > 1e-12 else 1.0,
        }
        for ch in ZSCORED_CHANNELS
    ]
    return pl.DataFrame(rows, schema=STATS_SCHEMA)


def materialize_corpus_stats(settings: Settings, assets: tuple[str, ...] = TOKEN_ASSETS) -> pl.DataFrame:
    """Fit and write ``corpus_stats/<tokenization>.parquet`` of each token asset (view ``corpus_stats``)."""
    wh, frames = settings.warehouse, []
    for asset in assets:
        stats = fit_corpus_stats(settings, asset)
        wh.write(stats, wh.corpus_stats_file(token_kind(asset).tokenization))
        frames.append(stats)
    remove_if_exists(wh.shard(CORPUS_STATS, "stats"))  # one file for every tokenization before they were split
    wh.refresh_view(CORPUS_STATS, STATS_SCHEMA)
    return pl.concat(frames)


def corpus_stats_metadata(settings: Settings, stats: pl.DataFrame) -> dict:
    """What a tokenization's corpus_stats materialization shows (plain values)."""
    from kinematic_pipeline.report.markdown import Markdown, markdown_table

    return {
        "fit_window": f"{stats['fit_start'].min()} .. {stats['fit_end'].max()} (train_end {settings.data.train_end})",
        "statistics": Markdown(markdown_table(stats.drop("shards_digest", "fit_start", "fit_end"))),
        "shards_digest": stats["shards_digest"][0],
        "dagster/row_count": stats.height,
    }
