"""Data quality a quant expects, as asset checks that warn (the bars stay), and what a source file must say.

Through Dagster (``raw_ohlcv`` with its checks, in process): an unadjusted split (the close halves overnight, the
volume does not move) and two tickers that differ only by case are flagged with their names and dates, while a
real crash with its volume surge is not; through the real CLI's ``main`` (in process): a value that does not parse
keeps its original text in its quarantine row (Parquet as CSV), and duplicate columns are one line naming the file
and both columns.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import dagster as dg
import polars as pl

from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.config import load_settings
from kinematic_pipeline.definitions import build_definitions
from kinematic_pipeline.orchestration.partitions import range_tags
from kinematic_pipeline.warehouse import Warehouse
from kinematic_pipeline_tests.helpers.cli import assert_one_line_error, run_cli_in_process

DAYS = trading_days(dt.date(2021, 2, 1), dt.date(2021, 3, 31))
SPLIT_DAY, CRASH_DAY = DAYS[30], DAYS[35]


def _series(ticker: str, closes: list[float], volumes: list[float]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "ticker": ticker,
            "date": DAYS,
            "open": closes,
            "high": [c * 1.01 for c in closes],
            "low": [c * 0.99 for c in closes],
            "close": closes,
            "volume": volumes,
        }
    )


def _universe() -> pl.DataFrame:
    n, k, j = len(DAYS), DAYS.index(SPLIT_DAY), DAYS.index(CRASH_DAY)
    flat = [100.0 + 0.1 * i for i in range(n)]
    split = [c / 2 if i >= k else c for i, c in enumerate(flat)]  # 2:1, prices not adjusted, volume the same
    crash = [c * 0.4 if i >= j else c for i, c in enumerate(flat)]  # news: the volume surges that day
    crash_volume = [1e6 * (8 if i == j else 1) for i in range(n)]
    return pl.concat(
        [
            _series("SPLT", split, [1e6] * n),
            _series("CRSH", crash, crash_volume),
            _series("ABC", flat, [1e6] * n),
            _series("abc", flat, [2e6] * n),
        ]
    )


def test_unadjusted_splits_and_case_variants_are_warnings_naming_ticker_and_date(tmp_path):
    path = tmp_path / "bars.parquet"
    _universe().write_parquet(path)
    settings = load_settings("ci", source="parquet", source_path=str(path), warehouse=tmp_path / "wh", env={})
    settings = dataclasses.replace(settings, data=dataclasses.replace(settings.data, start_date=DAYS[0]))
    defs = build_definitions(settings)
    result = dg.materialize(
        [*defs.assets, *defs.asset_checks],
        selection=["raw_ohlcv"],
        resources=defs.resources,
        tags=range_tags(DAYS[0], DAYS[-1]),
        instance=dg.DagsterInstance.ephemeral(),
    )
    assert result.success  # warnings never fail the run
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    split, case = checks["no_unadjusted_split"], checks["no_ticker_case_variants"]
    assert not split.passed and split.severity == dg.AssetCheckSeverity.WARN
    assert f"SPLT {SPLIT_DAY}: close x0.5" in split.metadata["detail"].value
    assert "CRSH" not in split.metadata["detail"].value  # a move with its volume surge is news, not a split
    assert not case.passed and "ABC, abc" in case.metadata["detail"].value
    assert all(checks[n].passed for n in checks if n not in ("no_unadjusted_split", "no_ticker_case_variants"))
    kept = Warehouse(tmp_path / "wh").query("SELECT count(*) AS n FROM raw_ohlcv")["n"].item()
    assert kept == _universe().height  # the bars stay


def test_an_unparseable_parquet_value_keeps_its_text_and_duplicate_columns_name_the_file(tmp_path, capfd):
    bars = _series("TXT", [100.0] * len(DAYS), [1e6] * len(DAYS)).head(5)
    text = bars.with_columns(pl.col("close").cast(pl.String))
    text = text.with_columns(
        pl.when(pl.int_range(pl.len()) == 2).then(pl.lit("1O1.5")).otherwise("close").alias("close")
    )
    folder = tmp_path / "src"
    folder.mkdir()
    text.write_parquet(folder / "bars.parquet")
    proc = run_cli_in_process(capfd, tmp_path, "materialize", "--select", "raw_ohlcv", source="parquet", path=folder)
    assert proc.returncode == 0, proc.stderr[-2000:]
    quarantine = Warehouse(tmp_path / "warehouse").query("SELECT reason, raw_text, source_row FROM quarantine")
    assert quarantine.rows() == [("missing_value", "close=1O1.5", 2)]

    doubled = bars.with_columns(pl.col("close").alias("Close "))
    doubled.write_parquet(folder / "bars.parquet")
    proc = run_cli_in_process(capfd, tmp_path, "materialize", "--select", "raw_ohlcv", source="parquet", path=folder)
    assert_one_line_error(proc, "bars.parquet", "duplicate column 'close'", "'Close '")


def test_the_cli_prints_one_warning_line_per_flagged_row(tmp_path, capfd):
    path = tmp_path / "bars.parquet"
    _universe().write_parquet(path)
    proc = run_cli_in_process(capfd, tmp_path, "materialize", "--select", "raw_ohlcv", source="parquet", path=path)
    assert proc.returncode == 0, proc.stderr[-2000:]  # warnings never fail the run
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning: ")]
    assert f"warning: raw_ohlcv.no_unadjusted_split: SPLT {SPLIT_DAY} close/previous 0.500" in "\n".join(warnings)
    assert any(w.startswith("warning: raw_ohlcv.no_unadjusted_split:") and "unadjusted split?" in w for w in warnings)
    assert "warning: raw_ohlcv.no_ticker_case_variants: tickers ABC, abc differ only by case" in "\n".join(warnings)
    assert not any("CRSH" in w for w in warnings) and len(warnings) == 2
