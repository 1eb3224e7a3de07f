"""Asset checks. The ingest contract is checked by re-reading what was written, independently of the writer.

The checks are unpartitioned and take the run's trading days from its partition tags: Dagster 1.13
stores a partitioned check's planned evaluation once per partition with the whole partition subset
serialized in each row, which is quadratic in a 5,787-day single-run backfill.
"""

import dagster as dg
import polars as pl

from kinematic_pipeline.config import Settings
from kinematic_pipeline.orchestration.partitions import run_days
from kinematic_pipeline.pins import stale_token_days
from kinematic_pipeline.report.markdown import markdown_table
from kinematic_pipeline.stages.ingest import data_quality, verify_raw_ohlcv
from kinematic_pipeline.tokenizations import chosen
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
        days = run_days(context.run.tags) or settings.warehouse.manifest_days(RAW_OHLCV)
        for name, (passed, text, rows) in data_quality(settings, days).items():
            table = markdown_table(pl.DataFrame(rows[:50])) if rows else "-"
            lines = [quality_line(name, row) for row in rows[:50]]
            yield dg.AssetCheckResult(
                asset_key=RAW_OHLCV,
                check_name=name,
                passed=bool(passed),
                severity=dg.AssetCheckSeverity.WARN,
                metadata={
                    "detail": text,
                    "flagged": dg.MetadataValue.md(table),
                    "warnings": "\n".join(lines),  # one line per flagged row: what the CLI prints
                    "days_checked": len(days),
                },
            )

    return [raw_ohlcv_contract, raw_ohlcv_quality]


def quality_line(check: str, row: dict) -> str:
    """One flagged row of a data-quality check, as the CLI prints it after ``warning: raw_ohlcv.<check>:``."""
    if check == "no_unadjusted_split":
        return (
            f"{row['ticker']} {row['date']} close/previous {row['close_ratio']:.3f} with volume x{row['volume_ratio']} "
            "its 20-day median: unadjusted split?"
        )
    if check == "no_ticker_case_variants":
        return f"tickers {row['tickers']} differ only by case: one company twice?"
    return ", ".join(f"{k} {v}" for k, v in row.items())


TOKEN_CHECK = "raw_days_unchanged"


def build_token_checks(settings: Settings) -> list[dg.AssetChecksDefinition]:
    """Each token asset's pin to the raw days behind its windows: a token day whose raw_ohlcv days (its 64-session
    look-back included) were re-ingested since it was tokenized fails, naming the days to re-materialize. Runs
    with the token assets, alone (the UI's check "Execute"), and whenever raw_ohlcv changes (its automation
    condition, under the daemon)."""

    @dg.multi_asset_check(
        specs=[
            dg.AssetCheckSpec(
                TOKEN_CHECK,
                asset=kind,
                description="Every token day was tokenized from the raw_ohlcv days on disk now (the digest of their "
                "sha256s, look-back included, equals the one its manifest recorded).",
                additional_deps=[RAW_OHLCV],
                automation_condition=dg.AutomationCondition.any_deps_updated(),
            )
            for kind in (t.tokens_asset for t in chosen(settings.tokenize.tokenizations))
        ],
        name="tokens_match_raw_days",
        can_subset=True,
        description="Token shards against the raw days they were tokenized from (all days when run alone).",
    )
    def tokens_match_raw_days(context: dg.AssetCheckExecutionContext):
        wh = settings.warehouse
        for key in sorted(context.selected_asset_check_keys, key=lambda k: k.asset_key.to_user_string()):
            kind = key.asset_key.to_user_string()
            materialized = set(wh.manifest_days(kind))
            days = [d for d in (run_days(context.run.tags) or sorted(materialized)) if d in materialized]
            stale = stale_token_days(settings, kind, days)
            detail = (
                f"{len(stale)} of {len(days)} {kind} day(s) were tokenized from raw_ohlcv days re-ingested since "
                f"({stale[0][0]} .. {stale[-1][0]}): re-materialize {kind} for them"
                if stale
                else f"all {len(days)} {kind} day(s) match the raw days on disk"
            )
            yield dg.AssetCheckResult(
                asset_key=kind,
                check_name=TOKEN_CHECK,
                passed=not stale,
                metadata={
                    "detail": detail,
                    "days_checked": len(days),
                    "stale_days": dg.MetadataValue.md(", ".join(str(d) for d, _, _ in stale[:50]) or "-"),
                },
            )

    return [tokens_match_raw_days]
