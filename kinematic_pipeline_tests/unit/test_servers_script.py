"""``scripts/servers.sh`` on a shared host: it never works in a folder another user could have planted (a
symbolic link, someone else's folder, one others can write) and never puts a password on a command line."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kinematic_pipeline_tests.helpers import ROOT

SCRIPT = ROOT / "scripts" / "servers.sh"


def _start(folder: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "KP_SERVERS_DIR": str(folder), "KP_PG_PORT": "1", "KP_REDIS_PORT": "1"}
    return subprocess.run(["bash", str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=60)


def test_a_planted_symlink_is_refused(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "servers").symlink_to(target)
    proc = _start(tmp_path / "servers")
    assert proc.returncode == 1 and "is a symbolic link: refusing it" in proc.stderr
    assert list(target.iterdir()) == []  # nothing created, chowned or chmodded through it


def test_a_folder_others_can_write_is_refused(tmp_path):
    folder = tmp_path / "servers"
    folder.mkdir()
    folder.chmod(0o777)
    proc = _start(folder)
    assert proc.returncode == 1 and "is writable by others (mode 777): refusing it" in proc.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand a folder to another user")
def test_someone_elses_folder_is_refused(tmp_path):
    folder = tmp_path / "servers"
    folder.mkdir(mode=0o755)
    os.chown(folder, 65534, 65534)  # nobody
    proc = _start(folder)
    assert proc.returncode == 1 and "belongs to uid 65534, not to you: refusing it" in proc.stderr


def test_no_password_is_passed_on_a_command_line():
    text = SCRIPT.read_text()
    assert "--auth=trust" not in text and "--auth=scram-sha-256" in text
    for line in text.splitlines():
        if "redis-cli" in line or "psql" in line or "createdb" in line:
            assert " -a " not in line and "password=" not in line.lower(), line
