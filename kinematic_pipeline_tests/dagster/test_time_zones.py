"""Zone-aware timestamps become the exchange's trading date, never the UTC date, in Parquet and CSV alike
(through the real CLI's ``main``, in process): bars stamped in a zone east of UTC (Tokyo, +09:00), west of it
(Los Angeles) and in UTC itself land on the session their own calendar date names, the same as the same instants
written as text."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import polars as pl
import pytest

from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.warehouse import Warehouse
from kinematic_pipeline_tests.helpers.cli import run_cli_in_process

SESSIONS = trading_days(dt.date(2021, 1, 4), dt.date(2021, 1, 8))
ZONES = {"EAST": ("Asia/Tokyo", 6), "WEST": ("America/Los_Angeles", 13), "UTC": ("UTC", 21)}  # zone, stamp hour


def _stamps(zone: str, hour: int) -> list[dt.datetime]:
    return [dt.datetime(d.year, d.month, d.day, hour, tzinfo=ZoneInfo(zone)) for d in SESSIONS]


def _bars(name: str, zone: str, hour: int) -> pl.DataFrame:
    n = len(SESSIONS)
    close = [100.0 + k for k in range(n)]
    stamps = pl.Series("date", _stamps(zone, hour), dtype=pl.Datetime("us", zone))
    return pl.DataFrame(
        {
            "ticker": [f"TZ_{name}"] * n,
            "date": stamps,
            "open": close,
            "high": [c + 1 for c in close],
            "low": [c - 1 for c in close],
            "close": close,
            "volume": [1000.0] * n,
        }
    )


@pytest.mark.slow  # ~8 s each through the CLI: the nightly lane (the fast lane's 8 minutes are spent)
@pytest.mark.parametrize("kind", ["parquet", "csv"])
def test_zone_aware_timestamps_land_on_their_own_calendar_date(tmp_path, capfd, kind):
    folder = tmp_path / "bars"
    folder.mkdir()
    for name, (zone, hour) in ZONES.items():
        frame = _bars(name, zone, hour)
        # in UTC, Tokyo's 06:00 stamps are the previous day's 21:00: dating them by UTC would shift every bar
        assert (frame["date"].dt.convert_time_zone("UTC").dt.date() != pl.Series(SESSIONS)).any() == (name == "EAST")
        if kind == "parquet":
            frame.write_parquet(folder / f"{name}.parquet")
        else:  # ISO text with the offset, as a vendor's CSV writes it
            text = frame.with_columns(pl.col("date").map_elements(lambda t: t.isoformat(), return_dtype=pl.String))
            text.write_csv(folder / f"{name}.csv")
    proc = run_cli_in_process(capfd, tmp_path, "materialize", "--select", "raw_ohlcv", source=kind, path=folder)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = Warehouse(tmp_path / "warehouse").query("SELECT ticker, date, close FROM raw_ohlcv ORDER BY ticker, date")
    for name in ZONES:
        got = rows.filter(pl.col("ticker") == f"TZ_{name}")
        assert got["date"].to_list() == SESSIONS, name
        assert got["close"].to_list() == [100.0 + k for k in range(len(SESSIONS))], name
