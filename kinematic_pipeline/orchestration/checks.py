"""Asset checks. The ingest contract is checked by re-reading what was written, independently of the writer.

The checks are unpartitioned and take the run's trading days from its partition tags: Dagster 1.13
stores a partitioned check's planned evaluation once per partition with the whole partition subset
serialized in each row, which is quadratic in a 5,787-day single-run backfill.
"""

import dagster as dg

from kinematic_pipeline.config import Settings
from kinematic_pipeline.orchestration.partitions import run_days
from kinematic_pipeline.stages.ingest import verify_raw_ohlcv
from kinematic_pipeline.warehouse import RAW_OHLCV

RAW_CHECKS = (
    ("no_nan_in_kept_rows", "Kept rows hold no NaN, infinite or null price/volume."),
    ("unique_ticker_date", "(ticker, date) is unique."),
    ("no_date_after_partition", "No kept row is dated after its trading-day partition."),
    ("kept_plus_quarantined_equals_read", "Every row read is kept or quarantined: nothing is dropped."),
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

    return [raw_ohlcv_contract]
