"""The ingest stage without the orchestrator: read a range of trading days, validate, write shards.

``materialize_raw_ohlcv`` is what the ``raw_ohlcv`` asset (and the benchmark) calls; ``verify_raw_ohlcv``
re-reads what was written, independently of the writer, for the asset checks.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass

import polars as pl
from tqdm.auto import tqdm

from kinematic_pipeline import __version__
from kinematic_pipeline.bar_contract import KEPT_SCHEMA, QUARANTINE_SCHEMA, split_by_partition, validate_bars
from kinematic_pipeline.calendar import previous_trading_day, trading_day_on_or_after
from kinematic_pipeline.config import Settings
from kinematic_pipeline.report.markdown import Markdown, markdown_table
from kinematic_pipeline.sources import BarSource, make_source
from kinematic_pipeline.warehouse import QUARANTINE, RAW_OHLCV
from kinematic_pipeline.warehouse import exact_paths as exact
from kinematic_pipeline.warehouse.atomic import combined_hash

MANIFEST_SCHEMA: dict[str, pl.DataType] = {
    "partition_date": pl.Date,
    "rows_read": pl.Int64,
    "rows_kept": pl.Int64,
    "rows_quarantined": pl.Int64,
    "zero_volume_rows": pl.Int64,
    "tickers": pl.Int64,
    "content_hash": pl.String,  # sha256 of the raw_ohlcv shard's bytes
    "quarantine_hash": pl.String,  # sha256 of the quarantine shard ("" when nothing was quarantined)
    "source": pl.String,
    "code_version": pl.String,
}


# Why a row the source holds is not read by a run (it is neither kept nor quarantined by it).
OUT_OF_RANGE_REASONS = (
    "before_range",  # dated before the run's first session (or the session before it)
    "after_range",  # dated after the run's last session, on or after the next session
    "after_last_session",  # on a closed day after the run's last session: the next session reads it
    "future_date",  # dated after today: no partition holds it yet
    "other_ticker",  # a ticker the profile does not select (KP tickers)
)


@dataclass(frozen=True)
class IngestSummary:
    manifest: pl.DataFrame  # MANIFEST_SCHEMA, one row per partition written
    quarantine_reasons: pl.DataFrame  # reason, rows
    tickers: int  # distinct tickers kept over the run
    # Rows the source holds that this run did not read, by OUT_OF_RANGE_REASONS (None: the source
    # cannot be counted as a whole, e.g. yfinance).
    out_of_range: dict[str, int] | None = None
    out_of_order: int = 0  # rows the (ticker, date) sort moved (the file was not sorted)

    @property
    def totals(self) -> dict[str, int]:
        m = self.manifest
        return {k: int(m[k].sum()) for k in ("rows_read", "rows_kept", "rows_quarantined", "zero_volume_rows")}

    @property
    def rows_in_source(self) -> int | None:
        """Every row the source holds: read by this run (kept or quarantined) or out of its range."""
        if self.out_of_range is None:
            return None
        return self.totals["rows_read"] + sum(self.out_of_range.values())

    def notes(self) -> list[str]:
        """What the user should hear about: rows this run cannot place, a file that was not sorted."""
        out, notes = self.out_of_range or {}, []
        if out.get("future_date"):
            notes.append(f"{out['future_date']:,} row(s) dated after today were not ingested (future_date)")
        if out.get("after_last_session"):
            notes.append(
                f"{out['after_last_session']:,} row(s) dated on a closed day after the last session wait for the "
                "next session's partition (after_last_session)"
            )
        if self.out_of_order:
            notes.append(f"{self.out_of_order:,} row(s) were out of (ticker, date) order in the source: sorted")
        return notes

    def reconciliation(self) -> str:
        """One line that accounts for every row of the source."""
        t = self.totals
        reasons = ", ".join(f"{r} {n}" for r, n in self.quarantine_reasons.iter_rows())
        line = f"kept {t['rows_kept']:,} + quarantined {t['rows_quarantined']:,}" + (f" ({reasons})" if reasons else "")
        if self.out_of_range is None:
            return line + f" = read {t['rows_read']:,}"
        outside = {k: v for k, v in self.out_of_range.items() if v}
        detail = ", ".join(f"{k} {v:,}" for k, v in outside.items())
        return (
            f"{line} + out of range {sum(outside.values()):,}"
            + (f" ({detail})" if detail else "")
            + f" = {self.rows_in_source:,} rows in the source"
        )

    def metadata(self, settings: Settings, days: list[dt.date]) -> dict:
        """What a raw_ohlcv materialization shows (plain values; the asset turns them into Dagster's)."""
        manifest, totals = self.manifest, self.totals
        preview = manifest.select(
            "partition_date",
            "rows_read",
            "rows_kept",
            "rows_quarantined",
            "tickers",
            pl.col("content_hash").str.slice(0, 16),
        )
        if preview.height > 20:
            preview = pl.concat([preview.head(10), preview.tail(10)])
        return {
            "rows_read": totals["rows_read"],
            "rows_kept": totals["rows_kept"],
            "rows_quarantined": totals["rows_quarantined"],
            "zero_volume_rows_kept": totals["zero_volume_rows"],
            "tickers": self.tickers,
            "date_range": f"{days[0]} .. {days[-1]} ({len(days)} sessions)",
            "content_hash": combined_hash(manifest["content_hash"].to_list()),
            "content_hash_kind": "sha256 of the shard"
            if len(days) == 1
            else "sha256 over the shards' sha256s, in date order",
            "source": settings.data.source,
            "warehouse_path": settings.warehouse / RAW_OHLCV,
            "dagster/row_count": totals["rows_kept"],
            "partitions_preview": Markdown(markdown_table(preview)),
            "quarantine_reasons": Markdown(markdown_table(self.quarantine_reasons)),
            "rows_in_source": self.rows_in_source if self.rows_in_source is not None else "unknown",
            "rows_out_of_range": self.out_of_range or {},
            "rows_sorted_out_of_order": self.out_of_order,
            "reconciliation": self.reconciliation(),
            "notes": "\n".join(self.notes()),
        }


def read_window(days: list[dt.date]) -> tuple[dt.date, dt.date]:
    """The dates a run over ``days`` reads: after the session before the first day, up to the last day."""
    return previous_trading_day(days[0]) + dt.timedelta(days=1), days[-1]


def read_range(source: BarSource, days: list[dt.date], tickers: tuple[str, ...] | None) -> pl.DataFrame:
    """Source rows that belong to ``days``: dated after the session before the first day, up to the last."""
    raw = source.read(*read_window(days))
    if tickers is not None:
        raw = raw.filter(pl.col("ticker").is_in(list(tickers)))
    return raw


def count_out_of_range(
    source: BarSource, days: list[dt.date], tickers: tuple[str, ...] | None, today: dt.date | None = None
) -> dict[str, int] | None:
    """Rows the source holds that a run over ``days`` does not read, by reason (None: not countable)."""
    read_all = getattr(source, "read_all", None)
    if read_all is None:
        return None
    start, end = read_window(days)
    today = today or dt.date.today()
    next_session = trading_day_on_or_after(end + dt.timedelta(days=1))
    date = pl.col("date")
    selected = pl.col("ticker").is_in(list(tickers)).fill_null(False) if tickers is not None else pl.lit(True)
    counts = (
        read_all()
        .select(
            (selected & (date < start)).sum().alias("before_range"),
            (selected & (date > end) & (date >= next_session) & (date <= today)).sum().alias("after_range"),
            (selected & (date > end) & (date < next_session) & (date <= today)).sum().alias("after_last_session"),
            (selected & (date > today)).sum().alias("future_date"),
            (~selected).sum().alias("other_ticker"),
        )
        .row(0, named=True)
    )
    return {reason: int(counts[reason]) for reason in OUT_OF_RANGE_REASONS}


def materialize_raw_ohlcv(
    settings: Settings, days: list[dt.date], source: BarSource | None = None, progress: bool = True
) -> IngestSummary:
    """Ingest ``days`` (sorted trading days): per day one unit of a kept shard, at most one quarantine
    shard and the manifest, swapped in whole (``Warehouse.write_shard``).

    Re-materializing a day replaces its unit (a stale quarantine shard goes with the old unit), and the
    same input gives byte-identical files. The catalog's views are right before, during and after the run.
    """
    if not days:
        raise ValueError("no trading days to ingest")
    days = sorted(days)
    source = source or make_source(settings)
    result = validate_bars(read_range(source, days, settings.data.tickers), settings.ingest)
    out_of_range = count_out_of_range(source, days, settings.data.tickers)

    records = []
    wh = settings.warehouse
    refresh_catalog(settings)  # the views cover every unit as soon as it is swapped in
    for day, kept, quarantined, rows_read in tqdm(
        split_by_partition(result, days), desc="raw_ohlcv partitions", unit="day", disable=not progress
    ):
        record = {
            "partition_date": day,
            "rows_read": rows_read,
            "rows_kept": kept.height,
            "rows_quarantined": quarantined.height,
            "zero_volume_rows": int(kept["volume_missing"].sum()),
            "tickers": kept["ticker"].n_unique(),
            "source": source.name,
            "code_version": __version__,
        }
        quarantined = quarantined.sort("source_file", "source_row")
        records.append(
            wh.write_shard(RAW_OHLCV, day, kept, record, MANIFEST_SCHEMA, companions={QUARANTINE: quarantined})
        )

    reasons = (
        result.quarantine.select(pl.col("reason").str.split(";"))
        .explode("reason")
        .group_by("reason")
        .len("rows")
        .sort("reason")
    )
    return IngestSummary(
        manifest=pl.DataFrame(records, schema=MANIFEST_SCHEMA),
        quarantine_reasons=reasons,
        tickers=result.kept["ticker"].n_unique(),
        out_of_range=out_of_range,
        out_of_order=result.out_of_order,
    )


def refresh_catalog(settings: Settings) -> None:
    """The views raw_ohlcv, quarantine and raw_ohlcv_manifest (globs over every day unit, always valid)."""
    settings.warehouse.ensure_unit_views(
        RAW_OHLCV, {RAW_OHLCV: {**KEPT_SCHEMA}, QUARANTINE: QUARANTINE_SCHEMA, "manifest": MANIFEST_SCHEMA}
    )


def verify_raw_ohlcv(settings: Settings, days: list[dt.date]) -> dict[str, tuple[bool, str]]:
    """Re-read the written shards of ``days`` and check the data contract; {check: (passed, description)}."""
    wh = settings.warehouse
    kept_files = [wh.shard(RAW_OHLCV, d) for d in days]
    missing = [str(p) for p in kept_files if not p.exists()]
    if missing:
        return {"shards_exist": (False, f"{len(missing)} shard(s) missing, e.g. {missing[0]}")}
    # one scan over the file list (a concat of one scan per day is quadratic to plan: 281 s for 5,787 days)
    partition_of = pl.LazyFrame({"_file": [str(p) for p in kept_files], "_partition": days})
    kept = exact.scan_parquet(kept_files, include_file_paths="_file").join(partition_of, on="_file", how="left")
    stats = (
        kept.select(
            pl.len().alias("rows"),
            pl.any_horizontal(
                [pl.col(c).is_finite().not_().fill_null(True) for c in ("open", "high", "low", "close", "volume")]
            )
            .sum()
            .alias("nan_rows"),
            (pl.col("date") > pl.col("_partition")).sum().alias("after_partition"),
            (pl.struct("ticker", "date").is_duplicated()).sum().alias("duplicates"),
        )
        .collect()
        .row(0, named=True)
    )
    manifests = exact.read_parquet([wh.manifest(RAW_OHLCV, d) for d in days])
    q_files = [p for p in (wh.shard(QUARANTINE, d) for d in days) if p.exists()]
    quarantined = exact.scan_parquet(q_files).select(pl.len()).collect().item() if q_files else 0
    read = int(manifests["rows_read"].sum())
    return {
        "no_nan_in_kept_rows": (
            stats["nan_rows"] == 0,
            f"{stats['nan_rows']} kept row(s) with a NaN, infinite or null value",
        ),
        "unique_ticker_date": (stats["duplicates"] == 0, f"{stats['duplicates']} row(s) share a (ticker, date)"),
        "no_date_after_partition": (
            stats["after_partition"] == 0,
            f"{stats['after_partition']} row(s) dated after their partition",
        ),
        "kept_plus_quarantined_equals_read": (
            stats["rows"] + quarantined == read,
            f"kept {stats['rows']} + quarantined {quarantined} vs read {read}",
        ),
    }


SPLIT_MOVE = math.log(1.8)  # an overnight |ln(close / previous close)| beyond this (a 2:1 split is ln 2) ...
SPLIT_VOLUME_BAND = (0.5, 2.0)  # ... with the day's volume within this band of its previous 20 sessions' median


def data_quality(settings: Settings, days: list[dt.date]) -> dict[str, tuple[bool, str, list[dict]]]:
    """Data-quality warnings on the kept bars of ``days`` (and the 20 sessions before them, for the moves):
    {check: (passed, description, flagged rows)}: overnight moves an unadjusted split would leave (a big move
    without the volume change real news brings), and tickers that differ only by case."""
    wh = settings.warehouse
    held = [d for d in wh.manifest_days(RAW_OHLCV) if d <= max(days)] if days else []
    first = sorted(set(days))[0] if days else None
    before = [d for d in held if d < first][-20:] if first else []
    files = [wh.shard(RAW_OHLCV, d) for d in [*before, *sorted(set(days))] if wh.shard(RAW_OHLCV, d).exists()]
    if not files:
        return {"no_unadjusted_split": (True, "no bars", []), "no_ticker_case_variants": (True, "no bars", [])}
    bars = exact.scan_parquet(files).select("ticker", "date", "close", "volume").sort("ticker", "date").collect()
    moves = (
        bars.with_columns(
            (pl.col("close") / pl.col("close").shift(1)).log().over("ticker").alias("move"),
            pl.col("volume").shift(1).rolling_median(20, min_samples=5).over("ticker").alias("median_volume"),
        )
        .with_columns((pl.col("volume") / pl.col("median_volume")).alias("volume_ratio"))
        .filter(
            pl.col("date").is_in(days)
            & (pl.col("move").abs() > SPLIT_MOVE)
            & pl.col("volume_ratio").is_between(*SPLIT_VOLUME_BAND)
        )
        .select("ticker", "date", (pl.col("move").exp()).round(3).alias("close_ratio"), pl.col("volume_ratio").round(2))
    )
    names = bars["ticker"].unique().sort()
    folded = pl.DataFrame({"ticker": names, "key": names.str.to_uppercase()})
    variants = folded.filter(pl.col("key").is_duplicated()).group_by("key").agg(pl.col("ticker").sort()).sort("key")
    flagged_moves = [{**r, "date": str(r["date"])} for r in moves.head(50).iter_rows(named=True)]
    cases = [{"tickers": ", ".join(t)} for t in variants["ticker"].to_list()]
    move_text = "; ".join(f"{r['ticker']} {r['date']}: close x{r['close_ratio']}" for r in flagged_moves[:10])
    return {
        "no_unadjusted_split": (
            moves.height == 0,
            f"{moves.height} overnight move(s) beyond x{math.exp(SPLIT_MOVE):.1f} without a volume change "
            f"(an unadjusted split?){': ' + move_text if move_text else ''}",
            flagged_moves,
        ),
        "no_ticker_case_variants": (
            variants.height == 0,
            f"{variants.height} ticker(s) that differ only by case"
            + (": " + "; ".join(c["tickers"] for c in cases[:10]) if cases else ""),
            cases,
        ),
    }
