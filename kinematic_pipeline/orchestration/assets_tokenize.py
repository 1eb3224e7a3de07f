"""Tokenize and corpus stages: alpha_estimates, the three token assets, labels, corpus_stats."""

import hashlib
import time

import dagster as dg
import polars as pl

from kinematic_pipeline.config import Settings
from kinematic_pipeline.orchestration.metadata import markdown_table
from kinematic_pipeline.orchestration.partitions import partition_days, trading_day_partitions
from kinematic_pipeline.orchestration.resources import PipelineSettings
from kinematic_pipeline.stages.alpha import ALPHA_ASSET, materialize_alpha_estimates
from kinematic_pipeline.stages.corpus import CORPUS_STATS, materialize_corpus_stats
from kinematic_pipeline.stages.labels import LABELS_ASSET, label_distribution, materialize_labels
from kinematic_pipeline.stages.tokenize import LOOKBACK, TOKEN_ASSETS, materialize_tokens

TOKENIZE_CODE_VERSION = "tokenize-1"
TOKEN_DESCRIPTIONS = {
    "spline_tokens": "Exact optimal-spline tokens (paper eq. 1 and 2): per ticker, the 64x9 window ending on the day "
    "(c0..c3 of log price, c~0..c~4 of log volume), float32, unanchored.",
    "fd_tokens": "RawGPT-FD baseline: backward finite differences of log price (orders 0-3) and log volume (0-4).",
    "raw_tokens": "RawGPT baseline: raw log price/volume and first differences, higher orders zeroed.",
}


def _combined_hash(hashes: list[str]) -> str:
    return hashes[0] if len(hashes) == 1 else hashlib.sha256("".join(hashes).encode()).hexdigest()


