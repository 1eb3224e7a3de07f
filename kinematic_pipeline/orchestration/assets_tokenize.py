"""Tokenize and corpus stages: alpha_estimates, the token asset of each of the run's tokenizations
(``tokenize.tokenizations``), labels, each tokenization's corpus statistics and window store.

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
from kinematic_pipeline.tokenizations import SPLINE, chosen
from kinematic_pipeline.warehouse import ALPHA_ESTIMATES, LABELS, RAW_OHLCV
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
    """The token assets: one multi-asset, since one pass over the bars feeds every tokenization's kernel."""
    partitions, toks = trading_day_partitions(settings), chosen(settings.tokenize.tokenizations)
    window_of_raw = dg.TimeWindowPartitionMapping(start_offset=-LOOKBACK, end_offset=0)

    @dg.multi_asset(
        specs=[
            dg.AssetSpec(
                tok.tokens_asset,
                description=tok.description,
                partitions_def=partitions,
                group_name="tokenize",
                code_version=TOKENIZE_CODE_VERSION,
                deps=[dg.AssetDep(RAW_OHLCV, partition_mapping=window_of_raw), dg.AssetDep(ALPHA_ESTIMATES)],
                kinds={"parquet", "numba"},
            )
            for tok in toks
        ],
        partitions_def=partitions,
        backfill_policy=dg.BackfillPolicy.single_run(),
        can_subset=True,
        name="tokenize_windows",
    )
    def tokenize_windows(context: dg.AssetExecutionContext):
        days = partition_days(context)
        selected = tuple(t for t in toks if dg.AssetKey(t.tokens_asset) in context.selected_asset_keys)
        summaries = materialize_tokens(settings, days, selected)
        for kind in (t.tokens_asset for t in selected):
            yield dg.MaterializeResult(asset_key=kind, metadata=dagster_metadata(summaries[kind].metadata()))

    return tokenize_windows


def labels_asset(settings: Settings) -> dg.AssetsDefinition:
    ahead = dg.TimeWindowPartitionMapping(start_offset=0, end_offset=settings.label_horizon)  # the sessions it reads

    @dg.asset(
        name=LABELS,
        partitions_def=trading_day_partitions(settings),
        group_name="tokenize",
        code_version=TOKENIZE_CODE_VERSION,
        backfill_policy=dg.BackfillPolicy.single_run(),
        deps=[
            dg.AssetDep(SPLINE.tokens_asset, partition_mapping=ahead),
            dg.AssetDep(RAW_OHLCV, partition_mapping=ahead),
        ],
        kinds={"parquet"},
        description="Each of the run's tasks' target per window (Buy/Sell/Hold for each tau in {0.25%, 0.5%, 1%, "
        "2%}); day t needs the sessions after it the tasks read (Buy/Sell/Hold: t+1; unknown = -1 until they "
        "exist). Stores r_spline and r_close; labels use tokenize.label_source.",
    )
    def labels(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        days = partition_days(context)
        summary = materialize_labels(settings, days)
        return dg.MaterializeResult(metadata=dagster_metadata(summary.metadata()))

    return labels


def corpus_stats_assets(settings: Settings) -> dg.AssetsDefinition:
    """Each tokenization's channel statistics (``corpus_stats/<tokenization>.parquet``, view ``corpus_stats``),
    an asset of its own: one tokenization's change leaves the others' statistics (and models) current."""
    toks = chosen(settings.tokenize.tokenizations)

    @dg.multi_asset(
        specs=[
            dg.AssetSpec(
                tok.corpus_stats_asset,
                description=f"Mean/std of the {len(tok.zscored)} z-scored channels of {tok.tokens_asset}, one row per "
                "fold over that fold's training days only (read from its window store), with the fit window and a "
                "digest of the shards.",
                group_name="corpus",
                code_version=TOKENIZE_CODE_VERSION,
                deps=[dg.AssetDep(tok.window_store_asset)],  # the training period's windows, read in order
                kinds={"parquet", "duckdb"},
            )
            for tok in toks
        ],
        can_subset=True,
        name="corpus_stats",
    )
    def corpus_stats(context: dg.AssetExecutionContext):
        for tok in toks:
            name = tok.corpus_stats_asset
            if dg.AssetKey(name) in context.selected_asset_keys:
                summary = materialize_corpus_stats(settings, (tok,))
                yield dg.MaterializeResult(asset_key=name, metadata=dagster_metadata(summary.metadata()))

    return corpus_stats


def window_store_assets(settings: Settings) -> dg.AssetsDefinition:
    """One window store per token asset (``window_store.py``): what training samples its windows from."""
    toks = chosen(settings.tokenize.tokenizations)

    @dg.multi_asset(
        specs=[
            dg.AssetSpec(
                tok.window_store_asset,
                description=f"The training-period windows of {tok.tokens_asset} (days <= the last fold's training cut, "
                "folds.store_cut: each fold reads its own prefix) in one memory-mapped file indexed by row, built "
                "from the day shards: every training epoch is a uniform sample of it. "
                f"$KP_WAREHOUSE/window_store/{tok.tokens_asset}/ (tokens.npy, rows, days, manifest with sha256s).",
                group_name="corpus",
                code_version=CODE_VERSIONS["window_store"],
                deps=[dg.AssetDep(tok.tokens_asset, partition_mapping=dg.AllPartitionMapping())],
                kinds={"numpy"},
            )
            for tok in toks
        ],
        can_subset=True,
        name="window_stores",
    )
    def window_stores(context: dg.AssetExecutionContext):
        for tok in toks:
            name = tok.window_store_asset
            if dg.AssetKey(name) not in context.selected_asset_keys:
                continue
            summary = materialize_window_store(settings, tok)
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
