"""The read-only commands on a warehouse this process may not write (issue 55, item 4): ``info`` lists the views and
``report`` answers, on a real read-only mount (a bind mount ``-o ro`` in a mount namespace of its own, so even root
gets EROFS), and neither creates a file. Before, ``info`` failed on ``.catalog.lock``, which it opened for writing.

The mount needs ``unshare -m`` and ``mount`` as root (CAP_SYS_ADMIN), which this project's machines and CI have;
elsewhere the test is skipped, saying why.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import polars as pl
import pytest

from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline_tests.helpers.cli import cli_env, read_only_mount_refused, run_cli_in_process, run_read_only

DAYS = trading_days(dt.date(2021, 2, 1), dt.date(2021, 2, 26))


def _files(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("lock", ["kept", "removed"])
def test_info_and_report_work_on_a_read_only_warehouse_and_create_nothing(tmp_path, capfd, lock):
    close = pl.Series([100.0 + i for i in range(len(DAYS))])
    bars = pl.DataFrame(
        {"ticker": "AAA", "date": DAYS, "open": close, "high": close + 1, "low": close - 1, "close": close}
    ).with_columns(volume=pl.lit(1e6))
    bars.write_parquet(tmp_path / "bars.parquet")
    proc = run_cli_in_process(
        capfd, tmp_path, "materialize", "--select", "raw_ohlcv", source="parquet", path=tmp_path / "bars.parquet"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    warehouse = tmp_path / "warehouse"
    why = read_only_mount_refused(warehouse)
    if why:
        pytest.skip(why)
    if lock == "removed":  # a warehouse copied without its lock file: a reader must not need to create it
        (warehouse / ".catalog.lock").unlink()
    before = _files(warehouse)

    info = run_read_only(warehouse, cli_env(tmp_path, None, None), "info", cwd=tmp_path)
    assert info.returncode == 0, info.stderr[-2000:]
    assert re.search(rf"view raw_ohlcv +{len(DAYS)} rows", info.stdout), info.stdout[-2000:]
    report = run_read_only(
        warehouse, cli_env(tmp_path, None, None), "report", cwd=tmp_path
    )  # no report yet: its own answer, not a write error
    assert report.returncode == 1 and "no report under" in report.stderr, report.stderr[-2000:]
    assert "Read-only file system" not in info.stderr + report.stderr
    assert _files(warehouse) == before
