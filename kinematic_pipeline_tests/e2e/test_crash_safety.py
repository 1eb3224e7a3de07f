"""A nightly tick killed (SIGKILL) in the middle of writing a shard: DuckDB and the training loader see
no partial shard (nor does the window store training draws from), only the complete ones (old or new), and the next run repairs the warehouse to the
bytes an uninterrupted run writes."""

from __future__ import annotations

import dataclasses
import datetime as dt
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from zoneinfo import ZoneInfo

import dagster as dg
import polars as pl
import pytest

from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.config import load_settings
from kinematic_pipeline.definitions import build_definitions
from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv
from kinematic_pipeline.stages.labels import materialize_labels
from kinematic_pipeline.stages.tokenize import materialize_tokens
from kinematic_pipeline.stages.window_store import materialize_window_store
from kinematic_pipeline.tasks.buy_sell_hold import BuySellHold
from kinematic_pipeline.tokenizations import SPLINE, TOKENIZATIONS
from kinematic_pipeline.training.data import store_labels
from kinematic_pipeline.warehouse import Warehouse
from kinematic_pipeline.warehouse.atomic import file_sha256
from kinematic_pipeline.warehouse.catalog import query
from kinematic_pipeline.warehouse.layout import STAGING_DIR
from kinematic_pipeline.window_store import open_store, training_shard_days
from kinematic_pipeline_tests.conftest import execute_run_requests
from kinematic_pipeline_tests.helpers import ROOT

DAY, PREVIOUS = dt.date(2021, 4, 1), dt.date(2021, 3, 31)
HISTORY_START = "2020-10-01"
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
TOKEN_ASSETS = tuple(t.tokens_asset for t in TOKENIZATIONS.values())

# The nightly tick of DAY, run by the schedule's code path in a child process whose Parquet writer stalls
# half-way through one chosen shard (as a slow disk would), so that the parent can kill it right there.
CHILD = """
import datetime as dt, io, os, sys, time
from zoneinfo import ZoneInfo
import polars as pl

victim, marker, day = sys.argv[1], sys.argv[2], dt.date.fromisoformat(sys.argv[3])
write_parquet = pl.DataFrame.write_parquet

def stalling_write_parquet(self, file, *args, **kwargs):
    if victim not in str(file):
        return write_parquet(self, file, *args, **kwargs)
    buffer = io.BytesIO()
    write_parquet(self, buffer, *args, **kwargs)
    with open(file, "wb") as fh:
        fh.write(buffer.getvalue()[: buffer.tell() // 2])  # half of the shard's bytes are on disk ...
        fh.flush()
        os.fsync(fh.fileno())
    open(marker, "w").close()
    time.sleep(600)  # ... when SIGKILL arrives

pl.DataFrame.write_parquet = stalling_write_parquet

import dagster as dg
from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.config import load_settings
from kinematic_pipeline.definitions import build_definitions
from kinematic_pipeline_tests.conftest import execute_run_requests

defs = build_definitions(load_settings())
schedule = defs.get_repository_def().get_schedule_def("nightly_tick")
when = dt.datetime(day.year, day.month, day.day, 18, tzinfo=ZoneInfo("America/New_York"))
tick = schedule.evaluate_tick(dg.build_schedule_context(scheduled_execution_time=when, repository_def=defs.get_repository_def()))
execute_run_requests(defs, tick.run_requests, dg.DagsterInstance.ephemeral(), {"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
sys.exit("the tick finished: the victim shard was never written")
"""


@pytest.fixture
def history(tmp_path, monkeypatch):
    """ci settings through the environment (the child inherits them) and half a year of history."""
    for var in ("KP_SOURCE", "KP_SOURCE_PATH", "KP_DROP_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KP_PROFILE", "ci")
    monkeypatch.setenv("KP_START_DATE", HISTORY_START)  # a season before the ticks: windows with known labels
    monkeypatch.setenv("KP_WAREHOUSE", str(tmp_path / "warehouse"))
    monkeypatch.setenv("KP_END_DATE", "2021-04-30")
    settings = load_settings()
    days = trading_days(settings.data.start_date, PREVIOUS)  # written by the stages directly: faster
    materialize_raw_ohlcv(settings, days, progress=False)
    materialize_tokens(settings, days, progress=False)
    materialize_labels(settings, days, progress=False)
    defs = build_definitions(settings)
    return settings, defs


def _tick_requests(defs: dg.Definitions, day: dt.date) -> list[dg.RunRequest]:
    when = dt.datetime(day.year, day.month, day.day, 18, tzinfo=ZoneInfo("America/New_York"))
    context = dg.build_schedule_context(scheduled_execution_time=when, repository_def=defs.get_repository_def())
    return list(defs.get_repository_def().get_schedule_def("nightly_tick").evaluate_tick(context).run_requests)


