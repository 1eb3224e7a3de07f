"""Tokenize and corpus stages: alpha_estimates, the three token assets, labels, corpus_stats.

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


def build_tokenize_assets(settings: Settings) -> list[dg.AssetsDefinition]:
    return [
        alpha_estimates_asset(settings),
        token_assets(settings),
        labels_asset(settings),
        corpus_stats_asset(settings),
    ]
