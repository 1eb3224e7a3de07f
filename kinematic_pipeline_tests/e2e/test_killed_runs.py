"""A plain ``dagster asset materialize`` killed mid-run (SIGKILL: no failure event is ever written) leaves no
orphan step process computing on, and no run STARTED forever: its step exits with it, and the ``orphaned_runs``
sensor (the daemon runs it every minute) marks the run failed."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import dagster as dg
import pytest

from kinematic_pipeline.orchestration.runs import ORPHANED_RUNS_SENSOR, orphaned_runs_sensor
from kinematic_pipeline_tests.conftest import cli

pytestmark = pytest.mark.e2e


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_killed_dagster_asset_materialize_leaves_no_orphan_step_and_no_started_run(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "DAGSTER_HOME": str(home), "KP_PROFILE": "ci", "KP_WAREHOUSE": str(tmp_path / "wh")}
    env.pop("KP_FOLDS", None)
    command = [cli("dagster"), "asset", "materialize", "-m", "kinematic_pipeline", "--select", "raw_ohlcv"]
    command += ["--partition-range", "2021-01-04...2022-12-30"]
    run = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    steps: list[int] = []
    try:
        deadline = time.monotonic() + 240
        while not steps:  # the step subprocess, once it has started reading the source
            assert run.poll() is None, f"the run ended before it could be killed:\n{run.stdout.read()}"
            assert time.monotonic() < deadline, "no step subprocess appeared"
            steps = [p for p in _children(run.pid) if "spawn_main" in Path(f"/proc/{p}/cmdline").read_text()]
            time.sleep(0.05)
        time.sleep(3.0)  # inside the step (the definitions loaded, the watch started)
        assert run.poll() is None and all(_running(p) for p in steps), "the step finished before the kill"
        run.send_signal(signal.SIGKILL)  # the run process only: its step is orphaned
        run.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(_running(p) for p in steps):
            assert time.monotonic() < deadline, f"step process(es) {steps} still computing 30 s after the run died"
            time.sleep(0.1)
    finally:
        for pid in [run.pid, *steps]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    with dg.DagsterInstance.from_config(str(home)) as instance:
        (started,) = instance.get_runs()
        assert started.status == dg.DagsterRunStatus.STARTED  # what Dagster alone leaves behind
        sensor = orphaned_runs_sensor()
        assert sensor.name == ORPHANED_RUNS_SENSOR
        result = sensor(dg.build_sensor_context(instance=instance))
        assert f"marked failed: {started.run_id}" in str(result.skip_message)
        failed = instance.get_run_by_id(started.run_id)
        assert failed.status == dg.DagsterRunStatus.FAILURE
        assert (
            str(run.pid)
            in instance.get_records_for_run(started.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
            .records[0]
            .event_log_entry.dagster_event.message
        )
        # and a second evaluation finds nothing more to do
        assert "no orphaned run" in str(sensor(dg.build_sensor_context(instance=instance)).skip_message)