def _kill_mid_write(victim: str, marker: Path) -> None:
    """Run the tick in a child and SIGKILL it once it is half-way through writing ``victim``."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, victim, str(marker), DAY.isoformat()], cwd=ROOT)
    try:
        deadline = time.monotonic() + 240
        while not marker.exists():
            assert child.poll() is None, f"the tick ended (exit {child.returncode}) before writing {victim}"
            assert time.monotonic() < deadline, f"the tick never reached {victim}"
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL


def _partial_in_staging(folder: Path, day: dt.date, name: str) -> Path:
    """The half-written shard of a day unit in its staging folder, with no manifest beside it."""
    (staged,) = (folder / STAGING_DIR).glob(f"{day}.*/{name}")
    with pytest.raises(Exception):  # noqa: B017 - whatever the reader raises: the bytes are not a Parquet file
        pl.read_parquet(staged)
    assert not (staged.parent / "manifest.parquet").exists()
    return staged


def _visible_windows(settings, asset: str) -> tuple[int, dt.date]:
    """Rows and last date DuckDB's catalog view shows over the asset's ``*.parquet`` shards."""
    row = query(settings.warehouse, f"SELECT count(*) AS n, max(date) AS last FROM {asset}").row(0)
    return int(row[0]), row[1]


def _streamed(settings, tau: float | None = None) -> int:
    """Windows training can draw from spline_tokens (with a known label of ``tau`` when given): the window
    store built from the complete shards."""
    materialize_window_store(settings, SPLINE, progress=False)
    store = open_store(settings, SPLINE)
    if tau is None:
        return store.rows.height
    return int((store_labels(settings, store, BuySellHold(tau))[0] >= 0).sum())


@pytest.mark.e2e  # kills a real writer process mid-write; run in CI with -m e2e
def test_a_tick_killed_mid_write_leaves_no_partial_shard_and_the_next_run_repairs_it(history, tmp_path):
    settings, defs = history
    wh = settings.warehouse.root
    # What an uninterrupted tick writes: the same tick on a copy of the warehouse.
    clean = tmp_path / "clean"
    shutil.copytree(wh, clean)
    clean_defs = build_definitions(dataclasses.replace(settings, warehouse=clean))
    instance = dg.DagsterInstance.ephemeral()
    assert all(r.success for r in execute_run_requests(clean_defs, _tick_requests(defs, DAY), instance, QUIET))
    shards = [*((a, DAY) for a in ("raw_ohlcv", *TOKEN_ASSETS)), ("labels", PREVIOUS)]
    rels = [Warehouse(clean).shard(a, d).relative_to(clean).as_posix() for a, d in shards]
    expected = {rel: file_sha256(clean / rel) for rel in rels}
    rows_before, last_before = _visible_windows(settings, "spline_tokens")
    streamed_before = _streamed(settings)
    old_labels = file_sha256(Warehouse(wh).shard("labels", PREVIOUS))

    # 1. Killed while writing a new day unit (spline_tokens of DAY): it does not exist, only its partial shard in
    #    the unit's staging folder (shard and manifest are swapped in together, or not at all).
    _kill_mid_write(f"spline_tokens/{STAGING_DIR}/{DAY}.", tmp_path / "marker-1")
    _partial_in_staging(wh / "spline_tokens", DAY, "tokens.parquet")
    assert not Warehouse(wh).shard("spline_tokens", DAY).exists()
    assert _visible_windows(settings, "spline_tokens") == (rows_before, last_before)  # DuckDB: the old days only
    assert DAY not in training_shard_days(settings, "spline_tokens")[0]
    assert _streamed(settings) == streamed_before  # the loader streams every complete shard, nothing more

    # 2. The next tick is killed while rewriting an existing shard (labels of PREVIOUS, now with returns):
    #    its first run repaired DAY's shards; the old labels shard stays whole and readable.
    _kill_mid_write(f"labels/{STAGING_DIR}/{PREVIOUS}.", tmp_path / "marker-2")
    _partial_in_staging(wh / "labels", PREVIOUS, "labels.parquet")
    assert not list((wh / "spline_tokens" / STAGING_DIR).glob(f"{DAY}.*"))  # the stale staging of step 1 is gone
    tokens_rel = Warehouse(wh).shard("spline_tokens", DAY).relative_to(wh).as_posix()
    assert file_sha256(wh / tokens_rel) == expected[tokens_rel]
    assert file_sha256(Warehouse(wh).shard("labels", PREVIOUS)) == old_labels
    label_manifests = pl.read_parquet([Warehouse(wh).manifest("labels", d) for d in Warehouse(wh).shard_days("labels")])
    assert _visible_windows(settings, "labels") == (label_manifests["windows"].sum(), PREVIOUS)
    # Fine-tuning reads labels up to train_end; DAY's labels wait for the next session, so stop before it.
    until_previous = dataclasses.replace(settings, split=dataclasses.replace(settings.split, train_end=PREVIOUS))
    streamed = _streamed(until_previous, tau=0.01)
    store_days = open_store(until_previous, SPLINE).days["date"].implode()  # the cut's days (its purge)
    in_store = label_manifests.filter(pl.col("partition_date").is_in(store_days))
    assert streamed == in_store["known"].sum() > 0  # the labelled windows of the complete (old) shards

    # 3. The next run repairs everything to the bytes of the uninterrupted tick.
    assert all(r.success for r in execute_run_requests(defs, _tick_requests(defs, DAY), instance, QUIET))
    assert {rel: file_sha256(wh / rel) for rel in expected} == expected
    assert not [p for p in wh.rglob(".*.tmp")]
    for asset in (*TOKEN_ASSETS, "labels"):
        for day in Warehouse(wh).shard_days(asset):  # every shard matches its manifest
            assert file_sha256(Warehouse(wh).shard(asset, day)) == Warehouse(wh).content_hash(asset, day)
    assert _visible_windows(settings, "spline_tokens")[1] == DAY
    assert _streamed(settings) > streamed_before


# --- a re-ingest killed mid-way: every day is one unit (bars, quarantine, manifest) and the catalog is right --

REINGEST_START, REINGEST_END = dt.date(2021, 3, 1), dt.date(2021, 4, 26)  # 40 sessions
REINGEST_CHILD = """
import datetime as dt, sys, time
from pathlib import Path
import kinematic_pipeline.warehouse.atomic as atomic_files
from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.config import load_settings
from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv

