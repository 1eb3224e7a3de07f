"""Tokenize and corpus stages: alpha_estimates, the three token assets, labels, corpus_stats, the window stores.

One factory per asset definition; each body calls one stage function and turns its result into metadata.
"""

import time

import dagster as dg
import polars as pl

from kinematic_pipeline.config import Settings
from kinematic_pipeline.orchestration.metadata import markdown_table
from kinematic_pipeline.orchestration.partitions import partition_days, trading_day_partitions
from kinematic_pipeline.stages.alpha import materialize_alpha_estimates
from kinematic_pipeline.stages.corpus import materialize_corpus_stats
from kinematic_pipeline.stages.labels import label_distribution, materialize_labels
from kinematic_pipeline.stages.tokenize import LOOKBACK, materialize_tokens
from kinematic_pipeline.storage import (
    ALPHA_ESTIMATES,
    CORPUS_STATS,
    LABELS,
    RAW_OHLCV,
    TOKEN_ASSETS,
    combined_hash,
)
from kinematic_pipeline.window_store import STORE_CODE_VERSION, WINDOW_BYTES, build_window_store, window_store_asset

TOKENIZE_CODE_VERSION = "tokenize-1"
TOKEN_DESCRIPTIONS = {
    "spline_tokens": "Exact optimal-spline tokens (paper eq. 1 and 2): per ticker, the 64x9 window ending on the day "
    "(c0..c3 of log price, c~0..c~4 of log volume), float32, unanchored.",
    "fd_tokens": "RawGPT-FD baseline: backward finite differences of log price (orders 0-3) and log volume (0-4).",
    "raw_tokens": "RawGPT baseline: raw log price/volume and first differences, higher orders zeroed.",
}