def build_tokenize_assets(settings: Settings) -> list[dg.AssetsDefinition]:
    partitions = trading_day_partitions(settings)
    window_of_raw = dg.TimeWindowPartitionMapping(start_offset=-LOOKBACK, end_offset=0)

    @dg.asset(
        name=ALPHA_ASSET,
        group_name="tokenize",
        code_version=TOKENIZE_CODE_VERSION,
        deps=[dg.AssetDep("raw_ohlcv")],
        kinds={"parquet"},
        description="alpha of problems (1) and (2) by maximum marginal likelihood (exact diffuse Kalman filter) "
        "over the training period: pooled per corpus, and per ticker for alpha_mle_scope='ticker'. The "
        "tokenizer uses it when tokenize.alpha_price/alpha_volume = 'mle'.",
    )
    def alpha_estimates(context: dg.AssetExecutionContext, settings: PipelineSettings) -> dg.MaterializeResult:
        cfg = settings.resolve()
        estimates = materialize_alpha_estimates(cfg)
        corpus = estimates.filter(pl.col("scope") == "__corpus__")
        alpha = dict(zip(corpus["kind"].to_list(), corpus["alpha"].to_list()))
        context.log.info(f"ML alpha over {cfg.data.start_date}..{cfg.data.train_end}: {alpha}")
        return dg.MaterializeResult(
            metadata={
                "alpha_price_corpus": alpha["price"],
                "alpha_volume_corpus": alpha["volume"],
                "estimates": dg.MetadataValue.md(markdown_table(estimates.head(40))),
                "per_ticker_estimates": estimates.height - corpus.height,
                "fit_window": f"{cfg.data.start_date} .. {cfg.data.train_end}",
                "used_by_tokenizer": f"alpha_price={cfg.tokenize.alpha_price}, alpha_volume={cfg.tokenize.alpha_volume}",
            }
        )

    @dg.multi_asset(
        specs=[
            dg.AssetSpec(
                kind,
                description=TOKEN_DESCRIPTIONS[kind],
                partitions_def=partitions,
                group_name="tokenize",
                code_version=TOKENIZE_CODE_VERSION,
                deps=[dg.AssetDep("raw_ohlcv", partition_mapping=window_of_raw), dg.AssetDep(ALPHA_ASSET)],
                kinds={"parquet", "numba"},
            )
            for kind in TOKEN_ASSETS
        ],
        partitions_def=partitions,
        backfill_policy=dg.BackfillPolicy.single_run(),
        can_subset=True,
        name="tokenize_windows",
    )
    def tokenize_windows(context: dg.AssetExecutionContext, settings: PipelineSettings):
        cfg = settings.resolve()
        days = partition_days(context)
        kinds = tuple(k for k in TOKEN_ASSETS if dg.AssetKey(k) in context.selected_asset_keys)
        started = time.perf_counter()
        manifests = materialize_tokens(cfg, days, kinds=kinds)
        seconds = time.perf_counter() - started
        for kind in kinds:
            m = manifests[kind]
            windows = int(m["windows"].sum())
            yield dg.MaterializeResult(
                asset_key=kind,
                metadata={
                    "windows": windows,
                    "date_range": f"{days[0]} .. {days[-1]} ({len(days)} sessions)",
                    "content_hash": _combined_hash(m["content_hash"].to_list()),
                    "raw_inputs_digest": _combined_hash(m["raw_inputs_digest"].to_list()),
                    "alpha_price": m["alpha_price"][0],
                    "alpha_volume": m["alpha_volume"][0],
                    "time_unit": cfg.tokenize.time_unit,
                    "stage_seconds": round(seconds, 2),
                    "windows_per_second_all_kinds": round(windows * len(kinds) / max(seconds, 1e-9)),
                    "warehouse_path": dg.MetadataValue.path(str(cfg.warehouse / kind)),
                    "dagster/row_count": windows,
                },
            )

    @dg.asset(
        name=LABELS_ASSET,
        partitions_def=partitions,
        group_name="tokenize",
        code_version=TOKENIZE_CODE_VERSION,
        backfill_policy=dg.BackfillPolicy.single_run(),
        deps=[
            dg.AssetDep("spline_tokens", partition_mapping=dg.TimeWindowPartitionMapping(start_offset=0, end_offset=1)),
            dg.AssetDep("raw_ohlcv", partition_mapping=dg.TimeWindowPartitionMapping(start_offset=0, end_offset=1)),
        ],
        kinds={"parquet"},
        description="Buy/Sell/Hold per window for each tau in {0.25%, 0.5%, 1%, 2%}; day t needs day t+1 "
        "(unknown = -1 until it exists). Stores r_spline and r_close; labels use tokenize.label_source.",
    )
    def labels(context: dg.AssetExecutionContext, settings: PipelineSettings) -> dg.MaterializeResult:
        cfg = settings.resolve()
        days = partition_days(context)
        manifest = materialize_labels(cfg, days)
        return dg.MaterializeResult(
            metadata={
                "windows": int(manifest["windows"].sum()),
                "known_next_day": int(manifest["known"].sum()),
                "label_source": cfg.tokenize.label_source,
                "distribution": dg.MetadataValue.md(markdown_table(label_distribution(cfg, days))),
                "content_hash": _combined_hash(manifest["content_hash"].to_list()),
                "dagster/row_count": int(manifest["windows"].sum()),
            }
        )

    @dg.asset(
        name=CORPUS_STATS,
        group_name="corpus",
        code_version=TOKENIZE_CODE_VERSION,
        deps=[dg.AssetDep(k) for k in TOKEN_ASSETS],
        kinds={"parquet", "duckdb"},
        description="Mean/std of the 7 z-scored channels per tokenization over the training period only "
        "(shards dated <= data.train_end), with the fit window and a digest of the shards used.",
    )
    def corpus_stats(context: dg.AssetExecutionContext, settings: PipelineSettings) -> dg.MaterializeResult:
        cfg = settings.resolve()
        stats = materialize_corpus_stats(cfg)
        return dg.MaterializeResult(
            metadata={
                "fit_window": f"{stats['fit_start'].min()} .. {stats['fit_end'].max()} (train_end {cfg.data.train_end})",
                "statistics": dg.MetadataValue.md(markdown_table(stats.drop("shards_digest", "fit_start", "fit_end"))),
                "shards_digest": _combined_hash(stats["shards_digest"].unique(maintain_order=True).to_list()),
                "dagster/row_count": stats.height,
            }
        )

    return [alpha_estimates, tokenize_windows, labels, corpus_stats]