source_path, warehouse, marker, victim, when = sys.argv[1:6]
swap_in, calls = atomic_files._swap_in, []

def stalling_swap_in(new, final):  # the day's unit is staged whole: stall right before or after its swap
    calls.append(final)
    if len(calls) == int(victim) and when == "before_swap":
        Path(marker).touch(); time.sleep(600)
    swap_in(new, final)
    if len(calls) == int(victim) and when == "after_swap":
        Path(marker).touch(); time.sleep(600)

atomic_files._swap_in = stalling_swap_in
start, end = dt.date.fromisoformat(sys.argv[6]), dt.date.fromisoformat(sys.argv[7])
settings = load_settings("ci", source="parquet", source_path=source_path, warehouse=warehouse,
                         start_date=start, end_date=end, env={})
materialize_raw_ohlcv(settings, trading_days(start, end), progress=False)
sys.exit("the re-ingest finished: the victim day was never swapped in")
"""


def _reingest_bars(version: int) -> pl.DataFrame:
    """Bars of the re-ingest test: each version scales prices differently and spoils other rows (NaN close:
    quarantined), so that an old and a new day differ in the kept bars, the quarantine and the manifest."""
    from kinematic_pipeline_tests.conftest import _bars

    bars = _bars().filter(pl.col("date").is_between(REINGEST_START, REINGEST_END))
    spoiled = (pl.int_range(pl.len()) % 7) == version  # about one row in seven, another set per version
    return bars.with_columns(
        *[(pl.col(c) * (1 + 0.01 * version)).alias(c) for c in ("open", "high", "low", "close")],
    ).with_columns(pl.when(spoiled).then(float("nan")).otherwise(pl.col("close")).alias("close"))


def _reingest_settings(source: Path, warehouse: Path):
    return load_settings(
        "ci",
        source="parquet",
        source_path=str(source),
        warehouse=warehouse,
        start_date=REINGEST_START,
        end_date=REINGEST_END,
        env={},
    )


def _assert_catalog_matches_the_files(wh: Warehouse, days: list[dt.date]) -> None:
    """Per day kept + quarantined = read (from the files), and every view counts exactly the day units' files."""
    assert wh.shard_days("raw_ohlcv") == wh.manifest_days("raw_ohlcv") == days
    kept = quarantined = 0
    for day in days:
        manifest = pl.read_parquet(wh.manifest("raw_ohlcv", day)).row(0, named=True)
        shard, q_path = wh.shard("raw_ohlcv", day), wh.shard("quarantine", day)
        n_kept = pl.read_parquet(shard).height
        n_quarantined = pl.read_parquet(q_path).height if q_path.exists() else 0
        assert n_kept + n_quarantined == manifest["rows_read"], day
        assert (n_kept, n_quarantined) == (manifest["rows_kept"], manifest["rows_quarantined"]), day
        assert file_sha256(shard) == manifest["content_hash"], day  # the manifest vouches for its own shard
        assert manifest["quarantine_hash"] == (file_sha256(q_path) if q_path.exists() else ""), day
        kept, quarantined = kept + n_kept, quarantined + n_quarantined
    assert wh.query("SELECT count(*) FROM raw_ohlcv").item() == kept
    assert wh.query("SELECT count(*) FROM quarantine").item() == quarantined > 0
    view = wh.query("SELECT count(*) AS n, sum(rows_kept) AS k, sum(rows_quarantined) AS q FROM raw_ohlcv_manifest")
    assert view.row(0) == (len(days), kept, quarantined)


