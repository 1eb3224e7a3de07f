"""Ingest stage: ``raw_ohlcv`` (and the quarantine beside it), partitioned by trading day."""

import dagster as dg

from kinematic_pipeline.code_versions import CODE_VERSIONS
from kinematic_pipeline.config import Settings
from kinematic_pipeline.orchestration.metadata import dagster_metadata
from kinematic_pipeline.orchestration.partitions import partition_days, trading_day_partitions
from kinematic_pipeline.orchestration.resources import BarSourceOverride
from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv
from kinematic_pipeline.warehouse import RAW_OHLCV


def raw_ohlcv_asset(settings: Settings) -> dg.AssetsDefinition:
    @dg.asset(
        name=RAW_OHLCV,
        description="Validated daily OHLCV bars, one unit per NYSE session swapped in whole "
        "($KP_WAREHOUSE/raw_ohlcv/<date>/bars.parquet; DuckDB view raw_ohlcv). Zero volume is kept and marked "
        "volume_missing. Rows that break the data contract go to the quarantine (<date>/quarantine.parquet, "
        "DuckDB view quarantine, with reason, detail and original values); the per-day manifest "
        "(<date>/manifest.parquet) is the view raw_ohlcv_manifest.",
        partitions_def=trading_day_partitions(settings),
        group_name="ingest",
        code_version=CODE_VERSIONS["ingest"],
        kinds={"parquet", "duckdb"},
        backfill_policy=dg.BackfillPolicy.single_run(),
    )
    def raw_ohlcv(context: dg.AssetExecutionContext, bar_source: BarSourceOverride):
        run_settings = bar_source.apply(settings)  # the drop-directory sensor's runs read another source
        days = partition_days(context)
        summary = materialize_raw_ohlcv(run_settings, days)
        context.log.info(f"ingested {len(days)} trading day(s) from {run_settings.data.source}: {summary.totals}")
        for note in summary.notes():
            context.log.warning(note)
        if len(days) <= run_settings.ingest.max_partitions_observed:
            _observe_each_day(context, summary.manifest)
        return dg.MaterializeResult(metadata=dagster_metadata(summary.metadata(run_settings, days)))

    return raw_ohlcv


def _observe_each_day(context: dg.AssetExecutionContext, manifest) -> None:
    """Per-partition facts in the UI (small runs only: a 5,787-day backfill records them in the manifest)."""
    for row in manifest.iter_rows(named=True):
        context.log_event(
            dg.AssetObservation(
                asset_key=RAW_OHLCV,
                partition=row["partition_date"].isoformat(),
                metadata={k: row[k] for k in ("rows_read", "rows_kept", "rows_quarantined", "content_hash")},
            )
        )
