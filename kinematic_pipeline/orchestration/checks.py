"""Asset checks. The ingest contract is checked by re-reading what was written, independently of the writer.

The checks are unpartitioned and take the run's trading days from its partition tags: Dagster 1.13
stores a partitioned check's planned evaluation once per partition with the whole partition subset
serialized in each row, which is quadratic in a 5,787-day single-run backfill.
"""

import dagster as dg
import polars as pl

from kinematic_pipeline.config import Settings
from kinematic_pipeline.orchestration.partitions import run_days
from kinematic_pipeline.stages.ingest import data_quality, verify_raw_ohlcv
from kinematic_pipeline.warehouse import RAW_OHLCV

RAW_CHECKS = (
    ("no_nan_in_kept_rows", "Kept rows hold no NaN, infinite or null price/volume."),
    ("unique_ticker_date", "(ticker, date) is unique."),
    ("no_date_after_partition", "No kept row is dated after its trading-day partition."),
    ("kept_plus_quarantined_equals_read", "Every row read is kept or quarantined: nothing is dropped."),
)


QUALITY_CHECKS = (
    (
        "no_unadjusted_split",
        "No overnight close move beyond x1.8 (either way) while the volume stays within 0.5-2x its 20-session median "
        "(an unadjusted split moves the price, not the volume; news moves both). Warns with ticker and date.",
    ),
    ("no_ticker_case_variants", "No two tickers that differ only by case (AAPL and aapl). Warns with the names."),
)


def build_ingest_checks(settings: Settings) -> list[dg.AssetChecksDefinition]:
    @dg.multi_asset_check(
        specs=[dg.AssetCheckSpec(name, asset=RAW_OHLCV, description=desc, blocking=True) for name, desc in RAW_CHECKS],
        name="raw_ohlcv_contract",
        description="The raw_ohlcv data contract, on the trading days of the run (all days when run alone).",
    )
    def raw_ohlcv_contract(context: dg.AssetCheckExecutionContext):
        days = run_days(context.run.tags) or settings.warehouse.manifest_days(RAW_OHLCV)
        for name, (passed, text) in verify_raw_ohlcv(settings, days).items():
            yield dg.AssetCheckResult(
                asset_key=RAW_OHLCV,
                check_name=name,
                passed=bool(passed),
                metadata={"detail": text, "days_checked": len(days)},
            )

    @dg.multi_asset_check(
        specs=[
            dg.AssetCheckSpec(name, asset=RAW_OHLCV, description=desc, blocking=False) for name, desc in QUALITY_CHECKS
        ],
        name="raw_ohlcv_quality",
        description="Data quality a quant expects, as warnings (the bars stay): suspected unadjusted splits, "
        "tickers that differ only by case. On the run's trading days (all days when run alone).",
    )
    def raw_ohlcv_quality(context: dg.AssetCheckExecutionContext):
        from kinematic_pipeline.report.markdown import markdown_table

        days = run_days(context.run.tags) or settings.warehouse.manifest_days(RAW_OHLCV)
        for name, (passed, text, rows) in data_quality(settings, days).items():
            table = markdown_table(pl.DataFrame(rows[:50])) if rows else "-"
            yield dg.AssetCheckResult(
                asset_key=RAW_OHLCV,
                check_name=name,
                passed=bool(passed),
                severity=dg.AssetCheckSeverity.WARN,
                metadata={
                    "detail": text,
                    "flagged": dg.MetadataValue.md(table),
                    "days_checked": len(days),
                },
            )

    return [raw_ohlcv_contract, raw_ohlcv_quality]
