"""Issue 40 through the real CLI (``python -m kinematic_pipeline materialize``), on a warehouse the CLI built from a
Parquet source (four synthetic tickers, January to July 2021, the single cut of ``conftest``):

- a restated bar: the source corrects one close of a test day; raw bars, tokens and labels are re-materialized; the
  rules' predictions are refused in one line naming the features file, the restated day and the fix
  (``raw_features``) until the features are re-materialized, and then they trade the corrected close;
- a killed swap: a window-store build killed (SIGKILL) right after its swap leaves the old store in the staging
  folder; the next ``materialize`` of that store removes it and leaves the store byte for byte what a clean build
  writes.

The stage-level versions, with the failures they were, are in ``stages/test_derived_pins.py`` and
``stages/test_window_store.py``; the copied warehouse, the damaged files and the reports from stale inputs go through
the CLI on the DAG lane's warehouse (``e2e/golden``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from kinematic_pipeline.config import load_settings
from kinematic_pipeline.stages.features import read_features
from kinematic_pipeline.warehouse import RAW_OHLCV
from kinematic_pipeline_tests.conftest import CUT, END, START, _bars
from kinematic_pipeline_tests.helpers import ROOT

pytestmark = pytest.mark.e2e

RULE = "momentum_1d"
DATA = "raw_ohlcv or group:tokenize"
EVALUATED = f"raw_features or {RULE}_predictions"


def _env(folder: Path) -> dict[str, str]:
    home = folder / "dagster_home"
    home.mkdir(exist_ok=True)
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KP_", "DAGSTER_"))}
    env.update(
        DAGSTER_HOME=str(home),
        KP_PROFILE="ci",
        KP_SOURCE="parquet",
        KP_SOURCE_PATH=str(folder / "bars.parquet"),
        KP_WAREHOUSE=str(folder / "warehouse"),
        KP_START_DATE=START.isoformat(),
        KP_END_DATE=END.isoformat(),
        KP_TRAIN_END=CUT.isoformat(),
        KP_FOLDS="1",
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    )
    return env


def _materialize(folder: Path, select: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "kinematic_pipeline", "materialize", "--select", select]
    return subprocess.run(command, env=_env(folder), cwd=folder, capture_output=True, text=True, timeout=600)


def _ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]


def _settings(folder: Path):
    return load_settings(env=_env(folder))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A folder holding the source file, the warehouse the CLI built from it (bars, tokens, labels, the raw
    features, the rule's predictions, the spline window store) and its Dagster instance."""
    folder = tmp_path_factory.mktemp("cli_pins")
    _bars().write_parquet(folder / "bars.parquet")
    _ok(_materialize(folder, f"{DATA} or {EVALUATED} or spline_window_store"))
    return folder


def _copy(built: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "copy"
    shutil.copytree(built, folder, symlinks=True)  # copy2: the mtimes the verified sidecars recorded
    return folder


def test_a_restated_bar_is_refused_through_the_cli_until_the_features_are_rebuilt(built, tmp_path):
    folder = _copy(built, tmp_path)
    settings = _settings(folder)
    day = [d for d in settings.warehouse.shard_days(RAW_OHLCV) if d > CUT][3]  # a test day: the rules trade it
    ticker = read_features(settings, RULE, settings.folds[0], ("test",)).filter(pl.col("date") == day)["ticker"][0]
    bar = (pl.col("date") == day) & (pl.col("ticker") == ticker)
    before = read_features(settings, RULE, settings.folds[0], ("test",), ("close",)).filter(bar)["close"][0]
    source = pl.read_parquet(folder / "bars.parquet")  # the vendor corrects one close
    corrected = source.with_columns(pl.when(bar).then(pl.col("close") * 1.01).otherwise(pl.col("close")))
    corrected.with_columns(pl.max_horizontal("high", "close").alias("high")).write_parquet(folder / "bars.parquet")
    _ok(_materialize(folder, DATA))  # re-ingested; its tokens and labels rebuilt

    proc = _materialize(folder, f"{RULE}_predictions")
    assert proc.returncode == 1, proc.stdout[-3000:]
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("FAILED")]
    features = settings.warehouse.features_file("raw", "test")
    for fragment in (str(features), f"shard of {day}", "re-materialize raw_features"):
        assert fragment in line, (fragment, line)

    _ok(_materialize(folder, EVALUATED))  # the fix: the features, then the rule's predictions on the corrected bar
    now = read_features(settings, RULE, settings.folds[0], ("test",), ("close",)).filter(bar)["close"][0]
    assert now == pytest.approx(before * 1.01)


KILL_AFTER_SWAP = """
import os, signal, sys
from kinematic_pipeline import cli
from kinematic_pipeline.stages import window_store as stage
swap = stage.swap_in_folder
def swap_then_die(*args, **kwargs):
    swap(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)  # after the exchange, before the old store is removed
stage.swap_in_folder = swap_then_die
sys.exit(cli.main(["materialize", "--select", "spline_window_store"]))
"""


def test_the_staging_a_killed_swap_left_is_cleared_by_the_next_cli_build(built, tmp_path):
    folder = _copy(built, tmp_path)
    store = _settings(folder).warehouse.window_store_dir("spline_tokens")
    clean = {p.name: p.read_bytes() for p in sorted(store.iterdir()) if p.is_file()}
    tokens = store / "tokens.npy"
    data, st = bytearray(tokens.read_bytes()), tokens.stat()
    data[len(data) // 2] ^= 0x01  # damaged with its mtime kept: the next build rebuilds the store and swaps it in
    tokens.write_bytes(bytes(data))
    os.utime(tokens, ns=(st.st_atime_ns, st.st_mtime_ns))

    proc = subprocess.run(
        [sys.executable, "-c", KILL_AFTER_SWAP],
        env=_env(folder),
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == -signal.SIGKILL, (proc.stdout + proc.stderr)[-3000:]
    staging = store.parent / ".staging"
    (left,) = staging.glob("spline_tokens.*")  # the old, damaged store swapped out and left behind
    assert (left / "tokens.npy").exists()

    _ok(_materialize(folder, "spline_window_store"))
    assert not list(staging.glob("spline_tokens.*"))
    assert {p.name: p.read_bytes() for p in sorted(store.iterdir()) if p.is_file()} == clean
