"""Ingest stage: ``raw_ohlcv`` (and the quarantine beside it), partitioned by trading day."""

import dagster as dg
import polars as pl

from kinematic_pipeline.config import Settings
from kinematic_pipeline.orchestration.metadata import markdown_table
from kinematic_pipeline.orchestration.partitions import partition_days, trading_day_partitions
from kinematic_pipeline.orchestration.resources import BarSourceOverride
from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv
from kinematic_pipeline.storage import RAW_OHLCV, combined_hash

INGEST_CODE_VERSION = "ingest-1"


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
        code_version=INGEST_CODE_VERSION,
        kinds={"parquet", "duckdb"},
        backfill_policy=dg.BackfillPolicy.single_run(),
    )
    def raw_ohlcv(context: dg.AssetExecutionContext, bar_source: BarSourceOverride):
        cfg = bar_source.apply(settings)
        days = partition_days(context)
        summary = materialize_raw_ohlcv(cfg, days)
        manifest, totals = summary.manifest, summary.totals
        context.log.info(f"ingested {len(days)} trading day(s) from {cfg.data.source}: {totals}")
        for note in summary.notes():
            context.log.warning(note)

        if len(days) <= cfg.ingest.max_partitions_observed:
            for row in manifest.iter_rows(named=True):
                context.log_event(
                    dg.AssetObservation(
                        asset_key=RAW_OHLCV,
                        partition=row["partition_date"].isoformat(),
                        metadata={k: row[k] for k in ("rows_read", "rows_kept", "rows_quarantined", "content_hash")},
                    )
                )
        single = len(days) == 1
        content_hash = combined_hash(manifest["content_hash"].to_list())
        return dg.MaterializeResult(
            metadata={
                "rows_read": totals["rows_read"],
                "rows_kept": totals["rows_kept"],
                "rows_quarantined": totals["rows_quarantined"],
                "zero_volume_rows_kept": totals["zero_volume_rows"],
                "tickers": summary.tickers,
                "date_range": f"{days[0]} .. {days[-1]} ({len(days)} sessions)",
                "content_hash": content_hash,
                "content_hash_kind": "sha256 of the shard"
                if single
                else "sha256 over the shards' sha256s, in date order",
                "source": cfg.data.source,
                "warehouse_path": dg.MetadataValue.path(str(cfg.warehouse / RAW_OHLCV)),
                "dagster/row_count": totals["rows_kept"],
                "partitions_preview": dg.MetadataValue.md(markdown_table(_preview(manifest))),
                "quarantine_reasons": dg.MetadataValue.md(markdown_table(summary.quarantine_reasons)),
                "rows_in_source": summary.rows_in_source if summary.rows_in_source is not None else "unknown",
                "rows_out_of_range": dg.MetadataValue.json(summary.out_of_range or {}),
                "rows_sorted_out_of_order": summary.out_of_order,
                "reconciliation": summary.reconciliation(),
                "notes": "\n".join(summary.notes()),
            },
        )

    return raw_ohlcv


def _preview(manifest: pl.DataFrame, rows: int = 10) -> pl.DataFrame:
    cols = ["partition_date", "rows_read", "rows_kept", "rows_quarantined", "tickers", "content_hash"]
    m = manifest.select(cols).with_columns(pl.col("content_hash").str.slice(0, 16))
    return m if m.height <= 2 * rows else pl.concat([m.head(rows), m.tail(rows)])
