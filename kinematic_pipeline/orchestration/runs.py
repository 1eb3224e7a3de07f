"""Runs whose process died: never STARTED forever, never an orphan step left computing.

A run whose process is killed (SIGKILL, out of memory) writes no failure event, and Dagster's run monitoring
cannot see a dead worker of the default run launcher (nor of a plain ``dagster asset materialize``, which runs
in its own process). Two guards close that:

- ``fail_orphaned_runs``: a STARTED run whose process is gone is marked failed. The process is the pid the CLI
  tags its runs with (``PID_TAG``, ``HOST_TAG``) or, for a run started by Dagster itself, the pid of its
  ``RUN_START`` event (on a single-host SQLite instance only: a shared Postgres instance holds other hosts'
  runs). Called by every ``python -m kinematic_pipeline materialize`` and by the ``orphaned_runs`` sensor every
  minute under the daemon (``dagster dev``).
- ``watch_parent``: a step subprocess of the multiprocess executor exits when the run process that spawned it
  is gone, instead of computing on as an orphan (started when the step process loads the definitions).

``failure_line`` is what a failed run's first failed step says, on one line (the CLI's and its side-by-side
workers' ``FAILED`` lines).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time

import dagster as dg

PID_TAG, HOST_TAG = "kinematic_pipeline/pid", "kinematic_pipeline/host"
# The pid of the ``materialize`` command whose run this is (its own, or that of the command whose side-by-side
# training worker ran it: orchestration/side_by_side.py): what ``timings --invocation`` groups by.
INVOCATION_TAG = "kinematic_pipeline/invocation"
ORPHANED_RUNS_SENSOR = "orphaned_runs"


def owner_tags(invocation: int | None = None) -> dict[str, str]:
    """The tags of a run this process runs: which process to ask whether it still lives, and which ``materialize``
    command started it (``invocation``: this process unless given)."""
    pid = str(os.getpid())
    return {PID_TAG: pid, HOST_TAG: socket.gethostname(), INVOCATION_TAG: str(invocation or pid)}


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True


def _single_host(instance: dg.DagsterInstance) -> bool:
    from dagster._core.storage.runs import SqliteRunStorage

    return isinstance(instance.run_storage, SqliteRunStorage)


def run_process(instance: dg.DagsterInstance, run: dg.DagsterRun) -> int | None:
    """The pid of the process running ``run`` on this host, or None when this host cannot tell."""
    if PID_TAG in run.tags:
        return int(run.tags[PID_TAG] or 0) if run.tags.get(HOST_TAG) == socket.gethostname() else None
    if not _single_host(instance):
        return None
    records = instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.RUN_START, limit=1).records
    event = records[0].event_log_entry.dagster_event if records else None
    return event.pid if event is not None and event.pid else None


def fail_orphaned_runs(instance: dg.DagsterInstance) -> list[str]:
    """Mark failed the STARTED runs whose process on this host is gone; their ids."""
    failed, host = [], socket.gethostname()
    for run in instance.get_runs(dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])):
        pid = run_process(instance, run)
        if not pid or pid == os.getpid() or pid_alive(pid):
            continue
        instance.report_run_failed(
            run, message=f"process {pid} on {host} that ran it is gone (killed?); marked failed by {sys.argv[0]}"
        )
        failed.append(run.run_id)
        print(f"marked run {run.run_id} failed: its process {pid} no longer exists", file=sys.stderr)
    return failed


def orphaned_runs_sensor() -> dg.SensorDefinition:
    @dg.sensor(
        name=ORPHANED_RUNS_SENSOR,
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Marks failed every STARTED run whose process on this host is gone (killed, out of memory): "
        "Dagster's run monitoring cannot see a dead worker of the default launcher or of `dagster asset "
        "materialize`. Requests no run.",
    )
    def orphaned_runs(context: dg.SensorEvaluationContext):
        failed = fail_orphaned_runs(context.instance)
        return dg.SkipReason(f"marked failed: {', '.join(failed)}" if failed else "no orphaned run")

    return orphaned_runs


_WATCHING: list[int] = []


def watch_parent(poll_seconds: float = 1.0) -> bool:
    """In a child process of ``multiprocessing`` (a step of the multiprocess executor), exit (status 70) within
    ``poll_seconds`` of the parent's death; True when the watch was started (once per process)."""
    import multiprocessing

    spawner = multiprocessing.parent_process()
    if spawner is None or _WATCHING:
        return False
    # The spawner's pid as multiprocessing recorded it, not os.getppid() now: a run killed while this step was still
    # loading the definitions has already left it re-parented (to init or a subreaper), and a watch that took that
    # pid as its parent would never see the run go.
    parent = spawner.pid
    _WATCHING.append(parent)

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                print(f"step process {os.getpid()}: its run process {parent} is gone; exiting", file=sys.stderr)
                sys.stderr.flush()
                os._exit(70)
            time.sleep(poll_seconds)

    threading.Thread(target=watch, name="kp-parent-watch", daemon=True).start()
    return True


def failure_line(result) -> str:
    """The error of a run's first failed step, on one line (the traceback is in the instance's event log)."""
    for event in result.all_events:
        if event.event_type_value == "STEP_FAILURE" and event.step_failure_data is not None:
            error = event.step_failure_data.error
            while error is not None and error.cause is not None and error.cls_name.startswith("Dagster"):
                error = error.cause
            if error is not None:
                return " ".join(str(error.message).split())
    return "see `dagster dev` for the run's log"
