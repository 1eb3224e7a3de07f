"""Issue 40's derived-artefact pins through the real CLI, each on a copy of the ci warehouse the DAG lane materialized
(``KP_GOLDEN_WAREHOUSE``; a copy with a Dagster instance of its own, so the lane's warehouse is never written):

- predictions re-made alone (another model's numbers in one policy's file, its backtests not re-made): the pooled
  records refuse the per-fold backtests in one line naming the predictions file and the backtests to re-make; once
  they are re-made, a ``report`` from the tables built before refuses, naming ``paper_tables``;
- a dropped seed (``KP_SEEDS=1234`` after the two-seed run): ``lineage`` refuses the records pooled for both seeds in
  one line (never a crash); ``pooled_backtests`` pools seed 1234's records only, and ``lineage`` then traces them;
- a changed membership file: one policy's universe re-drawn under ``KP_MEMBERSHIP_FILE``, the others under none: the
  verdict refuses in one line naming both files and the predictions to re-make.

The stage-level versions, with the failure each one was, are in ``stages/test_derived_pins.py``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from kinematic_pipeline.config import load_settings
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.tasks.buy_sell_hold import BuySellHold
from kinematic_pipeline.warehouse import PREDICTIONS
from kinematic_pipeline_tests.conftest import CI_FOLDS, dagster_materialize, golden_ci_settings
from kinematic_pipeline_tests.helpers.cli import read_only_mount_refused, run_read_only

pytestmark = pytest.mark.e2e
FOLD, TAU, TICKER = "2022H1", 0.01, "SYN000"
POLICY = Policy.named(CI_FOLDS, "splinegpt", 1234, BuySellHold(TAU), FOLD)
BACKTESTING = "splinegpt_backtests,splinegpt_margin_backtests"  # one multi-asset: the Dagster CLI selects it whole


@pytest.fixture
def copy(tmp_path) -> Path:
    """A copy of the ci warehouse (mtimes kept: the verified sidecars hold), with an empty Dagster instance."""
    source = golden_ci_settings().warehouse.root  # skipped without the ci warehouse, a failure under CI
    root = Path(shutil.copytree(source, tmp_path / "copy" / "warehouse", symlinks=True))
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return root


def _env(copy: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KP_MEMBERSHIP_FILE", "KP_SEEDS")}
    env.update(KP_PROFILE="ci", KP_WAREHOUSE=str(copy), DAGSTER_HOME=str(copy.parent.parent / "home"), **extra)
    return env


def _kp(copy: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "kinematic_pipeline", *args]
    return subprocess.run(command, capture_output=True, text=True, env=_env(copy, **extra), timeout=900)


def _dagster(copy: Path, select: str, partition: str, **extra: str) -> subprocess.CompletedProcess:
    command = dagster_materialize("--select", select)
    command += ["--partition", partition]
    return subprocess.run(command, capture_output=True, text=True, env=_env(copy, **extra), timeout=900)


def _refused(proc: subprocess.CompletedProcess, *fragments: str) -> str:
    """The one line the CLI printed for its refusal, holding every fragment."""
    assert proc.returncode != 0, proc.stdout[-3000:]
    lines = [x for x in proc.stderr.splitlines() if x.startswith(("FAILED", "error:"))]
    lines = lines or [x for x in proc.stderr.splitlines() if x.strip()]  # lineage prints the refusal alone
    assert len(lines) == 1, proc.stderr[-3000:]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def _ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]


def test_predictions_re_made_alone_then_a_report_from_the_tables_before_are_refused(copy):
    wh = load_settings("ci", warehouse=copy, env={}).warehouse
    predictions = wh.evaluation_file(PREDICTIONS, POLICY)
    frame = pl.read_parquet(predictions)  # another model's numbers: one row's p_buy
    frame.with_columns(
        pl.when(pl.int_range(pl.len()) == 0).then(0.9).otherwise(pl.col("p_buy")).alias("p_buy")
    ).write_parquet(predictions)
    fix = f"re-materialize splinegpt_backtests partition {POLICY.key}"
    _refused(_kp(copy, "materialize", "--select", "pooled_backtests"), str(predictions), fix)
    _ok(_dagster(copy, BACKTESTING, POLICY.key))  # the fix: the backtests swept from the predictions on disk
    _refused(_kp(copy, "materialize", "--select", "report"), "re-materialize paper_tables")


def test_a_dropped_seed_is_refused_until_pooled_again_then_traced_without_the_other(copy):
    lineage = ["lineage", "--model", "splinegpt", "--tau", str(TAU), "--ticker", TICKER]
    _refused(
        _kp(copy, *lineage, KP_SEEDS="1234"), "for other policies than this run's", "re-materialize pooled_backtests"
    )
    _ok(_kp(copy, "materialize", "--select", "pooled_backtests", KP_SEEDS="1234"))
    pooled = pl.read_parquet(load_settings("ci", warehouse=copy, env={}).warehouse.pooled_dir / "backtests.parquet")
    assert set(pooled.filter(pl.col("variant") == "splinegpt")["seed"].to_list()) == {1234}
    proc = _kp(copy, *lineage, KP_SEEDS="1234")
    _ok(proc)
    assert "seed 1234" in proc.stdout and "seed 1235" not in proc.stdout, proc.stdout[-3000:]


def test_universes_drawn_under_two_membership_files_are_refused_through_the_cli(copy, tmp_path):
    members = tmp_path / "members.csv"
    tickers = pl.read_parquet(
        load_settings("ci", warehouse=copy, env={}).warehouse.evaluation_file(PREDICTIONS, POLICY)
    )["ticker"]
    members.write_text("Symbol,Date added\n" + "".join(f"{t},2000-01-03\n" for t in sorted(set(tickers))))
    evaluated = f"splinegpt_predictions,{BACKTESTING}"  # one policy's evaluation re-made under the file
    _ok(_dagster(copy, evaluated, POLICY.key, KP_MEMBERSHIP_FILE=str(members)))
    _refused(
        _kp(copy, "materialize", "--select", "pooled_backtests or verdict"),
        "different membership files",
        str(members),
        "(none)",
        "re-materialize",
    )


def test_the_read_only_commands_answer_on_a_read_only_copy_and_write_nothing(copy, tmp_path):
    """Issue 55, item 4: ``info``, ``report`` and ``lineage`` (every file re-hashed) on a read-only mount."""
    why = read_only_mount_refused(copy)
    if why:
        pytest.skip(why)
    files = {p: p.stat().st_mtime_ns for p in copy.rglob("*") if p.is_file()}
    lineage = ["lineage", "--model", "splinegpt", "--tau", str(TAU), "--ticker", TICKER]
    for args in (["info"], ["report"], lineage):
        proc = run_read_only(copy, _env(copy), *args, cwd=tmp_path)
        _ok(proc)
        assert "Read-only file system" not in proc.stderr
    assert "every link resolves to a file with the recorded hash" in proc.stdout, proc.stdout[-2000:]
    assert {p: p.stat().st_mtime_ns for p in copy.rglob("*") if p.is_file()} == files


def test_a_membership_file_set_after_the_universes_were_drawn_is_refused_through_the_cli(copy, tmp_path):
    members = tmp_path / "members.csv"
    members.write_text("Symbol,Date added\nSYN000,2000-01-03\n")  # set after every universe was drawn under none
    _refused(
        _kp(copy, "materialize", "--select", "pooled_backtests or verdict", KP_MEMBERSHIP_FILE=str(members)),
        "drawn under membership file (none)",
        str(members),
        "re-materialize",
    )
