"""The real CLI in a subprocess with its own warehouse and Dagster instance (ci profile), a hostile bars file, and
the one-line error every refused input must be."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline_tests.helpers import ROOT

FIRST, LAST = dt.date(2021, 1, 4), dt.date(2021, 1, 29)  # a Monday and a Friday
SATURDAY, MONDAY = dt.date(2021, 1, 30), dt.date(2021, 2, 1)
FUTURE = dt.date(2030, 1, 2)
BEFORE = dt.date(2020, 12, 31)  # before KP_START_DATE
TICKERS = ("AAA", "BRK/B", "ÆØÅ")
INF = float("inf")


def cli_env(tmp_path: Path, source: str | None, path: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    # The code under test, whichever checkout the venv's editable install points at.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    home = tmp_path / "dagster_home"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env.update(
        KP_PROFILE="ci",
        KP_WAREHOUSE=str(tmp_path / "warehouse"),
        DAGSTER_HOME=str(home),
        KP_START_DATE="2021-01-01",
        KP_END_DATE="2021-12-31",
    )
    if source:
        env.update(KP_SOURCE=source, KP_SOURCE_PATH=str(path))
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
