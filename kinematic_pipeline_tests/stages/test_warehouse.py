"""The warehouse on disk: a process killed mid-write leaves no partial shard visible; a copied warehouse reads its own files."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

import polars as pl

from kinematic_pipeline.warehouse.atomic import file_sha256, write_parquet_atomic


def test_a_copied_warehouse_reads_its_own_files_once_the_original_is_gone(tmp_path, ci_settings):
    """The catalog's views hold globs relative to the warehouse: ``cp -a`` it, delete the original, query."""
    import dataclasses
    import shutil

    from kinematic_pipeline.calendar import trading_days
    from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv
    from kinematic_pipeline.warehouse import Warehouse

    days = trading_days(dt.date(2021, 3, 1), dt.date(2021, 3, 12))
    summary = materialize_raw_ohlcv(ci_settings, days, progress=False)
    original = ci_settings.warehouse
    labels = pl.DataFrame({"ticker": ["A", "B"], "date": [days[0]] * 2})
    write_parquet_atomic(labels, original.shard("labels", days[0]))
    manifest = {"partition_date": pl.Date, "content_hash": pl.String}
    original.ensure_unit_views("labels", {"labels": {"ticker": pl.String, "date": pl.Date}, "manifest": manifest})
    views = "SELECT (SELECT count(*) FROM raw_ohlcv), (SELECT count(*) FROM raw_ohlcv_manifest), (SELECT count(*) FROM labels)"
    expected = (summary.totals["rows_kept"], len(days), 2)
    assert original.query(views).row(0) == expected

    copy = Warehouse(tmp_path / "moved" / "warehouse")
    copy.root.parent.mkdir()
    subprocess.run(["cp", "-a", str(original.root), str(copy.root)], check=True)
    shutil.rmtree(original.root)
    assert copy.query(views).row(0) == expected
    assert copy.query("SELECT count(*) FROM quarantine").item() == 0
    definitions = copy.query("SELECT sql FROM duckdb_views() WHERE NOT internal")["sql"].to_list()
    assert len(definitions) == 5 and not [sql for sql in definitions if str(original.root) in sql]
    # and the copy goes on: a re-ingest there writes there
    moved = dataclasses.replace(ci_settings, warehouse=copy.root)
    materialize_raw_ohlcv(moved, days, progress=False)
    assert not original.root.exists()
    assert copy.query(views).row(0) == expected


def test_a_day_unit_is_replaced_whole_also_where_the_kernel_cannot_exchange_two_names(tmp_path, monkeypatch):
    """renameat2(RENAME_EXCHANGE) is refused on NFS and FUSE mounts: the unit is then moved aside and replaced."""
    from kinematic_pipeline.warehouse import Warehouse
    from kinematic_pipeline.warehouse import atomic as atomic_files

    wh = Warehouse(tmp_path / "warehouse")
    day = dt.date(2021, 3, 1)
    schema = {"partition_date": pl.Date, "content_hash": pl.String, "quarantine_hash": pl.String}
    record = {"partition_date": day}
    quarantined = pl.DataFrame({"reason": ["missing_value"]})
    first = wh.write_shard(
        "raw_ohlcv", day, pl.DataFrame({"x": [1.0]}), record, schema, companions={"quarantine": quarantined}
    )
    assert first["quarantine_hash"] == file_sha256(wh.shard("quarantine", day))
    monkeypatch.setattr(atomic_files, "_exchange", lambda a, b: False)
    second = wh.write_shard(
        "raw_ohlcv", day, pl.DataFrame({"x": [2.0, 3.0]}), record, schema, companions={"quarantine": None}
    )
    assert pl.read_parquet(wh.shard("raw_ohlcv", day))["x"].to_list() == [2.0, 3.0]
    assert (
        not wh.shard("quarantine", day).exists() and second["quarantine_hash"] == ""
    )  # the old one went with its unit
    manifest = pl.read_parquet(wh.manifest("raw_ohlcv", day)).row(0, named=True)
    assert manifest["content_hash"] == second["content_hash"] == file_sha256(wh.shard("raw_ohlcv", day))
    assert wh.shard_days("raw_ohlcv") == wh.manifest_days("raw_ohlcv") == [day]
    assert not list((wh.root / "raw_ohlcv" / ".staging").iterdir())


def test_manifest_rows_read_at_once_equal_the_day_by_day_rows_in_the_order_asked(tmp_path):
    from kinematic_pipeline.warehouse import Warehouse

    wh = Warehouse(tmp_path / "warehouse")
    schema = {"partition_date": pl.Date, "content_hash": pl.String, "windows": pl.Int64}
    days = [dt.date(2021, 3, d) for d in (1, 2, 3, 4)]
    for n, day in enumerate(days):
        wh.write_shard(
            "spline_tokens", day, pl.DataFrame({"x": [float(n)] * n}), {"partition_date": day, "windows": n}, schema
        )
    asked = [days[2], days[0], days[3]]
    rows = wh.manifest_rows("spline_tokens", asked, ["windows", "content_hash"])
    assert rows == [wh.manifest_row("spline_tokens", d, ["windows", "content_hash"]) for d in asked]
    assert [r["windows"] for r in rows] == [2, 0, 3]
    assert wh.content_hashes("spline_tokens", asked) == [wh.content_hash("spline_tokens", d) for d in asked]
    assert wh.manifest_rows("spline_tokens", [], ["windows"]) == [] == wh.content_hashes("spline_tokens", [])


