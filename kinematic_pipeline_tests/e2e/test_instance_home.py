"""The Dagster instance of ``dagster.yaml`` lives under ``DAGSTER_HOME`` wherever the command runs: a materialization
started from another folder (a warehouse elsewhere) writes its run history and event log under ``DAGSTER_HOME``, and
nothing into the folder it was started from."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys

from kinematic_pipeline_tests.helpers import ROOT
from kinematic_pipeline_tests.helpers.cli import cli_env


def test_a_run_from_another_folder_keeps_its_instance_under_dagster_home(tmp_path):
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")  # the repository's instance configuration
    env = {
        **cli_env(tmp_path, None, None),
        "DAGSTER_HOME": str(home),
        "KP_WAREHOUSE": str(tmp_path / "warehouse"),
        "KP_END_DATE": "2021-01-29",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "kinematic_pipeline", "materialize", "--select", "raw_ohlcv"],
        env=env,
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(elsewhere.iterdir()) == []  # nothing in the working directory (was: warehouse/dagster/...)
    with sqlite3.connect(home / "history" / "runs.db") as db:
        assert db.execute("SELECT count(*) FROM runs").fetchone()[0] >= 1
    with sqlite3.connect(home / "history" / "event_log" / "event_log.db") as db:
        kinds = {k for (k,) in db.execute("SELECT DISTINCT dagster_event_type FROM event_logs")}
    assert "ASSET_MATERIALIZATION" in kinds
