"""A nightly tick killed (SIGKILL) in the middle of writing a shard: DuckDB and the training loader see
no partial shard, only the complete ones (old or new), and the next run repairs the warehouse to the
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
from kinematic_pipeline.orchestration.schedules import execute_run_requests
from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv
from kinematic_pipeline.stages.labels import materialize_labels
from kinematic_pipeline.stages.tokenize import materialize_tokens
from kinematic_pipeline.storage import TOKEN_ASSETS, Warehouse, file_sha256, query
from kinematic_pipeline.training.data import WindowStream, list_shards
from kinematic_pipeline.variants import VARIANTS
from kinematic_pipeline.windows import WindowNormalizer

ROOT = Path(__file__).resolve().parents[1]
DAY, PREVIOUS = dt.date(2021, 4, 1), dt.date(2021, 3, 31)
HISTORY_START = "2020-10-01"
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}

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
from kinematic_pipeline.orchestration.schedules import execute_run_requests

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


def _partial(folder: Path, day: dt.date) -> Path:
    (tmp,) = folder.glob(f".{day}.parquet.*.tmp")
    with pytest.raises(Exception):  # noqa: B017 - whatever the reader raises: the bytes are not a Parquet file
        pl.read_parquet(tmp)
    return tmp


def _visible_windows(settings, asset: str) -> tuple[int, dt.date]:
    """Rows and last date DuckDB's catalog view shows over the asset's ``*.parquet`` shards."""
    row = query(settings.warehouse, f"SELECT count(*) AS n, max(date) AS last FROM {asset}").row(0)
    return int(row[0]), row[1]


def _streamed(settings, tau: float | None = None) -> int:
    """Windows the training loader streams from spline_tokens (with labels of ``tau`` when given)."""
    shards = list_shards(settings, "spline_tokens", with_labels=tau is not None)
    stream = WindowStream(
        shards,
        WindowNormalizer(VARIANTS["patchtst"], None),  # raw channels: no corpus_stats needed
        batch_size=256,
        shuffle=False,
        buffer_windows=1024,
        seed=0,
        tau=tau,
    )
    return sum(len(batch[0] if tau is not None else batch) for batch in stream)


@pytest.mark.e2e  # kills a real writer process mid-write; run in CI with -m e2e
def test_a_tick_killed_mid_write_leaves_no_partial_shard_and_the_next_run_repairs_it(history, tmp_path):
    settings, defs = history
    wh = settings.warehouse
    # What an uninterrupted tick writes: the same tick on a copy of the warehouse.
    clean = tmp_path / "clean"
    shutil.copytree(wh, clean)
    clean_defs = build_definitions(dataclasses.replace(settings, warehouse=clean))
    instance = dg.DagsterInstance.ephemeral()
    assert all(r.success for r in execute_run_requests(clean_defs, _tick_requests(defs, DAY), instance, QUIET))
    shards = [*((a, DAY) for a in ("raw_ohlcv", *TOKEN_ASSETS)), ("labels", PREVIOUS)]
    rels = [Warehouse(clean).shard(a, d).relative_to(clean) for a, d in shards]
    expected = {rel: file_sha256(clean / rel) for rel in rels}
    rows_before, last_before = _visible_windows(settings, "spline_tokens")
    streamed_before = _streamed(settings)
    old_labels = file_sha256(Warehouse(wh).shard("labels", PREVIOUS))

    # 1. Killed while writing a new shard (spline_tokens of DAY): it does not exist, only its partial temp file.
    _kill_mid_write(f"spline_tokens/.{DAY}.parquet.", tmp_path / "marker-1")
    _partial(wh / "spline_tokens", DAY)
    assert not Warehouse(wh).shard("spline_tokens", DAY).exists()
    assert _visible_windows(settings, "spline_tokens") == (rows_before, last_before)  # DuckDB: the old days only
    assert DAY not in [s.day for s in list_shards(settings, "spline_tokens")]
    assert _streamed(settings) == streamed_before  # the loader streams every complete shard, nothing more

    # 2. The next tick is killed while rewriting an existing shard (labels of PREVIOUS, now with returns):
    #    its first run repaired DAY's shards; the old labels shard stays whole and readable.
    _kill_mid_write(f"labels/.{PREVIOUS}.parquet.", tmp_path / "marker-2")
    _partial(wh / "labels", PREVIOUS)
    assert not list((wh / "spline_tokens").glob(".*.tmp"))  # the stale temp file of step 1 is gone
    assert file_sha256(Warehouse(wh).shard("spline_tokens", DAY)) == expected[f"spline_tokens/{DAY}.parquet"]
    assert file_sha256(Warehouse(wh).shard("labels", PREVIOUS)) == old_labels
    label_manifests = pl.read_parquet(list((wh / "manifests/labels").glob("*.parquet")))
    assert _visible_windows(settings, "labels") == (label_manifests["windows"].sum(), PREVIOUS)
    # Fine-tuning reads labels up to train_end; DAY's labels wait for the next session, so stop before it.
    until_previous = dataclasses.replace(settings, data=dataclasses.replace(settings.data, train_end=PREVIOUS))
    assert (
        _streamed(until_previous, tau=0.01) == label_manifests["known"].sum() > 0
    )  # the labelled windows of the complete (old) shards

    # 3. The next run repairs everything to the bytes of the uninterrupted tick.
    assert all(r.success for r in execute_run_requests(defs, _tick_requests(defs, DAY), instance, QUIET))
    assert {rel: file_sha256(wh / rel) for rel in expected} == expected
    assert not [p for p in wh.rglob(".*.tmp")]
    for asset in (*TOKEN_ASSETS, "labels"):
        for shard in (wh / asset).glob("*.parquet"):  # every shard matches its manifest
            assert file_sha256(shard) == pl.read_parquet(Warehouse(wh).manifest(asset, shard.stem))["content_hash"][0]
    assert _visible_windows(settings, "spline_tokens")[1] == DAY
    assert _streamed(settings) > streamed_before