def _kill_ingest_at_day_17(source: Path, warehouse: Path, marker: Path, when: str) -> None:
    """Ingest ``source`` in a child and SIGKILL it just before or just after its 17th day's swap."""
    args = [str(source), str(warehouse), str(marker), "17", when, str(REINGEST_START), str(REINGEST_END)]
    child = subprocess.Popen([sys.executable, "-c", REINGEST_CHILD, *args], cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert child.poll() is None, f"the ingest ended (exit {child.returncode}) before its 17th day"
            assert time.monotonic() < deadline, "the ingest never reached its 17th day"
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL


@pytest.mark.e2e  # kills a real ingest process mid-way; run in CI with -m e2e
def test_a_first_ingest_killed_mid_way_shows_exactly_the_days_written(tmp_path):
    """Into an empty warehouse: the views exist before the first day lands and count every day once it has."""
    days = trading_days(REINGEST_START, REINGEST_END)
    source, wh_path = tmp_path / "bars.parquet", tmp_path / "warehouse"
    _reingest_bars(0).write_parquet(source)
    _kill_ingest_at_day_17(source, wh_path, tmp_path / "marker", "after_swap")
    wh = Warehouse(wh_path)
    _assert_catalog_matches_the_files(wh, days[:17])
    materialize_raw_ohlcv(_reingest_settings(source, wh_path), days, progress=False)
    _assert_catalog_matches_the_files(wh, days)


@pytest.mark.e2e  # kills a real ingest process mid-way; run in CI with -m e2e
@pytest.mark.parametrize("when", ["before_swap", "after_swap"])
def test_a_reingest_killed_mid_way_leaves_every_day_whole_and_the_catalog_right(tmp_path, when):
    days = trading_days(REINGEST_START, REINGEST_END)
    assert len(days) == 40
    old_source, new_source = tmp_path / "old.parquet", tmp_path / "new.parquet"
    _reingest_bars(0).write_parquet(old_source)
    _reingest_bars(1).write_parquet(new_source)
    wh_path, clean_path = tmp_path / "warehouse", tmp_path / "clean"
    materialize_raw_ohlcv(_reingest_settings(old_source, wh_path), days, progress=False)
    materialize_raw_ohlcv(_reingest_settings(new_source, clean_path), days, progress=False)  # uninterrupted
    wh, clean = Warehouse(wh_path), Warehouse(clean_path)
    old = {d: file_sha256(wh.shard("raw_ohlcv", d)) for d in days}
    new = {d: file_sha256(clean.shard("raw_ohlcv", d)) for d in days}
    assert all(old[d] != new[d] for d in days)
    _assert_catalog_matches_the_files(wh, days)

    # The re-ingest of the changed input is killed at its 17th day, with that day staged whole.
    _kill_ingest_at_day_17(new_source, wh_path, tmp_path / "marker", when)

    # Old days and new days side by side, each whole; the killed writer's staging folder holds a whole day
    # with rows (the new one before the swap, the old one after it) that no view shows.
    now = {d: file_sha256(wh.shard("raw_ohlcv", d)) for d in days}
    swapped = 17 if when == "after_swap" else 16
    assert [now[d] == new[d] for d in days] == [True] * swapped + [False] * (40 - swapped)
    assert [now[d] == old[d] for d in days] == [False] * swapped + [True] * (40 - swapped)
    (staged,) = (wh_path / "raw_ohlcv" / ".staging").iterdir()
    assert pl.read_parquet(staged / "bars.parquet").height > 0
    _assert_catalog_matches_the_files(wh, days)
    files = wh.query("SELECT DISTINCT filename FROM read_parquet('raw_ohlcv/*/*.parquet', filename = true)")
    assert not [f for f in files["filename"] if ".staging" in f]

    # The next run repairs everything: the bytes of the uninterrupted run, no staging left.
    materialize_raw_ohlcv(_reingest_settings(new_source, wh_path), days, progress=False)
    for day in days:
        for member in ("raw_ohlcv", "quarantine"):
            assert wh.shard(member, day).exists() == clean.shard(member, day).exists()
        for path, twin in [(wh.unit_dir("raw_ohlcv", day), clean.unit_dir("raw_ohlcv", day))]:
            assert {p.name: file_sha256(p) for p in path.iterdir()} == {p.name: file_sha256(p) for p in twin.iterdir()}
    assert not list((wh_path / "raw_ohlcv" / ".staging").iterdir())
    _assert_catalog_matches_the_files(wh, days)