_WRITER = """
import datetime as dt, sys
import polars as pl
from kinematic_pipeline.warehouse import Warehouse
wh, k = Warehouse(sys.argv[1]), int(sys.argv[2])
day = dt.date(2021, 3, 1)
schema = {"partition_date": pl.Date, "content_hash": pl.String, "quarantine_hash": pl.String}
for i in range(int(sys.argv[3])):
    frame = pl.DataFrame({"x": [float(k)] * (1 + i % 7)})
    wh.write_shard("raw_ohlcv", day, frame, {"partition_date": day}, schema, companions={"quarantine": frame})
"""


def test_two_processes_writing_the_same_day_never_break_each_others_unit(tmp_path):
    """Two runs over the same partitions (a schedule and a manual backfill): each day is written by one process
    at a time (``Warehouse.day_lock``), so neither removes the other's staging folder as a stale one nor swaps a
    unit in half-written; the day ends whole, its manifest naming its files' bytes."""
    from kinematic_pipeline.warehouse import Warehouse

    root = tmp_path / "warehouse"
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(root), str(k), "60"], stderr=subprocess.PIPE, text=True)
        for k in (1, 2)
    ]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    wh, day = Warehouse(root), dt.date(2021, 3, 1)
    manifest = pl.read_parquet(wh.manifest("raw_ohlcv", day)).row(0, named=True)
    assert manifest["content_hash"] == file_sha256(wh.shard("raw_ohlcv", day))
    assert manifest["quarantine_hash"] == file_sha256(wh.shard("quarantine", day))
    assert not list((root / "raw_ohlcv" / ".staging").iterdir())


def test_token_days_of_an_older_warehouse_move_into_day_units(tmp_path, capsys):
    """A warehouse written before the token assets became day units (``<asset>/<day>.parquet`` beside
    ``manifests/<asset>/<day>.parquet``) is read as units after one move, made when the settings load (building a
    ``Warehouse`` and its path getters never move files); a shard without a manifest stays out."""
    from kinematic_pipeline.config import load_settings
    from kinematic_pipeline.warehouse import Warehouse
    from kinematic_pipeline.warehouse.repair import upgrade_flat_days

    days = [dt.date(2021, 3, 1), dt.date(2021, 3, 2)]
    for k, day in enumerate(days):
        shard = tmp_path / "spline_tokens" / f"{day}.parquet"
        shard.parent.mkdir(parents=True, exist_ok=True)
        pl.DataFrame({"x": [k]}).write_parquet(shard)
        manifest = tmp_path / "manifests" / "spline_tokens" / f"{day}.parquet"
        manifest.parent.mkdir(parents=True, exist_ok=True)
        pl.DataFrame({"partition_date": [day], "content_hash": [file_sha256(shard)]}).write_parquet(manifest)
    orphan = tmp_path / "spline_tokens" / "2021-03-03.parquet"
    pl.DataFrame({"x": [9]}).write_parquet(orphan)  # its manifest was never written (a crash of the old layout)

    flat = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert Warehouse(tmp_path).shard_days("spline_tokens") == []  # built: nothing moved
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == flat
    wh = load_settings("ci", warehouse=tmp_path, env={}).warehouse
    assert wh.shard_days("spline_tokens") == days
    assert "moved 2 spline_tokens day(s) into day units" in capsys.readouterr().err
    for day in days:
        assert wh.shard("spline_tokens", day) == tmp_path / "spline_tokens" / str(day) / "tokens.parquet"
        assert wh.verified_shards("spline_tokens", [day]) == [wh.shard("spline_tokens", day)]
    assert not (tmp_path / "manifests" / "spline_tokens").exists() and orphan.exists()
    assert wh.query("SELECT sum(x) AS x, count(*) AS n FROM spline_tokens").row(0) == (1, 2)  # views over the units
    assert wh.query("SELECT count(*) FROM spline_tokens_manifest").item() == 2
    assert upgrade_flat_days(wh, "spline_tokens") == 0  # done once


def test_importing_the_settings_beside_an_old_flat_warehouse_changes_nothing_on_disk(tmp_path):
    """The class-level default warehouse (``./warehouse``) is a path, not an act: importing the package in a folder
    holding an older flat-layout warehouse moves no file (the repair runs when the settings load)."""
    import os
    import subprocess
    import sys

    shard = tmp_path / "warehouse" / "spline_tokens" / "2021-03-01.parquet"
    shard.parent.mkdir(parents=True)
    pl.DataFrame({"x": [1]}).write_parquet(shard)
    manifest = tmp_path / "warehouse" / "manifests" / "spline_tokens" / "2021-03-01.parquet"
    manifest.parent.mkdir(parents=True)
    pl.DataFrame({"partition_date": [dt.date(2021, 3, 1)], "content_hash": [file_sha256(shard)]}).write_parquet(
        manifest
    )
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    code = "import kinematic_pipeline.config, kinematic_pipeline.warehouse; kinematic_pipeline.config.Settings()"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KP_")}
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, check=True)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_files_are_written_with_the_users_umask_not_0600(tmp_path):
    """mkstemp creates 0600 files; the warehouse's files get what open() would give under the process's umask."""
    import stat

    from kinematic_pipeline.warehouse.atomic import UMASK, write_bytes_atomic

    path = tmp_path / "record.json"
    write_bytes_atomic(path, b"{}")
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~UMASK
    assert stat.S_IMODE(path.stat().st_mode) & 0o044 or UMASK & 0o044  # readable by the group/others unless masked
