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
