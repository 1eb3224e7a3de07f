"""A step subprocess exits with the run process that spawned it, even when the run died before the step had loaded
the definitions (and so before its watch started): the watch compares against the spawner's pid, not the parent
the step has when the watch starts (by then init or a subreaper)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

STEP = """
import multiprocessing, sys, time

def step(delay):
    time.sleep(delay)  # still loading the definitions when the run dies
    from kinematic_pipeline.orchestration.runs import watch_parent
    assert watch_parent(0.1)
    time.sleep(120)

if __name__ == "__main__":
    child = multiprocessing.get_context("spawn").Process(target=step, args=(float(sys.argv[1]),))
    child.start()
    print(child.pid, flush=True)
    time.sleep(120)
"""


def _computing(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_step_whose_run_died_before_its_watch_started_exits_all_the_same(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(STEP)
    run = subprocess.Popen([sys.executable, str(script), "1.5"], stdout=subprocess.PIPE, text=True)
    step = int(run.stdout.readline())
    try:
        run.send_signal(signal.SIGKILL)  # before the step's watch starts (it sleeps 1.5 s first)
        run.wait(timeout=30)
        deadline = time.monotonic() + 40
        while _computing(step):
            assert time.monotonic() < deadline, f"step {step} still computing 40 s after its run died"
            time.sleep(0.1)
    finally:
        for pid in (run.pid, step):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
