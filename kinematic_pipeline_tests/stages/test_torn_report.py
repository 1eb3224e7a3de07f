"""The last good report survives a full disk and a kill in the middle of its rewrite (issue 55, items 1 and 4).

"No space left on the device" half-way through ``report.md`` once left half a report, the previous one gone; a kill
in the middle of ``tables.md`` left half a file, which ``report`` then printed as the report with exit 0. Each is
played here: the disk fills after half the new bytes are written (in this process), or the writer is killed with
SIGKILL after half of them (a process of its own, so no cleanup runs); the old file stays whole, and the real CLI's
``report`` prints the old tables.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kinematic_pipeline.warehouse.catalog import catalog_connection
from kinematic_pipeline_tests.helpers.cli import cli_env, run_cli
from kinematic_pipeline_tests.stages.test_planted_links import pinned_tables

HALF_THEN_FULL = """
import os, pathlib, signal, sys
def tear(write):
    def torn(self, data):
        if self.name == "tables.md" or self.name.startswith(".tables.md."):  # the file or its temporary: half, then
            write(self, data[: len(data) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        return write(self, data)
    return torn
pathlib.Path.write_bytes = tear(pathlib.Path.write_bytes)
pathlib.Path.write_text = tear(pathlib.Path.write_text)
from kinematic_pipeline.warehouse.atomic import write_text_atomic
write_text_atomic(pathlib.Path(sys.argv[1]), "| new | tables |\\n" * 1000)
"""


def _full_disk_after_half(monkeypatch, name: str) -> None:
    """``name`` (or its temporary file) gets half of what is written to it, then "no space left on the device"."""
    for method in ("write_bytes", "write_text"):
        real = getattr(Path, method)

        def torn(self, data, *args, _real=real, **kwargs):
            if self.name == name or self.name.startswith(f".{name}."):
                _real(self, data[: len(data) // 2], *args, **kwargs)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
            return _real(self, data, *args, **kwargs)

        monkeypatch.setattr(Path, method, torn)


def test_a_full_disk_while_report_md_is_rewritten_keeps_the_last_report_whole(tmp_path, monkeypatch):
    from kinematic_pipeline.stages import report

    settings = pinned_tables(tmp_path, monkeypatch)
    path = report.materialize_report(settings)
    last = path.read_bytes()
    assert last.startswith(b"# Kinematic Tokenization: backtest report")
    (settings.warehouse.report_tables_dir / report.CONTEXT_FILE).write_text('{"profile": "demo"}')  # a new report
    _full_disk_after_half(monkeypatch, "report.md")
    with pytest.raises(OSError) as full:
        report.materialize_report(settings)
    assert full.value.errno == errno.ENOSPC
    assert path.read_bytes() == last  # the previous report, whole
    assert not list(path.parent.glob(".report.md.*.tmp"))  # and no half-written temporary left behind
    monkeypatch.undo()


def test_a_kill_in_the_middle_of_tables_md_leaves_the_old_tables_which_report_prints(tmp_path):
    env = cli_env(tmp_path, None, None)
    tables = Path(env["KP_WAREHOUSE"]) / "reports" / "tables.md"
    tables.parent.mkdir(parents=True)
    with catalog_connection(tables.parent.parent):  # a warehouse: its catalog exists
        pass
    old = "| old | tables |\n| --- | --- |\n| 1 | 2 |\n"
    tables.write_text(old)
    killed = subprocess.run(
        [sys.executable, "-c", HALF_THEN_FULL, str(tables)], env=env, capture_output=True, text=True, timeout=120
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert tables.read_text() == old
    assert len(list(tables.parent.glob(".tables.md.*.tmp"))) == 1  # the killed writer's half: never read as the file
    proc = run_cli(tmp_path, "report")  # the real CLI, with the same variables as ``env``
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith(old) and "new" not in proc.stdout
