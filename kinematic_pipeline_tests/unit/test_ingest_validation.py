"""The data contract: every bad row lands in the quarantine with its reason; nothing is silently dropped."""

from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

from kinematic_pipeline.bar_contract import validate_bars
from kinematic_pipeline.config import IngestConfig
from kinematic_pipeline.sources.files import FileSource

# ticker, date, open, high, low, close, volume -- in this (source) order.
DIRTY_ROWS = [
    ("AAA", "2021-03-01", 10.0, 10.5, 9.5, 10.2, 1000),  # 0 ok
    ("AAA", "2021-03-02", 10.2, 10.6, 10.0, "NaN", 1100),  # 1 NaN close
    ("AAA", "2021-03-03", 10.2, 10.6, -1.0, 10.3, 1200),  # 2 negative low
    ("AAA", "2021-03-04", 10.3, 10.7, 10.1, 10.4, 1300),  # 3 ok
    ("AAA", "2021-03-04", 10.3, 10.8, 10.1, 10.5, 1310),  # 4 duplicate of row 3
    ("AAA", "2021-03-02", 10.2, 10.6, 10.0, 10.1, 1100),  # 5 out of order (after 03-04): sorted, kept
    ("AAA", "2021-03-05", 10.4, 10.9, 10.2, 10.6, 0),  # 6 zero volume: kept, marked
    ("AAA", "2021-03-08", 10.6, 10.5, 10.3, 10.4, 900),  # 7 high < open
    ("BBB", "2021-03-01", 50.0, 51.0, 49.0, 50.5, -5),  # 8 negative volume
    ("BBB", "2021-03-06", 50.5, 51.0, 50.0, 50.7, 800),  # 9 Saturday
    ("BBB", "2021-03-02", 0.0, 51.0, 49.0, 50.5, 700),  # 10 zero open
    ("BBB", "2021-03-03", 50.5, 51.0, 49.9, "abc", 600),  # 11 unparseable close (CSV)
    ("", "2021-03-03", 50.5, 51.0, 49.9, 50.0, 600),  # 12 no ticker
    ("BBB", "2021-03-04", 50.5, 51.0, 49.9, 50.0, 600),  # 13 ok
]
EXPECTED_REASON = {
    1: "missing_value",
    2: "nonpositive_price",
    4: "duplicate_key",
    7: "high_low_inconsistent",
    8: "negative_volume",
    9: "non_trading_day",
    10: "nonpositive_price",
    11: "missing_value",
    12: "missing_ticker",
}


@pytest.fixture(params=["csv", "parquet"])
def dirty_source(request, tmp_path):
    cols = ["ticker", "date", "open", "high", "low", "close", "volume"]
    text = [[str(v) for v in row] for row in DIRTY_ROWS]
    if request.param == "csv":
        path = tmp_path / "bars.csv"
        path.write_text("\n".join([",".join(cols)] + [",".join(r) for r in text]) + "\n")
    else:
        rows = [r for i, r in enumerate(text) if i != 11]  # Parquet is typed: no unparseable text
        frame = pl.DataFrame(rows, schema=cols, orient="row").with_columns(
            pl.col("date").str.to_date(), *[pl.col(c).cast(pl.Float64) for c in cols[2:]]
        )
        path = tmp_path / "bars.parquet"
        frame.write_parquet(path)
    return FileSource(path, request.param)


def test_each_bad_row_lands_in_the_quarantine_with_its_reason(dirty_source):
    raw = dirty_source.read(dt.date(2021, 1, 1), dt.date(2021, 12, 31))
    result = validate_bars(raw)
    reasons = dict(zip(result.quarantine["source_row"].to_list(), result.quarantine["reason"].to_list()))
    expected = dict(EXPECTED_REASON)
    if dirty_source.name == "parquet":  # row 11 is absent, so later rows shift up by one
        expected = {(i if i < 11 else i - 1): r for i, r in expected.items() if i != 11}
    assert {row: reason.split(";")[0] for row, reason in reasons.items()} == expected


def test_nothing_is_silently_dropped(dirty_source):
    raw = dirty_source.read(dt.date(2021, 1, 1), dt.date(2021, 12, 31))
    result = validate_bars(raw)
    assert result.kept.height + result.quarantine.height == raw.height == int(result.rows_read["rows_read"].sum())
    per_partition = (
        result.kept.group_by("partition_date")
        .len()
        .join(result.quarantine.group_by("partition_date").len(), on="partition_date", how="full", coalesce=True)
        .fill_null(0)
    )
    joined = per_partition.join(result.rows_read, on="partition_date", how="full", coalesce=True)
    assert (joined["len"] + joined["len_right"] == joined["rows_read"]).all()


def test_quarantine_keeps_the_offending_values_and_the_original_text():
    raw = pl.DataFrame(
        {
            "ticker": ["AAA"],
            "date": [dt.date(2021, 3, 1)],
            "open": [1.0],
            "high": [2.0],
            "low": [0.5],
            "close": [None],
            "volume": [10.0],
            "adj_close": [None],
            "source_file": ["f.csv"],
            "source_row": [7],
            "raw_text": ["close=abc"],
        },
        schema_overrides={"close": pl.Float64, "adj_close": pl.Float64},
    )
    q = validate_bars(raw).quarantine.row(0, named=True)
    assert q["reason"] == "missing_value" and "close" in q["detail"]
    assert (q["raw_text"], q["source_file"], q["source_row"], q["open"]) == ("close=abc", "f.csv", 7, 1.0)


