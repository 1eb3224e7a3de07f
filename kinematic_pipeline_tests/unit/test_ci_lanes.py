"""Every slow test runs in a CI lane: the fast lane deselects them (pyproject's ``-m 'not slow ...'``), so a file
holding one that ``.ci/nightly`` does not name would never run (two did: a side-by-side interrupt test and a timed
assertion that is now a row of ``benchmarks/bench_tokenize_kernels.py``)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "kinematic_pipeline_tests"
SLOW_MARK = re.compile(r"^(@pytest\.mark\.slow|pytestmark = .*pytest\.mark\.slow)", re.MULTILINE)


def _nightly_slow_files() -> set[str]:
    """The test files ``.ci/nightly`` passes to ``pytest -m slow`` (``$TESTS/...``), relative to the tests folder."""
    text = (ROOT / ".ci" / "nightly").read_text()
    command = re.search(r"pytest -m slow((?:[^\n]*\\\n)*[^\n]*)", text)
    assert command, ".ci/nightly runs no 'pytest -m slow'"
    return set(re.findall(r'"\$TESTS/([^"]+\.py)"', command.group(1)))


def test_every_file_with_a_slow_test_is_run_by_the_nightly_lane():
    slow = {
        str(path.relative_to(TESTS))
        for path in TESTS.rglob("test_*.py")
        if "e2e" not in path.parts and SLOW_MARK.search(path.read_text())
    }
    assert slow, "no slow test found: the search is wrong"
    missing = sorted(slow - _nightly_slow_files())
    assert not missing, f"slow tests in files .ci/nightly never runs with -m slow: {missing}"


def test_an_xdist_worker_runs_on_one_core_and_its_settings_train_at_one_thread():
    """``pytest -n 2`` (the nightly lane): worker gw1 is pinned to the second core before numpy or torch load, so its
    settings (``usable_cores``: ci's one run at every core) and a CLI it starts train at one thread; outside a worker nothing is pinned."""
    import os
    import subprocess
    import sys

    cores = sorted(os.sched_getaffinity(0))
    script = (
        "import os, kinematic_pipeline_tests as t; from kinematic_pipeline.config import load_settings; "
        "print(sorted(os.sched_getaffinity(0)), load_settings('ci', env={}).train.process_threads)"
    )

    def run(**env):
        clean = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
        out = subprocess.run([sys.executable, "-c", script], env={**clean, **env}, cwd=ROOT, capture_output=True)
        assert out.returncode == 0, out.stderr.decode()[-2000:]
        return out.stdout.decode().strip()

    pinned = run(PYTEST_XDIST_WORKER="gw1", PYTEST_XDIST_WORKER_COUNT="2")
    assert pinned == f"[{cores[1 % len(cores)]}] 1"
    alone = run(PYTEST_XDIST_WORKER="gw0", PYTEST_XDIST_WORKER_COUNT="1")  # -n 1: every core, as without xdist
    assert alone == f"{cores} {len(cores)}"  # ci trains one run at a time at every core
