"""The DuckDB catalog: ``$KP_WAREHOUSE/catalog.duckdb`` holds only views over the Parquet shards.

Parallel writers never contend for DuckDB's single-writer lock except for the brief view refresh, which is
serialized by a file lock (``.catalog.lock``). Views hold globs relative to the warehouse and every
connection sets ``file_search_path`` to it, so a copied or moved warehouse reads its own files.

What to do when DuckDB cannot read a file is the caller's: the ``Warehouse`` passes ``repair.REPAIR``
(a ``Repair``) to every function here that opens the catalog or creates a view; without one the error is raised.
No dagster.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
from polars.exceptions import PanicException

from kinematic_pipeline.warehouse.atomic import write_text_atomic
from kinematic_pipeline.warehouse.no_follow import open_no_follow


@dataclass(frozen=True)
class Repair:
    """What the catalog does when DuckDB cannot read a file of the warehouse (``repair.REPAIR``).

    ``damaged_file(warehouse, path, why)`` moves an unreadable Parquet file aside (with what belongs to it) and
    returns the line it printed; ``rebuild_views(warehouse, con)`` re-creates every view in a fresh catalog (it
    holds only views) and returns their names."""

    damaged_file: Callable[[Path, Path, str], str]
    rebuild_views: Callable[[Path, Any], list[str]]


def sql_str(text: str) -> str:
    """``text`` as a SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


@contextlib.contextmanager
def catalog_connection(
    warehouse: Path, read_only: bool = False, timeout_s: float = 120.0, repair: Repair | None = None
) -> Iterator:
    """A DuckDB connection to the catalog; writers hold an exclusive file lock (one writer at a time), opened
    without following a link (``no_follow``: a link planted at ``.catalog.lock`` is refused, naming it).

    A reader (``read_only``) holds the lock shared, opened for reading, and creates nothing: it works on a
    warehouse it may not write (a read-only mount, another user's files). Where the lock file does not exist and
    cannot be made, no writer can be refreshing the views either, and the reader goes on without it."""

    warehouse = Path(warehouse)
    if not read_only:
        warehouse.mkdir(parents=True, exist_ok=True)
    lock = _open_lock(warehouse / ".catalog.lock", read_only)
    try:
        if lock is not None:
            _hold(lock, fcntl.LOCK_SH if read_only else fcntl.LOCK_EX, warehouse, timeout_s)
        con = _connect(warehouse, read_only, repair)
        try:
            # The views' globs are relative to the warehouse: a copied or moved warehouse reads its own files.
            con.execute(f"SET file_search_path = {sql_str(str(warehouse.resolve()))}")
            yield con
        finally:
            con.close()
    finally:
        if lock is not None:
            fcntl.flock(lock, fcntl.LOCK_UN)
            os.close(lock)


def _open_lock(path: Path, read_only: bool) -> int | None:
    """The catalog's lock file: a writer's opened for writing (created when missing); a reader's for reading,
    or None where it is missing on a warehouse this process cannot write."""
    if not read_only:
        return open_no_follow(path, os.O_RDWR, "lock")
    try:
        return open_no_follow(path, os.O_RDONLY, "lock", create=not path.exists())
    except OSError as exc:
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return None
        raise


