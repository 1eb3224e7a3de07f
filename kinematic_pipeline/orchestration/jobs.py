"""Jobs: one per stage group, plus the whole DAG."""

from __future__ import annotations

import dagster as dg

from kinematic_pipeline.config import Settings
from kinematic_pipeline.orchestration.assets_evaluate import evaluation_partitions
from kinematic_pipeline.orchestration.assets_models import adapter_partitions, seed_partitions
from kinematic_pipeline.orchestration.partitions import trading_day_partitions
from kinematic_pipeline.storage import ALPHA_ESTIMATES, CORPUS_STATS, LABELS, TOKEN_ASSETS


def build_jobs(settings: Settings) -> list[dg.UnresolvedAssetJobDefinition]:
    partitions = trading_day_partitions(settings)
    return [
        dg.define_asset_job(
            "ingest_job",
            selection=dg.AssetSelection.groups("ingest"),
            partitions_def=partitions,
            description="Ingest trading days: raw_ohlcv and its quarantine (single-run backfills).",
        ),
        dg.define_asset_job(
            "tokenize_job",
            selection=dg.AssetSelection.assets(*TOKEN_ASSETS, LABELS),
            partitions_def=partitions,
            description="Tokenize trading days: the three token assets and the labels.",
        ),
        dg.define_asset_job(
            "pretrain_job",
            selection=dg.AssetSelection.groups("pretrain"),
            partitions_def=seed_partitions(settings),
            description="Pretrain the four foundation models (SplineGPT, RawGPT-FD, RawGPT, PatchTST), one per seed.",
        ),
        dg.define_asset_job(
            "finetune_job",
            selection=dg.AssetSelection.groups("finetune"),
            partitions_def=adapter_partitions(settings),
            description="Fine-tune one adapter per model, tau and seed (LoRA; PatchTST: linear probe).",
        ),
        dg.define_asset_job(
            "evaluate_job",
            selection=dg.AssetSelection.groups("evaluate"),
            partitions_def=evaluation_partitions(settings),
            description="Predict the test period and backtest it, one (tau, variant@seed) policy per partition.",
        ),
        dg.define_asset_job(
            "report_job",
            selection=dg.AssetSelection.groups("report"),
            description="Regenerate the paper's tables, figures and the Markdown report from the backtests.",
        ),
        dg.define_asset_job(
            "corpus_job",
            selection=dg.AssetSelection.assets(ALPHA_ESTIMATES, CORPUS_STATS),
            description="Fit alpha by marginal likelihood and the training-period corpus statistics.",
        ),
    ]
