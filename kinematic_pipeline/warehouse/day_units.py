"""Writing a trading day's files: one writer of a day at a time (``day_lock``), and a day unit (``DAY_UNITS``: the
shard, its companions and its manifest in ``<asset>/<day>/``) staged and swapped in whole by one atomic rename, so
that readers see the old day or the new one, never half of either. Also the catalog's views over the units.

Each function takes the ``Warehouse`` first (``wh``: its root, durability, paths and ``repair``), so that it is
also its method: ``Warehouse.write_shard``, ``day_lock`` and ``ensure_unit_views`` are these. No dagster here.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
import tempfile
from pathlib import Path

import polars as pl

from kinematic_pipeline.warehouse.atomic import (
    PARQUET_COMPRESSION,
    UMASK,
    same_files,
    swap_in_folder,
    write_staged_file,
)
from kinematic_pipeline.warehouse.catalog import catalog_connection, create_view, sql_str
from kinematic_pipeline.warehouse.layout import DAY_UNITS, LOCKS_DIR, SCHEMA_DIR, STAGING_DIR, is_day_name
from kinematic_pipeline.warehouse.no_follow import open_no_follow, read_holder, write_holder


def write_shard(
    wh,
    asset: str,
    day: dt.date,
    frame: pl.DataFrame,
    record: dict,
    manifest_schema: dict[str, pl.DataType],
    compression: str = PARQUET_COMPRESSION,
    companions: dict[str, pl.DataFrame | None] | None = None,
) -> dict:
    """Write a day's shard, then its manifest (``record`` plus the shard's ``content_hash``); return the row.

    For a day unit (``DAY_UNITS``), the shard, its ``companions`` (member name: frame, None or zero rows
    for none; their hashes go to ``<member>_hash``, "" for none) and the manifest are written to a
    staging folder and swapped in by one atomic rename: readers see the old day or the new one, whole.
    """
    with day_lock(wh, asset, day):  # one writer of a day at a time: no interleaved unit, no lost staging
        if asset in DAY_UNITS:
            return _write_unit(wh, asset, day, frame, record, manifest_schema, compression, companions or {})
        record = {**record, "content_hash": wh.write(frame, wh.shard(asset, day), compression)}
        row = {k: record[k] for k in manifest_schema}
        wh.write(pl.DataFrame([row], schema=manifest_schema), wh.manifest(asset, day))
        return record


@contextlib.contextmanager
def day_lock(wh, asset: str, day: dt.date | str, timeout_s: float = 600.0):
    """An exclusive lock on one day of ``asset`` (``.locks/<asset>/<day>.lock``) for as long as it is written:
    two runs over the same partitions (a schedule and a manual backfill) write a day one after the other;
    the second says once whom it waits for (pid, host, since) and stops after ``timeout_s`` naming them.
    The lock file is opened without following a link and never truncated (``no_follow``): a link planted there
    is refused in one line naming it, never a file outside the warehouse emptied."""
    import fcntl
    import socket
    import sys
    import time

    folder = wh.root / LOCKS_DIR / asset
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{day}.lock"
    fd = open_no_follow(path, os.O_RDWR, "lock")
    try:
        deadline, told = time.monotonic() + timeout_s, False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = read_holder(fd) or "another process"
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{asset} {day} is still being written by {holder} after {timeout_s:.0f} s"
                    ) from None
                if not told:
                    print(f"{asset} {day} is being written by {holder}: waiting", file=sys.stderr)
                    told = True
                time.sleep(0.05)
        try:
            write_holder(fd, f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%H:%M:%S')}")
            yield
        finally:
            write_holder(fd, "")
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _write_unit(wh, asset, day, frame, record, manifest_schema, compression, companions) -> dict:
    members = DAY_UNITS[asset]
    folder = wh.root / asset
    staging = folder / STAGING_DIR
    staging.mkdir(parents=True, exist_ok=True)
    for stale in staging.glob(f"{day}.*"):  # left by a writer of this day that was killed: repair
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(dir=staging, prefix=f"{day}."))
    try:
        os.chmod(tmp, 0o777 & ~UMASK)  # mkdtemp's 0700 would become the day's: the user's umask decides
        durable = wh.durable
        record = {**record, "content_hash": write_staged_file(frame, tmp / members[asset], compression, durable)}
        for member, companion in companions.items():
            if companion is not None and companion.height:
                path = tmp / members[member]
                record[f"{member}_hash"] = write_staged_file(companion, path, compression, durable)
            else:
                record[f"{member}_hash"] = ""
        row = {k: record[k] for k in manifest_schema}
        manifest = pl.DataFrame([row], schema=manifest_schema)
        write_staged_file(manifest, tmp / members["manifest"], PARQUET_COMPRESSION, durable)
        final = wh.unit_dir(asset, day)
        if same_files(tmp, final):
            shutil.rmtree(tmp)  # a re-run with the same input: the day and its mtimes stay untouched
        else:
            swap_in_folder(tmp, final, durable)
            shutil.rmtree(tmp, ignore_errors=True)  # now the old day (if there was one)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return record


def ensure_unit_views(wh, asset: str, schemas: dict[str, dict[str, pl.DataType]]) -> None:
    """The typed zero-row files of ``<asset>/_schema/`` and one view per member of the unit over
    ``<asset>/*/<file>`` (the manifest's view is ``<asset>_manifest``). The globs always match, so the
    views are right at every instant, before, during and after any write: no refresh is needed."""
    members, repair = DAY_UNITS[asset], wh.repair
    with catalog_connection(wh.root, repair=repair) as con:  # its lock: one writer of the _schema files at a time
        for member, schema in schemas.items():
            wh.write(pl.DataFrame(schema=schema), wh.root / asset / SCHEMA_DIR / members[member])
        for member in schemas:
            view = f"{asset}_manifest" if member == "manifest" else member
            glob = f"{asset}/*/{members[member]}"
            body = f"SELECT * FROM read_parquet({sql_str(glob)}, union_by_name = true)"
            create_view(con, wh.root, view, body, repair=repair)


def unit_days(folder: Path, after: dt.date | None = None, until: dt.date | None = None) -> list[dt.date]:
    """Sorted days of the units in an asset's ``folder`` with ``after < day <= until`` (folder names only)."""
    if not folder.is_dir():
        return []
    days = (dt.date.fromisoformat(p.name) for p in folder.iterdir() if is_day_name(p.name) and p.is_dir())
    return sorted(d for d in days if (after is None or d > after) and (until is None or d <= until))
