"""Tokenize and corpus stages: alpha_estimates, the three token assets, labels, each tokenization's corpus
statistics and window store.

One factory per asset definition; each body calls one stage function and returns its metadata.
"""

import dagster as dg

from kinematic_pipeline.code_versions import CODE_VERSIONS
from kinematic_pipeline.config import Settings
from kinematic_pipeline.orchestration.metadata import dagster_metadata
from kinematic_pipeline.orchestration.partitions import partition_days, trading_day_partitions
from kinematic_pipeline.stages.alpha import materialize_alpha_estimates
from kinematic_pipeline.stages.corpus import materialize_corpus_stats
from kinematic_pipeline.stages.labels import materialize_labels
from kinematic_pipeline.stages.tokenize import materialize_tokens
from kinematic_pipeline.stages.window_store import materialize_window_store
from kinematic_pipeline.token_kinds import SPLINE_TOKENS, TOKEN_ASSETS, token_kind
from kinematic_pipeline.warehouse import ALPHA_ESTIMATES, LABELS, RAW_OHLCV
from kinematic_pipeline.window_store import window_store_asset
from kinematic_pipeline.windows import LOOKBACK

TOKENIZE_CODE_VERSION = CODE_VERSIONS["tokenize"]


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
    def alpha_estimates() -> dg.MaterializeResult:
        summary = materialize_alpha_estimates(settings)
        return dg.MaterializeResult(metadata=dagster_metadata(summary.metadata()))

    return alpha_estimates


def token_assets(settings: Settings) -> dg.AssetsDefinition:
    """The three token assets: one multi-asset, since one pass over the bars feeds all three kernels."""
    partitions = trading_day_partitions(settings)
    window_of_raw = dg.TimeWindowPartitionMapping(start_offset=-LOOKBACK, end_offset=0)

    @dg.multi_asset(
        specs=[
            dg.AssetSpec(
                kind,
                description=token_kind(kind).description,
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
        summaries = materialize_tokens(settings, days, kinds=kinds)
        for kind in kinds:
            yield dg.MaterializeResult(asset_key=kind, metadata=dagster_metadata(summaries[kind].metadata()))

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
            dg.AssetDep(SPLINE_TOKENS, partition_mapping=next_day),
            dg.AssetDep(RAW_OHLCV, partition_mapping=next_day),
        ],
        kinds={"parquet"},
        description="Buy/Sell/Hold per window for each tau in {0.25%, 0.5%, 1%, 2%}; day t needs day t+1 "
        "(unknown = -1 until it exists). Stores r_spline and r_close; labels use tokenize.label_source.",
    )
    def labels(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        days = partition_days(context)
        summary = materialize_labels(settings, days)
        return dg.MaterializeResult(metadata=dagster_metadata(summary.metadata()))

    return labels


def corpus_stats_assets(settings: Settings) -> dg.AssetsDefinition:
    """Each tokenization's channel statistics (``corpus_stats/<tokenization>.parquet``, view ``corpus_stats``),
    an asset of its own: one tokenization's change leaves the others' statistics (and models) current."""

    @dg.multi_asset(
        specs=[
            dg.AssetSpec(
                token_kind(kind).corpus_stats_asset,
                description=f"Mean/std of the 7 z-scored channels of {kind}, one row per fold over that fold's "
                "training days only (read from its window store), with the fit window and a digest of the shards.",
                group_name="corpus",
                code_version=TOKENIZE_CODE_VERSION,
                deps=[dg.AssetDep(window_store_asset(kind))],  # the training period's windows, read in order
                kinds={"parquet", "duckdb"},
            )
            for kind in TOKEN_ASSETS
        ],
        can_subset=True,
        name="corpus_stats",
    )
    def corpus_stats(context: dg.AssetExecutionContext):
        for kind in TOKEN_ASSETS:
            name = token_kind(kind).corpus_stats_asset
            if dg.AssetKey(name) in context.selected_asset_keys:
                summary = materialize_corpus_stats(settings, (kind,))
                yield dg.MaterializeResult(asset_key=name, metadata=dagster_metadata(summary.metadata()))

    return corpus_stats


def window_store_assets(settings: Settings) -> dg.AssetsDefinition:
    """One window store per token asset (``window_store.py``): what training samples its windows from."""

    @dg.multi_asset(
        specs=[
            dg.AssetSpec(
                window_store_asset(kind),
                description=f"The training-period windows of {kind} (days <= the last fold's training cut, "
                "folds.store_cut: each fold reads its own prefix) in one memory-mapped file indexed by row, built "
                "from the day shards: every training epoch is a uniform sample of it. "
                f"$KP_WAREHOUSE/window_store/{kind}/ (tokens.npy, rows, days, manifest with sha256s).",
                group_name="corpus",
                code_version=CODE_VERSIONS["window_store"],
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
            summary = materialize_window_store(settings, kind)
            context.log.info(f"{name}: {summary}")
            yield dg.MaterializeResult(asset_key=name, metadata=dagster_metadata(summary.metadata()))

    return window_stores


def build_tokenize_assets(settings: Settings) -> list[dg.AssetsDefinition]:
    return [
        alpha_estimates_asset(settings),
        token_assets(settings),
        labels_asset(settings),
        corpus_stats_assets(settings),
        window_store_assets(settings),
    ]
