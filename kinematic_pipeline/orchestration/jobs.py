"""Jobs: one per stage group, plus the whole DAG."""

from __future__ import annotations

import dagster as dg

from kinematic_pipeline.config import Settings
from kinematic_pipeline.orchestration.partitions import fit_partitions, policy_partitions, trading_day_partitions
from kinematic_pipeline.tokenizations import chosen
from kinematic_pipeline.warehouse import ALPHA_ESTIMATES, LABELS


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
            selection=dg.AssetSelection.assets(
                *(t.tokens_asset for t in chosen(settings.tokenize.tokenizations)), LABELS
            ),
            partitions_def=partitions,
            description="Tokenize trading days: the run's token assets and the labels.",
        ),
        dg.define_asset_job(
            "pretrain_job",
            selection=dg.AssetSelection.groups("pretrain"),
            partitions_def=fit_partitions(settings),
            description="Pretrain the four foundation models (SplineGPT, RawGPT-FD, RawGPT, PatchTST), one per seed.",
        ),
        dg.define_asset_job(
            "finetune_job",
            selection=dg.AssetSelection.groups("finetune"),
            partitions_def=policy_partitions(settings),
            description="Fine-tune each model's adapter of one (seed, tau) partition (LoRA; PatchTST: linear probe).",
        ),
        dg.define_asset_job(
            "evaluate_job",
            selection=dg.AssetSelection.groups("evaluate"),
            partitions_def=policy_partitions(settings),
            description="Predict the test period and backtest it: every variant's policy of one (seed, tau) partition.",
        ),
        *(
            [
                dg.define_asset_job(
                    "baselines_job",
                    selection=dg.AssetSelection.groups("baselines"),
                    partitions_def=policy_partitions(settings, settings.evaluate.baselines[0]),
                    description="Fit the probes of one tau (seed 0), predict and backtest every probe and rule.",
                )
            ]
            if settings.evaluate.baselines
            else []
        ),
        dg.define_asset_job(
            "report_job",
            selection=dg.AssetSelection.groups("report"),
            description="Regenerate the paper's tables, figures and the Markdown report from the backtests.",
        ),
        dg.define_asset_job(
            "corpus_job",
            selection=dg.AssetSelection.assets(ALPHA_ESTIMATES) | dg.AssetSelection.groups("corpus"),
            description="alpha by marginal likelihood, and each tokenization's training-period corpus statistics, "
            "window store and the baselines' features.",
        ),
    ]