def _hold(lock: int, mode: int, warehouse: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(lock, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError as exc:
            if time.monotonic() > deadline:
                raise TimeoutError(f"catalog {catalog_file(warehouse)} stayed locked for {timeout_s:.0f}s") from exc
            time.sleep(0.05)


def catalog_file(warehouse: Path) -> Path:
    """The catalog of ``warehouse``: ``catalog.duckdb`` in it; when its path holds a ``?`` (DuckDB 2.0 cuts a
    database path at the first ``?`` to name its write-ahead log, and resolves links first), a file of the same
    views under ``$XDG_CACHE_HOME/kinematic_pipeline/catalogs/<sha256 of the path>/`` (it holds only views, whose
    globs read the warehouse's own files through ``file_search_path``)."""
    warehouse = Path(warehouse)
    if "?" not in str(warehouse.resolve()):
        return warehouse / "catalog.duckdb"
    import hashlib

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    key = hashlib.sha256(str(warehouse.resolve()).encode()).hexdigest()[:32]
    folder = cache / "kinematic_pipeline" / "catalogs" / key
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / "warehouse.txt", str(warehouse.resolve()) + "\n")
    return folder / "catalog.duckdb"


def _connect(warehouse: Path, read_only: bool, repair: Repair | None):
    """A connection to the catalog; with a ``repair``, a catalog file DuckDB cannot open (a disk that filled while
    it was written, a stray edit) is moved aside and rebuilt from the shards, since it holds only views (one line
    says so)."""
    import duckdb

    path = catalog_file(warehouse)
    try:
        return duckdb.connect(str(path), read_only=read_only)
    except duckdb.Error as exc:
        if repair is None or not path.exists() or "lock" in str(exc).lower():
            raise
        stamp = time.strftime("%Y%m%dT%H%M%S")
        kept = path.with_name(f"{path.name}.damaged-{stamp}")
        path.rename(kept)
        wal = path.with_name(path.name + ".wal")
        if wal.exists():
            wal.rename(kept.with_name(kept.name + ".wal"))
        con = duckdb.connect(str(path))
        con.execute(f"SET file_search_path = {sql_str(str(Path(warehouse).resolve()))}")
        views = repair.rebuild_views(Path(warehouse), con)
        print(
            f"catalog {path} could not be opened ({_first_line(exc)}): moved to {kept.name}; rebuilt "
            f"{len(views)} view(s) from the shards ({', '.join(views[:8])}{'...' if len(views) > 8 else ''})",
            file=sys.stderr,
        )
        if read_only:
            con.close()
            return duckdb.connect(str(path), read_only=True)
        return con


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


_FILE_IN_ERROR = re.compile(r"""(?:File|file) ['"]([^'"]+\.parquet)['"]""")


def create_view(
    con, warehouse: Path, view: str, body: str, *, repair: Repair | None = None, attempts: int = 50
) -> list[str]:
    """``CREATE OR REPLACE VIEW view AS body``; with a ``repair``, a Parquet file under the warehouse that DuckDB
    cannot read (zero bytes, truncated) never locks the view: it is moved aside (``Repair.damaged_file``: its whole
    day unit, or the shard with its manifest) and the view is created without it. Returns what was moved."""
    import duckdb

    moved: list[str] = []
    for _ in range(attempts):
        try:
            con.execute(f'CREATE OR REPLACE VIEW "{view}" AS {body}')
            return moved
        except duckdb.Error as exc:
            match = _FILE_IN_ERROR.search(str(exc))
            path = Path(match.group(1)) if match else None
            if path is not None and not path.is_absolute():
                path = Path(warehouse).resolve() / path
            if repair is None or path is None or not _unreadable(path):
                raise
            moved.append(repair.damaged_file(Path(warehouse), path, _first_line(exc)))
    raise RuntimeError(f"view {view}: more than {attempts} damaged files under {warehouse}")


def _unreadable(path: Path) -> bool:
    """Whether ``path`` is a Parquet file no reader can open (its footer is missing or damaged; Polars' panic on
    such bytes included). A file this user may not read is not damaged: a ``PermissionError`` naming it, and it
    stays where it is."""
    try:
        with open(path, "rb"):
            pass
    except FileNotFoundError:
        return False
    except PermissionError as exc:
        raise PermissionError(
            f"{path} cannot be read by this user ({exc.strerror}): not damaged, so left in place; give this user "
            "read access to the warehouse's files"
        ) from None
    try:
        pl.read_parquet_schema(path)
    except FileNotFoundError:
        return False
    except (Exception, PanicException):  # noqa: BLE001 - whatever the reader says, the bytes are not a Parquet file
        return True
    return False


def _sql_schema(schema: dict[str, pl.DataType]) -> str:
    types = {
        pl.String: "VARCHAR",
        pl.Date: "DATE",
        pl.Float64: "DOUBLE",
        pl.Float32: "FLOAT",
        pl.Int64: "BIGINT",
        pl.Int32: "INTEGER",
        pl.Int8: "TINYINT",
        pl.Boolean: "BOOLEAN",
    }
    return ", ".join(f"CAST(NULL AS {types[t]}) AS {name}" for name, t in schema.items())


def refresh_view(
    warehouse: Path, view: str, directory: Path, schema: dict[str, pl.DataType], repair: Repair | None = None
) -> None:
    """(Re)create ``view`` over every ``*.parquet`` in ``directory``; typed and empty when there are none.

    The glob is relative to the warehouse when ``directory`` is inside it (see ``catalog_connection``)."""
    directory = Path(directory).resolve()
    has_files = directory.is_dir() and any(directory.glob("*.parquet"))
    if has_files:
        root = Path(warehouse).resolve()
        glob = directory / "*.parquet"
        rel = glob.relative_to(root) if glob.is_relative_to(root) else glob
        body = f"SELECT * FROM read_parquet({sql_str(str(rel))}, union_by_name = true)"
    else:
        body = f"SELECT {_sql_schema(schema)} WHERE false"
    with catalog_connection(warehouse, repair=repair) as con:
        create_view(con, warehouse, view, body, repair=repair)


def query(warehouse: Path, sql: str, params: list | None = None, repair: Repair | None = None) -> pl.DataFrame:
    """Run a read-only query against the catalog (``?`` placeholders bound to ``params``) as a Polars frame."""
    with catalog_connection(warehouse, read_only=True, repair=repair) as con:
        return con.sql(sql, params=params).pl()
