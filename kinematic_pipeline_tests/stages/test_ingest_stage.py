"""The ingest stage end to end on disk: shards, manifests, views, idempotence and byte-identity."""

from __future__ import annotations

import dataclasses
import datetime as dt

import polars as pl
import pytest

from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.sources.files import FileSource
from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv, verify_raw_ohlcv
from kinematic_pipeline.warehouse import Warehouse
from kinematic_pipeline.warehouse.atomic import file_sha256
from kinematic_pipeline.warehouse.catalog import query
from kinematic_pipeline_tests.conftest import SHORT_END, SHORT_START


def _days():
    return trading_days(SHORT_START, SHORT_END)


def test_ingest_writes_one_shard_per_day_and_duckdb_views(ci_settings):
    summary = materialize_raw_ohlcv(ci_settings, _days(), progress=False)
    wh = ci_settings.warehouse
    assert Warehouse(wh).shard_days("raw_ohlcv") == _days()
    assert all(Warehouse(wh).manifest("raw_ohlcv", d).exists() for d in _days())
    assert not [p for p in (wh / "raw_ohlcv").rglob("*") if p.is_file() and ".staging" in p.parts]  # no temp files
    counts = query(wh, "SELECT count(*) AS n, count(DISTINCT ticker) AS t FROM raw_ohlcv").row(0)
    assert counts == (summary.totals["rows_kept"], ci_settings.synthetic.n_tickers)
    manifest = query(wh, "SELECT * FROM raw_ohlcv_manifest ORDER BY partition_date")
    assert manifest["content_hash"].to_list() == [file_sha256(Warehouse(wh).shard("raw_ohlcv", d)) for d in _days()]
    assert query(wh, "SELECT count(*) FROM quarantine").item() == 0
    assert all(passed for passed, _ in verify_raw_ohlcv(ci_settings, _days()).values())


def test_rematerializing_a_day_replaces_it_with_identical_bytes(ci_settings):
    days = _days()
    materialize_raw_ohlcv(ci_settings, days, progress=False)
    wh = ci_settings.warehouse
    before = {d: file_sha256(Warehouse(wh).shard("raw_ohlcv", d)) for d in days}
    rows_before = query(wh, "SELECT count(*) FROM raw_ohlcv").item()
    materialize_raw_ohlcv(ci_settings, [days[10]], progress=False)  # one day alone, as the nightly tick does
    materialize_raw_ohlcv(ci_settings, days, progress=False)  # and the whole range again
    after = {d: file_sha256(Warehouse(wh).shard("raw_ohlcv", d)) for d in days}
    assert after == before
    assert query(wh, "SELECT count(*) FROM raw_ohlcv").item() == rows_before


def test_a_repaired_source_removes_the_stale_quarantine_shard(tmp_path, ci_settings):
    day = dt.date(2021, 3, 1)
    path = tmp_path / "bars.csv"
    path.write_text("ticker,date,open,high,low,close,volume\nAAA,2021-03-01,1,2,0.5,NaN,10\n")
    settings = dataclasses.replace(
        ci_settings, data=dataclasses.replace(ci_settings.data, source="csv", source_path=str(path))
    )
    materialize_raw_ohlcv(settings, [day], source=FileSource(path, "csv"), progress=False)
    q = settings.warehouse.shard("quarantine", day)
    assert pl.read_parquet(q)["reason"].to_list() == ["missing_value"]
    path.write_text("ticker,date,open,high,low,close,volume\nAAA,2021-03-01,1,2,0.5,1.5,10\n")
    materialize_raw_ohlcv(settings, [day], source=FileSource(path, "csv"), progress=False)
    assert not q.exists()
    assert query(settings.warehouse, "SELECT count(*) FROM quarantine").item() == 0
    assert query(settings.warehouse, "SELECT close FROM raw_ohlcv").item() == 1.5


def test_the_contract_checks_catch_a_corrupted_shard(ci_settings):
    days = _days()
    materialize_raw_ohlcv(ci_settings, days, progress=False)
    path = ci_settings.warehouse.shard("raw_ohlcv", days[0])
    good = pl.read_parquet(path)
    bad = pl.concat([good, good.head(1)]).with_columns(
        pl.when(pl.int_range(pl.len()) == 1).then(float("nan")).otherwise(pl.col("close")).alias("close"),
        pl.when(pl.int_range(pl.len()) == 2).then(days[1]).otherwise(pl.col("date")).alias("date"),
    )
    bad.write_parquet(path)
    results = verify_raw_ohlcv(ci_settings, days)
    assert {name for name, (passed, _) in results.items() if not passed} == {
        "no_nan_in_kept_rows",
        "unique_ticker_date",
        "no_date_after_partition",
        "kept_plus_quarantined_equals_read",
    }


def test_an_infinite_value_in_a_shard_fails_the_check_and_the_tokenizer_names_ticker_and_day(ci_settings):
    from kinematic_pipeline.stages.tokenize import load_panel

    days = _days()
    materialize_raw_ohlcv(ci_settings, days, progress=False)
    path = ci_settings.warehouse.shard("raw_ohlcv", days[5])
    good = pl.read_parquet(path)
    ticker = good["ticker"][0]
    bad = good.with_columns(
        pl.when(pl.int_range(pl.len()) == 0).then(float("inf")).otherwise(pl.col("close")).alias("close")
    )
    bad.write_parquet(path)
    from kinematic_pipeline_tests.conftest import record_in_manifest

    record_in_manifest(ci_settings.warehouse, "raw_ohlcv", days[5])  # as an older writer let it through
    passed, text = verify_raw_ohlcv(ci_settings, days)["no_nan_in_kept_rows"]
    assert not passed and "1 kept row(s)" in text
    with pytest.raises(ValueError, match=f"ticker {ticker} on {days[5]}: close=inf"):
        load_panel(ci_settings, days[-1], days[-1])


def test_rows_a_run_does_not_read_are_counted_by_reason(tmp_path):
    from kinematic_pipeline.stages.ingest import count_out_of_range

    path = tmp_path / "bars.csv"
    path.write_text(
        "ticker,date,open,high,low,close,volume\n"
        + "".join(
            f"{t},{d},1,2,0.5,1.5,10\n" for t, d in [("A", "2021-01-28"), ("A", "2021-01-29"), ("B", "2021-01-29")]
        )
        + "A,2021-01-30,1,2,0.5,1.5,10\nA,2021-02-01,1,2,0.5,1.5,10\nA,2031-01-02,1,2,0.5,1.5,10\n"
    )
    friday = [dt.date(2021, 1, 29)]
    source = FileSource(path, "csv")
    on_saturday = count_out_of_range(source, friday, ("A",), today=dt.date(2021, 1, 30))
    assert on_saturday == {
        "before_range": 1,
        "after_range": 0,
        "after_last_session": 1,  # Saturday's bar waits for Monday's partition
        "future_date": 2,  # Monday's and 2031's bars
        "other_ticker": 1,
    }
    later = count_out_of_range(source, friday, None, today=dt.date(2021, 2, 5))
    assert later == {"before_range": 1, "after_range": 1, "after_last_session": 1, "future_date": 1, "other_ticker": 0}
