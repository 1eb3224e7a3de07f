"""corpus_stats: mean and std of each z-scored channel per tokenization, over the training period only.

Which channels are z-scored is the tokenization's (``Tokenization.channels``): c0 and c~0 are anchored per window
(dual window anchoring) and not z-scored; the other seven (c1, c2, c3, c~1..c~4, or their fd/raw counterparts)
are standardized with these statistics (``Tokenization.normalize``). They are read from the token asset's window
store, which holds the shards dated on or before the last fold's training end and nothing later; each fold's rows
(column ``fold``) sum only its own training days, so no statistic a policy normalizes with sees its test period.
Each row records its fit window and a digest of the shards it was fitted on.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np
import polars as pl

from kinematic_pipeline.config import Settings
from kinematic_pipeline.folds import store_cut
from kinematic_pipeline.report.markdown import Markdown, markdown_table
from kinematic_pipeline.tokenizations import Tokenization, chosen
from kinematic_pipeline.warehouse import CORPUS_STATS
from kinematic_pipeline.warehouse.atomic import digest, remove_if_exists
from kinematic_pipeline.warehouse.verified import write_record
from kinematic_pipeline.window_store import open_store

STATS_SCHEMA: dict[str, pl.DataType] = {
    "tokenization": pl.String,
    "fold": pl.String,  # the fold whose training days the row is fitted on (folds.Fold.label)
    "channel": pl.Int8,
    "channel_name": pl.String,
    "mean": pl.Float64,
    "std": pl.Float64,  # 1.0 where the channel is constant (RawGPT's zeroed orders)
    "n_values": pl.Int64,
    "fit_start": pl.Date,
    "fit_end": pl.Date,  # last shard date used; never after split.train_end
    "shards": pl.Int64,
    "shards_digest": pl.String,  # sha256 over the content hashes of the shards used, in date order
}


def channel_moments(
    settings: Settings, tok: Tokenization, days: list[dt.date], cuts: list[dt.date] | None = None, chunk: int = 64
) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """Mean and std (ddof 0) of each channel over every token of the ``days`` on or before each of ``cuts``
    (default: the last day; a fold's training end each), streamed ``chunk`` days at a time from the window
    store: one sequential read of the windows the day shards hold. One pass: per-period partial sums (count,
    sum, sum of squares around a common shift) between consecutive cuts, accumulated, give every cut's
    moments without a second read."""
    store, n_channels = open_store(settings, tok), tok.n_channels
    first = dict(zip(store.days["date"].to_list(), store.days["first_row"].to_list()))
    windows = dict(zip(store.days["date"].to_list(), store.days["windows"].to_list()))
    cuts = sorted(cuts or [days[-1]])
    periods = np.searchsorted(np.array(cuts, dtype="datetime64[D]"), np.array(days, dtype="datetime64[D]"))
    total, total_sq = np.zeros((len(cuts), n_channels)), np.zeros((len(cuts), n_channels))
    count = np.zeros(len(cuts), dtype=np.int64)
    shift = None  # subtract a first-chunk mean per channel: keeps the sum of squares well conditioned
    for k in range(0, len(days), chunk):
        block = [(d, p) for d, p in zip(days[k : k + chunk], periods[k : k + chunk]) if d in first and p < len(cuts)]
        for period in sorted({p for _, p in block}):
            held = [d for d, p in block if p == period]  # a day without windows adds nothing
            lo, hi = first[held[0]], first[held[-1]] + windows[held[-1]]
            values = store.read(np.arange(lo, hi)).astype(np.float64).reshape(-1, n_channels)
            values = values[np.isfinite(values).all(axis=1)]
            if shift is None and len(values):
                shift = values.mean(axis=0)
            if len(values):
                centred = values - shift
                total[period] += centred.sum(axis=0)
                total_sq[period] += (centred**2).sum(axis=0)
                count[period] += len(values)
    out = []
    for j, cut in enumerate(cuts):
        n = int(count[: j + 1].sum())
        if n == 0:
            raise ValueError(f"no {tok.tokens_asset} tokens on or before {cut}: nothing to fit corpus_stats on")
        mean_c = total[: j + 1].sum(axis=0) / n
        var = total_sq[: j + 1].sum(axis=0) / n - mean_c**2
        out.append((shift + mean_c, np.sqrt(np.maximum(var, 0.0)), n))
    return out


def fit_corpus_stats(settings: Settings, tok: Tokenization) -> pl.DataFrame:
    """STATS_SCHEMA rows of one tokenization: its z-scored channels over each fold's training days."""
    wh, folds, asset = settings.warehouse, settings.folds, tok.tokens_asset
    days = wh.shard_days(asset, until=store_cut(settings))  # file names only: nothing later is opened
    moments = channel_moments(settings, tok, days, [f.train_end for f in folds])
    rows = []
    for fold, (mean, std, count) in zip(folds, moments):
        fold_days = [d for d in days if d <= fold.train_end]
        common = {
            "tokenization": tok.name,
            "fold": fold.label,
            "n_values": count,
            "fit_start": fold_days[0],
            "fit_end": fold_days[-1],
            "shards": len(fold_days),
            "shards_digest": digest(wh.content_hashes(asset, fold_days)),
        }
        rows += [
            {
                **common,
                "channel": ch,
                "channel_name": tok.channels[ch].name,
                "mean": float(mean[ch]),
                "std": float(std[ch]) if std[ch] > 1e-12 else 1.0,
            }
            for ch in tok.zscored
        ]
    return pl.DataFrame(rows, schema=STATS_SCHEMA)


@dataclass(frozen=True)
class CorpusSummary:
    """What materializing corpus_stats wrote: the STATS_SCHEMA rows of the token assets fitted."""

    stats: pl.DataFrame

    def metadata(self) -> dict:
        """What a tokenization's corpus_stats materialization shows (plain values)."""
        stats = self.stats
        return {
            "fit_window": "; ".join(  # one row set per fold, each fitted on its own training days
                f"fold {f}: {a} .. {b}"
                for f, a, b in stats.select("fold", "fit_start", "fit_end").unique(maintain_order=True).iter_rows()
            ),
            "statistics": Markdown(markdown_table(stats.drop("shards_digest", "fit_start", "fit_end"))),
            "shards_digest": stats["shards_digest"][0],
            "dagster/row_count": stats.height,
        }


def materialize_corpus_stats(settings: Settings, toks: tuple[Tokenization, ...] | None = None) -> CorpusSummary:
    """Fit and write ``corpus_stats/<tokenization>.parquet`` of each of ``toks`` (default: the run's; view
    ``corpus_stats``)."""
    wh, frames = settings.warehouse, []
    for tok in chosen(settings.tokenize.tokenizations) if toks is None else toks:
        stats = fit_corpus_stats(settings, tok)
        path = wh.corpus_stats_file(tok.name)
        write_record(path, wh.write(stats, path), wh.durable)  # fold_stats verifies the bytes (verify_recorded)
        frames.append(stats)
    remove_if_exists(wh.shard(CORPUS_STATS, "stats"))  # one file for every tokenization before they were split
    wh.refresh_view(CORPUS_STATS, STATS_SCHEMA)
    return CorpusSummary(stats=pl.concat(frames))
