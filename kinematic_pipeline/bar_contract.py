"""The raw_ohlcv data contract: validate bars, split kept rows from the quarantine, assign trading days.

Every row read ends up in exactly one of two places: kept (``raw_ohlcv``) or the quarantine with its
reasons and original values. Reasons (a row may have several, joined by ``;``):

- ``missing_ticker``: empty or null ticker;
- ``missing_value``: NaN/null open, high, low, close or volume (the text of an unparseable value is in
  ``raw_text``);
- ``non_finite_value``: +inf or -inf in open, high, low, close or volume (the comparisons below are
  meaningless on it, so they are not reported for that row);
- ``nonpositive_price``: open, high, low or close <= 0 (ln undefined);
- ``negative_volume``: volume < 0;
- ``high_low_inconsistent``: high below max(open, close) or low above min(open, close), beyond a
  relative tolerance for adjustment rounding (``IngestConfig.hl_policy = "flag"`` keeps them flagged);
- ``non_trading_day``: dated on a day the NYSE was closed (assigned to the next session's partition);
- ``duplicate_key``: a later row (in source order) with the (ticker, date) of an earlier valid row (the
  first is kept).

Rows are validated in (ticker, date) order, sorted stably so that source order decides among rows of
the same key: a file sorted newest-first is as valid as one sorted oldest-first. ``source_row`` keeps
each row's place in the file for messages; ``IngestResult.out_of_order`` counts the rows the sort moved.

Zero volume is kept and marked ``volume_missing`` (ln 0 is undefined: the tokenizer drops that
measurement). Pure code: no dagster.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np
import polars as pl

from kinematic_pipeline.calendar import sessions as calendar_sessions
from kinematic_pipeline.config import IngestConfig
from kinematic_pipeline.sources.base import PRICE_COLUMNS, RAW_SCHEMA, VALUE_COLUMNS

KEPT_SCHEMA: dict[str, pl.DataType] = {
    **{c: t for c, t in RAW_SCHEMA.items() if c not in ("source_file", "source_row", "raw_text")},  # the bar
    "volume_missing": pl.Boolean,  # volume == 0: a missing measurement, not ln(0)
    "hl_inconsistent": pl.Boolean,  # only ever true with hl_policy = "flag"
}
QUARANTINE_SCHEMA: dict[str, pl.DataType] = {
    **{k: v for k, v in RAW_SCHEMA.items() if k not in ("source_file", "source_row", "raw_text")},
    "partition_date": pl.Date,
    "reason": pl.String,
    "detail": pl.String,
    "raw_text": pl.String,
    "source_file": pl.String,
    "source_row": pl.Int64,
}


@dataclass(frozen=True)
class IngestResult:
    kept: pl.DataFrame  # KEPT_SCHEMA + partition_date
    quarantine: pl.DataFrame  # QUARANTINE_SCHEMA
    rows_read: pl.DataFrame  # partition_date, rows_read
    out_of_order: int = 0  # rows dated before an earlier row of their ticker in source order (sorted here)


def assign_partitions(dates: pl.Series) -> pl.Series:
    """The trading-day partition of each date: the first NYSE session on or after it."""
    sessions = calendar_sessions()
    values = dates.cast(pl.Date).to_numpy().astype("datetime64[D]")
    idx = np.searchsorted(sessions, values)
    if len(idx) and idx.max() >= len(sessions):
        raise ValueError(f"date {dates.max()} is beyond the trading calendar")
    return pl.Series("partition_date", sessions[idx]).cast(pl.Date)


def _fmt(col: str) -> pl.Expr:
    return pl.lit(f"{col}=") + pl.col(col).cast(pl.String).fill_null("null")


def _row_reasons(cfg: IngestConfig) -> list[tuple[str, pl.Expr, pl.Expr]]:
    """(code, condition, detail) for the checks that look at one row alone."""
    missing = [pl.col(c).is_null() | pl.col(c).is_nan() for c in VALUE_COLUMNS]
    infinite = [pl.col(c).is_infinite() for c in VALUE_COLUMNS]
    # High/low against open/close says nothing when one of them is inf or NaN: report only that value.
    finite = ~pl.any_horizontal(missing) & ~pl.any_horizontal(infinite)
    nonpos = [pl.col(c).is_finite() & (pl.col(c) <= 0) for c in PRICE_COLUMNS]
    hi_ref = pl.max_horizontal("open", "close") * (1 - cfg.hl_rel_tolerance)
    lo_ref = pl.min_horizontal("open", "close") * (1 + cfg.hl_rel_tolerance)
    hl_bad = finite & ((pl.col("high") < hi_ref) | (pl.col("low") > lo_ref) | (pl.col("high") < pl.col("low")))
    return [
        (
            "missing_ticker",
            pl.col("ticker").is_null() | (pl.col("ticker").str.strip_chars() == ""),
            pl.lit("ticker empty"),
        ),
        (
            "missing_value",
            pl.any_horizontal(missing),
            pl.concat_str(
                [pl.when(m).then(pl.lit(c)) for c, m in zip(VALUE_COLUMNS, missing)], separator=",", ignore_nulls=True
            ),
        ),
        (
            "non_finite_value",
            pl.any_horizontal(infinite),
            pl.concat_str(
                [pl.when(m).then(_fmt(c)) for c, m in zip(VALUE_COLUMNS, infinite)], separator=",", ignore_nulls=True
            ),
        ),
        (
            "nonpositive_price",
            pl.any_horizontal(nonpos),
            pl.concat_str(
                [pl.when(m).then(_fmt(c)) for c, m in zip(PRICE_COLUMNS, nonpos)], separator=",", ignore_nulls=True
            ),
        ),
        ("negative_volume", pl.col("volume").is_finite() & (pl.col("volume") < 0), _fmt("volume")),
        ("high_low_inconsistent", hl_bad, pl.concat_str([_fmt(c) for c in PRICE_COLUMNS], separator=",")),
    ]


def validate_bars(raw: pl.DataFrame, cfg: IngestConfig | None = None) -> IngestResult:
    """Split source rows (RAW_SCHEMA, in source order) into kept bars and quarantined rows."""
    cfg = cfg or IngestConfig()
    missing_cols = [c for c in RAW_SCHEMA if c not in raw.columns]
    if missing_cols:
        raise ValueError(f"source frame lacks column(s) {', '.join(missing_cols)}")
    if raw["date"].null_count():
        row = raw.filter(pl.col("date").is_null()).row(0, named=True)
        raise ValueError(
            f"{row['source_file']} row {row['source_row']} (ticker {row['ticker']}): column 'date' is null"
        )

    frame = raw.with_columns(pl.col("ticker").str.strip_chars())
    out_of_order = _count_out_of_order(frame)
    # Stable: among rows of one (ticker, date) the first in the file stays first (and is the one kept).
    frame = frame.sort("ticker", "date", maintain_order=True, nulls_last=True)
    frame = frame.with_row_index("_order").with_columns(
        assign_partitions(frame["date"]),
        pl.col("volume").eq(0).fill_null(False).alias("volume_missing"),
    )
    reasons = [r for r in _row_reasons(cfg) if not (r[0] == "high_low_inconsistent" and cfg.hl_policy == "flag")]
    hl = _row_reasons(cfg)[-1][1]
    frame = frame.with_columns(
        *[cond.fill_null(False).alias(f"_bad_{code}") for code, cond, _ in reasons],
        *[det.alias(f"_det_{code}") for code, _, det in reasons],
        hl.fill_null(False).alias("hl_inconsistent")
        if cfg.hl_policy == "flag"
        else pl.lit(False).alias("hl_inconsistent"),
        (pl.col("date") != pl.col("partition_date")).alias("_bad_non_trading_day"),
        pl.lit("date is not an NYSE session").alias("_det_non_trading_day"),
    )
    codes = [code for code, _, _ in reasons] + ["non_trading_day"]
    row_ok = ~pl.any_horizontal([pl.col(f"_bad_{c}") for c in codes])

    # A repeated key is judged among the rows that passed the row checks: a bad first copy does not
    # push out a good second one.
    frame = frame.with_columns(row_ok.alias("_row_ok"))
    ok = frame.filter("_row_ok").select("_order", "ticker", "date")
    ok = ok.with_columns((pl.col("_order").rank("ordinal").over("ticker", "date") > 1).alias("_bad_duplicate_key"))
    frame = (
        frame.join(ok.select("_order", "_bad_duplicate_key"), on="_order", how="left")
        .with_columns(
            pl.col("_bad_duplicate_key").fill_null(False),
            pl.lit("repeats an earlier (ticker, date)").alias("_det_duplicate_key"),
        )
        .sort("_order")
    )
    codes += ["duplicate_key"]
    bad = pl.any_horizontal([pl.col(f"_bad_{c}") for c in codes])
    frame = frame.with_columns(
        pl.concat_str(
            [pl.when(pl.col(f"_bad_{c}")).then(pl.lit(c)) for c in codes], separator=";", ignore_nulls=True
        ).alias("reason"),
        pl.concat_str(
            [pl.when(pl.col(f"_bad_{c}")).then(pl.lit(f"{c}: ") + pl.col(f"_det_{c}")) for c in codes],
            separator="; ",
            ignore_nulls=True,
        ).alias("detail"),
        bad.alias("_bad"),
    )
    kept = (
        frame.filter(~pl.col("_bad"))
        .select([pl.col(c).cast(t) for c, t in KEPT_SCHEMA.items()] + [pl.col("partition_date")])
        .sort("partition_date", "ticker")
    )
    quarantine = frame.filter(pl.col("_bad")).select([pl.col(c).cast(t) for c, t in QUARANTINE_SCHEMA.items()])
    rows_read = frame.group_by("partition_date").agg(pl.len().cast(pl.Int64).alias("rows_read")).sort("partition_date")
    return IngestResult(kept=kept, quarantine=quarantine, rows_read=rows_read, out_of_order=out_of_order)


def _count_out_of_order(raw: pl.DataFrame) -> int:
    """Rows dated before an earlier row of the same ticker, in source order (what the sort fixes)."""
    earlier_max = pl.col("date").cum_max().shift(1).over("ticker")
    return int(raw.select((pl.col("date") < earlier_max).fill_null(False).sum()).item())


def split_by_partition(
    result: IngestResult, days: list[dt.date]
) -> list[tuple[dt.date, pl.DataFrame, pl.DataFrame, int]]:
    """(day, kept rows in KEPT_SCHEMA, quarantined rows, rows read) for each trading-day partition."""
    kept = {k[0]: v.drop("partition_date") for k, v in result.kept.partition_by("partition_date", as_dict=True).items()}
    quarantined = dict((k[0], v) for k, v in result.quarantine.partition_by("partition_date", as_dict=True).items())
    read = dict(result.rows_read.iter_rows())
    empty_kept = pl.DataFrame(schema=KEPT_SCHEMA)
    empty_q = pl.DataFrame(schema=QUARANTINE_SCHEMA)
    outside = set(read) - set(days)
    if outside:
        raise ValueError(f"rows dated outside the requested partitions: {sorted(outside)[:5]}")
    return [(d, kept.get(d, empty_kept), quarantined.get(d, empty_q), int(read.get(d, 0))) for d in days]
