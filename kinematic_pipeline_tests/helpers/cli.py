"""The real CLI with its own warehouse and Dagster instance (ci profile), in a subprocess (``run_cli``) or in this
process (``run_cli_in_process``), a hostile bars file, and the one-line error every refused input must be."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import sys
import traceback
from pathlib import Path

import pytest

from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline_tests.helpers import ROOT

FIRST, LAST = dt.date(2021, 1, 4), dt.date(2021, 1, 29)  # a Monday and a Friday
SATURDAY, MONDAY = dt.date(2021, 1, 30), dt.date(2021, 2, 1)
FUTURE = dt.date(2030, 1, 2)
BEFORE = dt.date(2020, 12, 31)  # before KP_START_DATE
TICKERS = ("AAA", "BRK/B", "ÆØÅ")
INF = float("inf")


def cli_variables(tmp_path: Path, source: str | None, path: Path | None) -> dict[str, str]:
    """The variables a test's CLI runs with: the ci profile, a warehouse and a Dagster instance in ``tmp_path``."""
    home = tmp_path / "dagster_home"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = dict(
        KP_PROFILE="ci",
        KP_WAREHOUSE=str(tmp_path / "warehouse"),
        DAGSTER_HOME=str(home),
        KP_START_DATE="2021-01-01",
        KP_END_DATE="2021-12-31",
    )
    if source:
        env.update(KP_SOURCE=source, KP_SOURCE_PATH=str(path))
    return env


def cli_env(tmp_path: Path, source: str | None, path: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    # The code under test, whichever checkout the venv's editable install points at.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(cli_variables(tmp_path, source, path))
    return env


def run_cli(tmp_path: Path, *args: str, source: str | None = None, path: Path | None = None):
    return subprocess.run(
        [sys.executable, "-m", "kinematic_pipeline", *args],
        env=cli_env(tmp_path, source, path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )


def read_only_mount_refused(folder: Path) -> str:
    """ "" when a read-only bind mount of ``folder`` (``unshare -m``, root's CAP_SYS_ADMIN) works here, else why
    not: the mount makes even root get EROFS, where a permission bit would not."""
    if shutil.which("unshare") is None:
        return "no unshare(1)"
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount --bind -o ro '{folder}' '{folder}' && ! touch '{folder}/.probe'"],
        capture_output=True,
        text=True,
    )
    return "" if probe.returncode == 0 else f"no read-only bind mount here: {probe.stderr.strip()[:200]}"


def run_read_only(warehouse: Path, env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m kinematic_pipeline *args`` (``env``) with ``warehouse`` mounted read-only for that process alone."""
    command = f"mount --bind -o ro '{warehouse}' '{warehouse}' && exec \"$0\" -m kinematic_pipeline \"$@\""
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", command, sys.executable, *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def run_cli_in_process(
    capfd: pytest.CaptureFixture[str],
    tmp_path: Path,
    *args: str,
    source: str | None = None,
    path: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """``run_cli`` without the cold start: ``kinematic_pipeline.cli.main(args)`` in this interpreter, with the same
    variables (and ``env`` over them) set by pytest's monkeypatch and ``tmp_path`` as the working directory for the
    call only; what it printed to stdout and stderr (file descriptors included, ``capfd``); its exit status as
    ``python -m kinematic_pipeline`` would end: ``main``'s return value, a ``SystemExit``'s code (argparse), or 1
    with the traceback on stderr for an exception that escapes ``main``, as the interpreter prints it.

    ``main`` reads the environment once per call (``load_settings``) and builds the definitions and the Dagster
    instance from it, so nothing carries over from one call to the next. What only a process of its own shows
    (the interpreter's start, warnings printed on stderr, a killed run, a broken pipe) stays with ``run_cli``."""
    from kinematic_pipeline.cli import main

    capfd.readouterr()  # what the test printed before is not the command's
    with pytest.MonkeyPatch.context() as patch:
        for name, value in {**cli_variables(tmp_path, source, path), **(env or {})}.items():
            patch.setenv(name, value)
        patch.chdir(tmp_path)
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse: a usage error (2, its message printed), --help (0)
            code = 0 if exc.code is None else exc.code
        except Exception:
            traceback.print_exc()
            code = 1
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess([sys.executable, "-m", "kinematic_pipeline", *args], code, out, err)


def last_line(proc) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def assert_one_line_error(proc, *fragments: str) -> None:
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "Stack Trace" not in proc.stderr, proc.stderr
    line = last_line(proc)
    for fragment in fragments:
        assert fragment in line, line


def hostile_rows() -> list[dict]:
    """Good bars of three tickers over January 2021, plus one row of each kind of trouble; newest first."""
    rows = []
    for k, day in enumerate(trading_days(FIRST, LAST)):
        for j, ticker in enumerate(TICKERS):
            close = 100.0 + 10 * j + k
            rows.append(
                dict(ticker=ticker, date=day, open=close, high=close + 1, low=close - 1, close=close, volume=1e6)
            )

    def bad(day, **values):
        return dict(dict(ticker="AAA", date=day, open=50.0, high=51.0, low=49.0, close=50.0, volume=1e3), **values)

    rows += [
        bad(dt.date(2021, 1, 5), ticker="ZINF", close=INF),  # was high_low_inconsistent
        bad(dt.date(2021, 1, 5), ticker="ZNEG", open=-INF),
        bad(dt.date(2021, 1, 5), ticker="ZVOL", volume=INF),  # was kept, then broke spline_tokens
        bad(dt.date(2021, 1, 6), ticker="ZNAN", close=float("nan")),
        bad(dt.date(2021, 1, 7)),  # repeats AAA 2021-01-07: the later copy in the file goes
        bad(SATURDAY),  # after Friday's close: Monday's partition reads it
        bad(FUTURE),  # after today: reported, and no empty partitions up to today
        bad(BEFORE),  # before KP_START_DATE: reported
    ]
    return sorted(rows, key=lambda r: r["date"], reverse=True)  # newest first: sorted, not quarantined