def test_zero_volume_is_kept_and_marked_as_missing(dirty_source):
    result = validate_bars(dirty_source.read(dt.date(2021, 1, 1), dt.date(2021, 12, 31)))
    zero = result.kept.filter(pl.col("volume") == 0)
    assert zero.height == 1 and zero["volume_missing"].all()
    assert not result.kept.filter(pl.col("volume") > 0)["volume_missing"].any()


def test_a_non_trading_day_row_goes_to_the_next_sessions_partition(dirty_source):
    q = validate_bars(dirty_source.read(dt.date(2021, 1, 1), dt.date(2021, 12, 31))).quarantine
    saturday = q.filter(pl.col("date") == dt.date(2021, 3, 6))
    assert saturday["partition_date"].to_list() == [dt.date(2021, 3, 8)]


def test_flag_policy_keeps_high_low_inconsistent_rows_flagged(dirty_source):
    raw = dirty_source.read(dt.date(2021, 1, 1), dt.date(2021, 12, 31))
    result = validate_bars(raw, IngestConfig(hl_policy="flag"))
    flagged = result.kept.filter("hl_inconsistent")
    assert flagged["date"].to_list() == [dt.date(2021, 3, 8)]
    assert "high_low_inconsistent" not in ";".join(result.quarantine["reason"].to_list())


def test_adjustment_rounding_within_tolerance_is_not_an_inconsistency():
    raw = pl.DataFrame(
        {
            "ticker": ["AAA", "AAA"],
            "date": [dt.date(2021, 3, 1), dt.date(2021, 3, 2)],
            "open": [16.851902, 10.0],
            "high": [16.851902 * (1 - 2e-7), 10.0 * (1 - 1e-3)],
            "low": [16.0, 9.0],
            "close": [16.5, 9.5],
            "volume": [1.0, 1.0],
            "adj_close": [None, None],
            "source_file": ["f", "f"],
            "source_row": [0, 1],
            "raw_text": [None, None],
        },
        schema_overrides={"adj_close": pl.Float64, "raw_text": pl.String},
    )
    result = validate_bars(raw)
    assert result.kept["date"].to_list() == [dt.date(2021, 3, 1)]
    assert result.quarantine["reason"].to_list() == ["high_low_inconsistent"]


def test_an_unparseable_date_is_a_clear_error_naming_file_row_and_text(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text(
        "ticker,date,open,high,low,close,volume\nAAA,2021-03-01,1,2,0.5,1.5,10\nAAA,03/02/2021,1,2,0.5,1.5,10\n"
    )
    with pytest.raises(ValueError, match=r"bad.csv: row 3 \(ticker AAA\): column 'date' = '03/02/2021'"):
        FileSource(path, "csv").read(dt.date(2021, 1, 1), dt.date(2021, 12, 31))


def _raw(rows: list[tuple]) -> pl.DataFrame:
    """RAW_SCHEMA rows (ticker, date, open, high, low, close, volume) from file "f", in this order."""
    cols = ["ticker", "date", "open", "high", "low", "close", "volume"]
    frame = pl.DataFrame(rows, schema=cols, orient="row").with_columns(*[pl.col(c).cast(pl.Float64) for c in cols[2:]])
    return frame.with_columns(
        pl.lit(None, pl.Float64).alias("adj_close"),
        pl.lit("f").alias("source_file"),
        pl.int_range(pl.len(), dtype=pl.Int64).alias("source_row"),
        pl.lit(None, pl.String).alias("raw_text"),
    )


def test_infinite_values_are_quarantined_as_non_finite_and_nothing_else():
    inf = float("inf")
    day = dt.date(2021, 3, 1)
    raw = _raw(
        [
            ("AAA", day, 10.0, 10.5, 9.5, inf, 1000.0),  # was high_low_inconsistent
            ("BBB", day, 10.0, 10.5, 9.5, 10.2, inf),  # was kept
            ("CCC", day, -inf, 10.5, 9.5, 10.2, 1000.0),  # was nonpositive_price + high_low
            ("DDD", day, 10.0, 10.5, 9.5, 10.2, 1000.0),
        ]
    )
    result = validate_bars(raw)
    assert result.kept["ticker"].to_list() == ["DDD"]
    q = result.quarantine.sort("ticker")
    assert q["reason"].to_list() == ["non_finite_value"] * 3
    assert q["detail"].to_list() == [
        "non_finite_value: close=inf",
        "non_finite_value: volume=inf",
        "non_finite_value: open=-inf",
    ]


def test_a_newest_first_file_is_sorted_not_quarantined():
    days = [dt.date(2021, 3, d) for d in (1, 2, 3, 4, 5)]
    rows = [("AAA", d, 10.0, 10.5, 9.5, 10.2, 1000.0) for d in reversed(days)]
    rows.append(("AAA", days[2], 10.0, 10.5, 9.5, 10.3, 1000.0))  # a real repeat: the later copy goes
    result = validate_bars(_raw(rows))
    assert result.kept["date"].to_list() == days
    assert result.kept.filter(pl.col("date") == days[2])["close"].item() == 10.2  # the first copy in the file
    assert result.quarantine.select("reason", "source_row").rows() == [("duplicate_key", 5)]
    assert result.out_of_order == 5  # 4 rows dated before an earlier row, and the late repeat
