"""Jobs: one per stage group, plus the whole DAG."""

from __future__ import annotations

import dagster as dg

from kinematic_pipeline.config import Settings
from kinematic_pipeline.orchestration.partitions import trading_day_partitions


def build_jobs(settings: Settings) -> list[dg.UnresolvedAssetJobDefinition]:
    partitions = trading_day_partitions(settings)
    return [
        dg.define_asset_job(
            "ingest_job",
            selection=dg.AssetSelection.groups("ingest"),
            partitions_def=partitions,
            description="Ingest trading days: raw_ohlcv and quarantine (single-run backfills).",
        ),
    ]
