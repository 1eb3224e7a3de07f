"""Parallel backfills: two `dagster asset materialize` processes (multiprocess executor) on disjoint halves
of 61 trading days, one warehouse, one DuckDB catalog and one Dagster instance, while a third process
queries the catalog: no run fails on DuckDB's single-writer lock, and the views show every day.

    pytest -m e2e kinematic_pipeline_tests/e2e/test_parallel_backfill.py
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import dagster as dg
import pytest

from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.config import load_settings
from kinematic_pipeline.warehouse.catalog import query
from kinematic_pipeline_tests.conftest import cli
from kinematic_pipeline_tests.helpers import ROOT

HALVES = (("2021-01-04", "2021-02-16"), ("2021-02-17", "2021-03-31"))  # 30 + 31 sessions
LOCK_ERROR = re.compile(r"Could not set lock|Conflicting lock|database is locked|IO Error.*lock", re.IGNORECASE)

pytestmark = pytest.mark.e2e


def _instance_home(tmp_path: Path) -> Path:
    """The repository's dagster.yaml (consolidated SQLite event log), storing under a temporary folder."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")  # its storages live under home, whatever the cwd
    # Create the storages once: two processes that both find a fresh SQLite instance race in its schema
    # migration (alembic "more than one head"), an instance set-up issue that a deployed instance never has.
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.get_runs(limit=1)
    return home


def _materialize_halves(select: str, env: dict[str, str], logs: Path) -> list[tuple[int, str]]:
    """Both halves at once, one `dagster asset materialize` process each: [(exit code, output)]."""
    procs = []
    for start, end in HALVES:
        log = open(logs / f"{select.split(',')[0]}-{start}.log", "w+")
        cmd = [cli("dagster"), "asset", "materialize", "-m", "kinematic_pipeline"]
        cmd += ["--select", select, "--partition-range", f"{start}...{end}"]
        procs.append((subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    results = []
    for proc, log in procs:
        proc.wait(timeout=540)
        log.seek(0)
        results.append((proc.returncode, log.read()))
        log.close()
    return results


def test_two_processes_backfill_disjoint_day_ranges_without_a_catalog_lock_error(tmp_path):
    warehouse = tmp_path / "warehouse"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KP_")}
    env.update(
        DAGSTER_HOME=str(_instance_home(tmp_path)),
        KP_PROFILE="ci",
        KP_WAREHOUSE=str(warehouse),
        KP_END_DATE="2021-04-30",
    )
    settings = load_settings("ci", warehouse=warehouse, env=env)

    # A reader (a user in DuckDB or the UI) polls the catalog the whole time.
    reader_errors: list[str] = []
    reads = [0]
    done = threading.Event()

    def read_catalog() -> None:
        while not done.is_set():
            if (warehouse / "catalog.duckdb").exists():
                try:
                    query(warehouse, "SELECT count(*) AS n FROM duckdb_views()")
                    reads[0] += 1
                except Exception as exc:  # noqa: BLE001 - any failure to read is what this test looks for
                    reader_errors.append(repr(exc))
            time.sleep(0.05)

    reader = threading.Thread(target=read_catalog, daemon=True)
    reader.start()
    try:
        # Tokens of the second half read raw bars of the first: ingest first, then tokenize, each in parallel.
        phases = [("raw_ohlcv", "raw_ohlcv"), ("tokens", "spline_tokens,fd_tokens,raw_tokens")]
        outputs = {name: _materialize_halves(select, env, tmp_path) for name, select in phases}
    finally:
        done.set()
        reader.join(timeout=30)

    for name, results in outputs.items():
        for code, output in results:
            assert code == 0, f"{name}: a backfill process failed:\n{output[-4000:]}"
            assert "RUN_SUCCESS" in output
            assert not LOCK_ERROR.search(output), f"{name}: lock error:\n{LOCK_ERROR.search(output).group(0)}"
    assert not reader_errors and reads[0] > 0

    days = trading_days(dt.date.fromisoformat(HALVES[0][0]), dt.date.fromisoformat(HALVES[1][1]))
    assert len(days) == 61
    wh = settings.warehouse
    assert query(wh, "SELECT count(DISTINCT date) AS n FROM raw_ohlcv")["n"][0] == 61
    assert query(wh, "SELECT count(*) AS n FROM raw_ohlcv_manifest")["n"][0] == 61
    for asset in ("spline_tokens", "fd_tokens", "raw_tokens"):
        manifest = query(
            wh, f"SELECT min(partition_date) AS a, max(partition_date) AS b, count(*) AS n FROM {asset}_manifest"
        )
        assert manifest.row(0) == (days[0], days[-1], 61)
        windows = query(wh, f"SELECT count(*) AS n FROM {asset}")["n"][0]
        assert windows == query(wh, f"SELECT sum(windows) AS n FROM {asset}_manifest")["n"][0] > 0