def alpha_estimates_asset(settings: Settings) -> dg.AssetsDefinition:
    @dg.asset(
        name=ALPHA_ESTIMATES,
        group_name="tokenize",
        code_version=TOKENIZE_CODE_VERSION,
        deps=[dg.AssetDep(RAW_OHLCV)],
        kinds={"parquet"},
        description="alpha of problems (1) and (2) by maximum marginal likelihood (exact diffuse Kalman filter) "
        "over the training period: pooled per corpus, and per ticker for alpha_mle_scope='ticker'. The "
        "tokenizer uses it when tokenize.alpha_price/alpha_volume = 'mle'.",
    )
    def alpha_estimates(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        estimates = materialize_alpha_estimates(settings)
        corpus = estimates.filter(pl.col("scope") == "__corpus__")
        alpha = dict(zip(corpus["kind"].to_list(), corpus["alpha"].to_list()))
        context.log.info(f"ML alpha over {settings.data.start_date}..{settings.data.train_end}: {alpha}")
        return dg.MaterializeResult(
            metadata={
                "alpha_price_corpus": alpha["price"],
                "alpha_volume_corpus": alpha["volume"],
                "estimates": dg.MetadataValue.md(markdown_table(estimates.head(40))),
                "per_ticker_estimates": estimates.height - corpus.height,
                "fit_window": f"{settings.data.start_date} .. {settings.data.train_end}",
                "used_by_tokenizer": f"alpha_price={settings.tokenize.alpha_price}, "
                f"alpha_volume={settings.tokenize.alpha_volume}",
            }
        )

    return alpha_estimates


def token_assets(settings: Settings) -> dg.AssetsDefinition:
    """The three token assets: one multi-asset, since one pass over the bars feeds all three kernels."""
    partitions = trading_day_partitions(settings)
    window_of_raw = dg.TimeWindowPartitionMapping(start_offset=-LOOKBACK, end_offset=0)

    @dg.multi_asset(
        specs=[
            dg.AssetSpec(
                kind,
                description=TOKEN_DESCRIPTIONS[kind],
                partitions_def=partitions,
                group_name="tokenize",
                code_version=TOKENIZE_CODE_VERSION,
                deps=[dg.AssetDep(RAW_OHLCV, partition_mapping=window_of_raw), dg.AssetDep(ALPHA_ESTIMATES)],
                kinds={"parquet", "numba"},
            )
            for kind in TOKEN_ASSETS
        ],
        partitions_def=partitions,
        backfill_policy=dg.BackfillPolicy.single_run(),
        can_subset=True,
        name="tokenize_windows",
    )
    def tokenize_windows(context: dg.AssetExecutionContext):
        days = partition_days(context)
        kinds = tuple(k for k in TOKEN_ASSETS if dg.AssetKey(k) in context.selected_asset_keys)
        started = time.perf_counter()
        manifests = materialize_tokens(settings, days, kinds=kinds)
        seconds = time.perf_counter() - started
        for kind in kinds:
            m = manifests[kind]
            windows = int(m["windows"].sum())
            yield dg.MaterializeResult(
                asset_key=kind,
                metadata={
                    "windows": windows,
                    "date_range": f"{days[0]} .. {days[-1]} ({len(days)} sessions)",
                    "content_hash": combined_hash(m["content_hash"].to_list()),
                    "raw_inputs_digest": combined_hash(m["raw_inputs_digest"].to_list()),
                    "alpha_price": m["alpha_price"][0],
                    "alpha_volume": m["alpha_volume"][0],
                    "time_unit": settings.tokenize.time_unit,
                    "stage_seconds": round(seconds, 2),
                    "windows_per_second_all_kinds": round(windows * len(kinds) / max(seconds, 1e-9)),
                    "warehouse_path": dg.MetadataValue.path(str(settings.warehouse / kind)),
                    "dagster/row_count": windows,
                },
            )

    return tokenize_windows


def labels_asset(settings: Settings) -> dg.AssetsDefinition:
    next_day = dg.TimeWindowPartitionMapping(start_offset=0, end_offset=1)

    @dg.asset(
        name=LABELS,
        partitions_def=trading_day_partitions(settings),
        group_name="tokenize",
        code_version=TOKENIZE_CODE_VERSION,
        backfill_policy=dg.BackfillPolicy.single_run(),
        deps=[
            dg.AssetDep("spline_tokens", partition_mapping=next_day),
            dg.AssetDep(RAW_OHLCV, partition_mapping=next_day),
        ],
        kinds={"parquet"},
        description="Buy/Sell/Hold per window for each tau in {0.25%, 0.5%, 1%, 2%}; day t needs day t+1 "
        "(unknown = -1 until it exists). Stores r_spline and r_close; labels use tokenize.label_source.",
    )
    def labels(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        days = partition_days(context)
        manifest = materialize_labels(settings, days)
        return dg.MaterializeResult(
            metadata={
                "windows": int(manifest["windows"].sum()),
                "known_next_day": int(manifest["known"].sum()),
                "label_source": settings.tokenize.label_source,
                "distribution": dg.MetadataValue.md(markdown_table(label_distribution(settings, days))),
                "content_hash": combined_hash(manifest["content_hash"].to_list()),
                "dagster/row_count": int(manifest["windows"].sum()),
            }
        )

    return labels


def corpus_stats_asset(settings: Settings) -> dg.AssetsDefinition:
    @dg.asset(
        name=CORPUS_STATS,
        group_name="corpus",
        code_version=TOKENIZE_CODE_VERSION,
        deps=[dg.AssetDep(k) for k in TOKEN_ASSETS],
        kinds={"parquet", "duckdb"},
        description="Mean/std of the 7 z-scored channels per tokenization over the training period only "
        "(shards dated <= data.train_end), with the fit window and a digest of the shards used.",
    )
    def corpus_stats() -> dg.MaterializeResult:
        stats = materialize_corpus_stats(settings)
        fit_window = f"{stats['fit_start'].min()} .. {stats['fit_end'].max()} (train_end {settings.data.train_end})"
        return dg.MaterializeResult(
            metadata={
                "fit_window": fit_window,
                "statistics": dg.MetadataValue.md(markdown_table(stats.drop("shards_digest", "fit_start", "fit_end"))),
                "shards_digest": combined_hash(stats["shards_digest"].unique(maintain_order=True).to_list()),
                "dagster/row_count": stats.height,
            }
        )

    return corpus_stats


def window_store_assets(settings: Settings) -> dg.AssetsDefinition:
    """One window store per token asset (``window_store.py``): what training samples its windows from."""

    @dg.multi_asset(
        specs=[
            dg.AssetSpec(
                window_store_asset(kind),
                description=f"The training-period windows of {kind} (days <= data.train_end) in one memory-mapped "
                "file indexed by row, built from the day shards: every training epoch is a uniform sample of it. "
                f"$KP_WAREHOUSE/window_store/{kind}/ (tokens.npy, rows, days, manifest with sha256s).",
                group_name="corpus",
                code_version=STORE_CODE_VERSION,
                deps=[dg.AssetDep(kind, partition_mapping=dg.AllPartitionMapping())],
                kinds={"numpy"},
            )
            for kind in TOKEN_ASSETS
        ],
        can_subset=True,
        name="window_stores",
    )
    def window_stores(context: dg.AssetExecutionContext):
        for kind in TOKEN_ASSETS:
            name = window_store_asset(kind)
            if dg.AssetKey(name) not in context.selected_asset_keys:
                continue
            summary = build_window_store(settings, kind)
            m = summary.manifest
            context.log.info(
                f"{name}: {m['windows']:,} windows of {m['days']:,} days "
                f"({'built' if summary.rebuilt else 'unchanged'}, {summary.seconds:.0f} s)"
            )
            yield dg.MaterializeResult(
                asset_key=name,
                metadata={
                    "windows": m["windows"],
                    "days": m["days"],
                    "date_range": f"{m['first_day']} .. {m['last_day']} (train_end {m['train_end']})",
                    "non_finite_windows": m["non_finite_windows"],
                    "tokens_sha256": m["tokens_sha256"],
                    "shards_digest": m["shards_digest"],
                    "rebuilt": summary.rebuilt,
                    "gigabytes": round(m["windows"] * WINDOW_BYTES / 1e9, 3),
                    "stage_seconds": round(summary.seconds, 1),
                    "path": dg.MetadataValue.path(str(summary.folder)),
                    "dagster/row_count": m["windows"],
                },
            )

    return window_stores


def build_tokenize_assets(settings: Settings) -> list[dg.AssetsDefinition]:
    return [
        alpha_estimates_asset(settings),
        token_assets(settings),
        labels_asset(settings),
        corpus_stats_asset(settings),
        window_store_assets(settings),
    ]
