"""Hostile input files through the real CLI (``python -m kinematic_pipeline``, ci profile, own warehouse
and Dagster instance): every row the file holds is kept, quarantined with a reason, or reported out of
range, and the totals add up to the file's rows; an unreadable file or a bad argument is one line on
stderr (file, row, column, hint), never a traceback unless ``--debug``.

The one-line errors run the CLI's ``main`` in this process (``run_cli_in_process``: no cold Python and Dagster
start each); the hostile files, ``--debug``'s traceback, a broken pipe and one one-line error after a cold Dagster
load go through a process of their own (``run_cli``). The two runs that materialize take about 9 s each on the
2-core machine.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.warehouse import Warehouse
from kinematic_pipeline_tests.helpers.cli import (
    FIRST,
    MONDAY,
    assert_one_line_error,
    cli_env,
    hostile_rows,
    last_line,
    run_cli,
    run_cli_in_process,
)

EXPECTED_QUARANTINE = {"non_finite_value": 3, "missing_value": 1, "duplicate_key": 1, "non_trading_day": 1}
EXPECTED_OUT_OF_RANGE = {"before_range": 1, "future_date": 1}


def _warehouse_counts(tmp_path: Path) -> tuple[int, dict[str, int], int]:
    wh = Warehouse(tmp_path / "warehouse")
    days = wh.shard_days("raw_ohlcv")
    kept = pl.read_parquet([wh.shard("raw_ohlcv", d) for d in days])
    quarantine = pl.read_parquet([p for p in (wh.shard("quarantine", d) for d in days) if p.exists()])
    reasons = dict(quarantine.group_by("reason").len().iter_rows())
    return kept.height, reasons, len(days)


def _printed_totals(stdout: str) -> tuple[int, int, int, int]:
    line = next(line for line in stdout.splitlines() if line.startswith("raw_ohlcv rows:"))
    kept, quarantined = (int(re.search(rf"{w} ([\d,]+)", line)[1].replace(",", "")) for w in ("kept", "quarantined"))
    outside = re.search(r"out of range ([\d,]+)", line)
    total = int(re.search(r"= ([\d,]+) rows in the source", line)[1].replace(",", ""))
    return kept, quarantined, int(outside[1]) if outside else 0, total


def _check_hostile_run(proc, tmp_path: Path, file_rows: int) -> None:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    kept, reasons, shards = _warehouse_counts(tmp_path)
    assert reasons == EXPECTED_QUARANTINE  # no unsorted_date, no high_low_inconsistent for an inf
    printed = _printed_totals(proc.stdout)
    assert printed == (kept, sum(reasons.values()), sum(EXPECTED_OUT_OF_RANGE.values()), file_rows)
    assert kept + sum(reasons.values()) + sum(EXPECTED_OUT_OF_RANGE.values()) == file_rows
    # The Saturday bar is read by Monday's partition; nothing is written up to today for the 2030 bar.
    assert shards == len(trading_days(FIRST, MONDAY))
    assert "future_date" in proc.stdout and "out of (ticker, date) order" in proc.stdout


@pytest.mark.slow  # ~30 s: the nightly lane (the fast lane's 8 minutes are spent)
def test_hostile_csv_every_row_is_kept_quarantined_or_reported(tmp_path):
    path = tmp_path / "bars.csv"
    frame = pl.DataFrame(hostile_rows())
    frame.write_csv(path)
    proc = run_cli(tmp_path, "materialize", "--select", "raw_ohlcv, group:ingest", source="csv", path=path)
    _check_hostile_run(proc, tmp_path, frame.height)


@pytest.mark.slow  # ~30 s: the nightly lane (the fast lane's 8 minutes are spent)
def test_hostile_parquet_with_text_dates_and_a_run_killed_before(tmp_path):
    import dagster as dg
    from dagster._core.storage.dagster_run import DagsterRun

    from kinematic_pipeline.orchestration.runs import HOST_TAG, PID_TAG

    path = tmp_path / "bars.parquet"
    frame = pl.DataFrame(hostile_rows()).with_columns(pl.col("date").cast(pl.String))  # ISO text dates
    frame.write_parquet(path)
    # A run whose process was SIGKILLed stays STARTED in the instance: the next CLI start marks it failed.
    gone = subprocess.Popen(["true"])
    gone.wait()
    env = cli_env(tmp_path, None, None)
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        orphan = instance.add_run(
            DagsterRun(
                job_name="__ephemeral_asset_job__",
                status=dg.DagsterRunStatus.STARTED,
                tags={PID_TAG: str(gone.pid), HOST_TAG: socket.gethostname()},
            )
        )
    proc = run_cli(tmp_path, "materialize", "--select", "raw_ohlcv or group:ingest", source="parquet", path=path)
    _check_hostile_run(proc, tmp_path, frame.height)
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        assert instance.get_run_by_id(orphan.run_id).status == dg.DagsterRunStatus.FAILURE
        ours = [r for r in instance.get_runs() if r.run_id != orphan.run_id]
        assert ours and all(r.tags.get(PID_TAG) for r in ours)
    assert f"marked run {orphan.run_id} failed" in proc.stderr


def _write(tmp_path: Path, name: str, content: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


HEADER = b"ticker,date,open,high,low,close,volume\n"
GOOD = b"AAA,2021-03-01,1,2,0.5,1.5,10\n"


def _truncated_parquet(tmp_path: Path) -> Path:
    whole = tmp_path / "whole.parquet"
    pl.DataFrame(hostile_rows()).write_parquet(whole)
    return _write(tmp_path, "truncated.parquet", whole.read_bytes()[:-100])


def _null_date_parquet(tmp_path: Path) -> Path:
    path = tmp_path / "nulldate.parquet"
    frame = pl.DataFrame(hostile_rows()[:3]).with_columns(
        pl.when(pl.int_range(pl.len()) == 1).then(None).otherwise(pl.col("date")).alias("date")
    )
    frame.write_parquet(path)
    return path


UNREADABLE = {
    "empty_csv": ("csv", lambda p: _write(p, "empty.csv", b""), ("empty.csv", "empty")),
    "binary_garbage": ("csv", lambda p: _write(p, "garbage.csv", bytes(range(256)) * 8), ("garbage.csv", "not a CSV")),
    "truncated_parquet": ("parquet", _truncated_parquet, ("truncated.parquet", "not a readable Parquet file")),
    "unquoted_thousands": (
        "csv",
        lambda p: _write(p, "comma.csv", HEADER + GOOD + b"AAA,2021-03-02,1,2,0.5,1.5,1,000\n"),
        ("comma.csv", "row 3", "8 fields", "Hint", "1,000"),
    ),
    "date_with_junk": (
        "csv",
        lambda p: _write(p, "junk.csv", HEADER + GOOD + b"AAA,2021-01-13junk,1,2,0.5,1.5,10\n"),
        ("junk.csv", "row 3", "column 'date'", "'2021-01-13junk'", "Hint"),
    ),
    "parquet_null_date": ("parquet", _null_date_parquet, ("nulldate.parquet", "row 2", "column 'date'", "Hint")),
}


@pytest.mark.parametrize("case", sorted(UNREADABLE))
def test_an_unreadable_file_is_one_line_naming_it(tmp_path, capfd, case):
    fmt, make, fragments = UNREADABLE[case]
    path = make(tmp_path)
    proc = run_cli_in_process(capfd, tmp_path, "materialize", "--select", "raw_ohlcv", source=fmt, path=path)
    assert proc.returncode == 1
    assert_one_line_error(proc, str(path), *fragments)
    assert not (tmp_path / "warehouse" / "raw_ohlcv").exists()


def test_debug_shows_the_traceback(tmp_path):
    path = _write(tmp_path, "empty.csv", b"")
    proc = run_cli(tmp_path, "--debug", "materialize", source="csv", path=path)
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "empty.csv" in proc.stderr


@pytest.mark.slow
def test_an_unknown_asset_in_select_is_one_line(tmp_path):
    """Through the real entry point, after a cold Dagster load: the error is all stderr holds."""
    path = _write(tmp_path, "ok.csv", HEADER + GOOD)
    proc = run_cli(tmp_path, "materialize", "--select", "raw_ohlcv,nope", source="csv", path=path)
    assert_one_line_error(proc, "--select 'raw_ohlcv,nope'", "Hint")
    assert proc.returncode == 1 and proc.stderr.splitlines() == [last_line(proc)], proc.stderr


def test_a_fold_with_no_test_day_is_refused_before_any_run(tmp_path, capfd):
    """The ci profile's folds test 2022H1 and 2022H2; data ending 2021-12-31 leave both without a test day: the whole
    DAG is refused before its first run, naming the settings; a selection that tests no fold (ingest) runs."""
    path = _write(tmp_path, "ok.csv", HEADER + GOOD)
    proc = run_cli_in_process(capfd, tmp_path, "materialize", source="csv", path=path)
    assert_one_line_error(proc, "before the test period of fold 2022H1 (tests from 2022-01-03), 2022H2", "KP_END_DATE")
    assert "KP_FOLDS" in last_line(proc) and "materialize raw_ohlcv" not in proc.stdout
    assert not (tmp_path / "warehouse" / "raw_ohlcv").exists()
    ingest = run_cli_in_process(capfd, tmp_path, "materialize", "--select", "raw_ohlcv", source="csv", path=path)
    assert ingest.returncode == 0, ingest.stdout + ingest.stderr


@pytest.mark.parametrize(
    "command", [["lineage", "--model", "splinegpt", "--tau", "0.01", "--ticker", "NVDA"], ["report"], ["info"]]
)
def test_read_only_commands_do_not_create_a_missing_warehouse(tmp_path, capfd, command):
    proc = run_cli_in_process(capfd, tmp_path, *command)
    assert_one_line_error(proc, f"no warehouse at {tmp_path / 'warehouse'}")
    assert not (tmp_path / "warehouse").exists()


@pytest.mark.parametrize("ticker", ["BRK/B", "BRK B", "ÆØÅ"])
def test_lineage_takes_any_ticker_and_a_catalog_error_is_one_line(tmp_path, capfd, ticker):
    import duckdb

    (tmp_path / "warehouse").mkdir()
    duckdb.connect(str(tmp_path / "warehouse" / "catalog.duckdb")).close()  # a catalog without the report's views
    command = ["lineage", "--model", "splinegpt", "--tau", "0.01", "--ticker", ticker]
    # one chain: the catalog's views
    proc = run_cli_in_process(capfd, tmp_path, *command, "--fold", "2022H1", "--seed", "1234")
    assert_one_line_error(proc, "catalog.duckdb", "backtests", "Hint")
    assert "not a ticker" not in proc.stderr
    pooled = run_cli_in_process(capfd, tmp_path, *command)  # the report's pooled record first: none yet
    assert_one_line_error(pooled, "holds no pooled_backtests", "materialize pooled_backtests")


@pytest.mark.parametrize(
    ("typed", "dagster"),
    [
        ("raw_ohlcv", "key:raw_ohlcv"),
        ("raw_ohlcv,spline_tokens", "(key:raw_ohlcv) or (key:spline_tokens)"),
        ("raw_ohlcv or labels", "key:raw_ohlcv or key:labels"),
        ("+spline_tokens", "+key:spline_tokens"),
        ("group:ingest", "group:ingest"),
        ('key:"raw_ohlcv"', 'key:"raw_ohlcv"'),
        ("raw_ohlcv and not labels", "key:raw_ohlcv and not key:labels"),
        ("*spline_tokens", "*spline_tokens"),  # Dagster's own syntax, unchanged
        ("spline_tokens*", "spline_tokens*"),
        ("+spline_tokens+", "+key:spline_tokens+"),
    ],
)
def test_select_takes_what_a_user_types(typed, dagster):
    from kinematic_pipeline.orchestration.plan import normalize_selection

    assert normalize_selection(typed) == dagster


def test_a_reader_that_leaves_early_is_not_an_error(tmp_path):
    """`python -m kinematic_pipeline report | head`: the report is longer than a pipe's buffer, head exits after a
    few lines, and the writer's broken pipe ends the command quietly with status 0 (it printed "error: [Errno 32]
    Broken pipe" and exited 1, which failed `set -o pipefail` scripts)."""
    code = (
        "import sys\n"
        "from kinematic_pipeline import cli\n"
        "def flood(args):\n"
        "    for _ in range(20000):\n"
        "        print('a line of the report ' * 4)\n"
        "    return 0\n"
        "cli._run = flood\n"
        "sys.exit(cli.main(['report']))\n"
    )
    out = subprocess.run(
        ["bash", "-o", "pipefail", "-c", f'{sys.executable} -c "$CODE" | head -2 > /dev/null'],
        env={**os.environ, "CODE": code},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "Broken pipe" not in out.stderr and "Exception ignored" not in out.stderr, out.stderr


def test_dagsters_star_syntax_selects_what_dagster_says_and_a_starred_typo_is_named(tmp_path):
    from kinematic_pipeline.config import load_settings
    from kinematic_pipeline.definitions import build_definitions
    from kinematic_pipeline.orchestration.plan import normalize_selection, plan_runs

    defs = build_definitions(load_settings("ci", warehouse=tmp_path / "wh", env={}))
    upstream = {k.to_user_string() for run in plan_runs(defs, normalize_selection("*spline_tokens")) for k in run}
    assert {"raw_ohlcv", "spline_tokens"} <= upstream and "splinegpt_foundation" not in upstream
    downstream = {k.to_user_string() for run in plan_runs(defs, normalize_selection("spline_tokens*")) for k in run}
    assert {"spline_tokens", "spline_window_store", "splinegpt_foundation", "report"} <= downstream
    assert "raw_ohlcv" not in downstream
    with pytest.raises(ValueError, match="no asset named spline_tokes"):
        plan_runs(defs, normalize_selection("*spline_tokes"), "*spline_tokes")


def test_info_prints_the_settings_as_a_tree(tmp_path):
    from kinematic_pipeline.cli import settings_tree
    from kinematic_pipeline.config import load_settings

    tree = settings_tree(load_settings("ci", warehouse=tmp_path, env={})).splitlines()
    assert tree[0] == "settings:" and f"  warehouse: {tmp_path}" in tree
    assert "  train:" in tree and "    seeds: 1234, 1235" in tree and "    taus: 0.0025, 0.005, 0.01, 0.02" in tree
    assert not any("Settings(" in line or "TrainConfig(" in line for line in tree)


@pytest.mark.parametrize("variable, value", [("KP_START_DATE", "1970-01-02"), ("KP_END_DATE", "2999-12-31")])
def test_a_date_outside_the_calendar_is_one_line_naming_its_setting(tmp_path, capfd, variable, value):
    env = {variable: value}  # over the test's own dates
    proc = run_cli_in_process(capfd, tmp_path, "materialize", "--select", "raw_ohlcv", env=env)
    assert_one_line_error(proc, f"{variable}={value} is outside the NYSE calendar", f"set {variable} inside it")
    assert not (tmp_path / "warehouse").exists()
