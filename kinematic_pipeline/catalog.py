"""The DuckDB catalog: ``$KP_WAREHOUSE/catalog.duckdb`` holds only views over the Parquet shards.

Parallel writers never contend for DuckDB's single-writer lock except for the brief view refresh, which is
serialized by a file lock (``.catalog.lock``). Views hold globs relative to the warehouse and every
connection sets ``file_search_path`` to it, so a copied or moved warehouse reads its own files. No dagster.
"""

from __future__ import annotations

import contextlib
import fcntl
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl


def sql_str(text: str) -> str:
    """``text`` as a SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


@contextlib.contextmanager
def catalog_connection(warehouse: Path, read_only: bool = False, timeout_s: float = 120.0) -> Iterator:
    """A DuckDB connection to the catalog; writers hold an exclusive file lock (one writer at a time)."""
    import duckdb

    warehouse = Path(warehouse)
    warehouse.mkdir(parents=True, exist_ok=True)
    lock = open(warehouse / ".catalog.lock", "a+")
    try:
        deadline = time.monotonic() + timeout_s
        mode = fcntl.LOCK_SH if read_only else fcntl.LOCK_EX
        while True:
            try:
                fcntl.flock(lock, mode | fcntl.LOCK_NB)
                break
            except BlockingIOError as exc:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"catalog {catalog_file(warehouse)} stayed locked for {timeout_s:.0f}s") from exc
                time.sleep(0.05)
        con = duckdb.connect(str(catalog_file(warehouse)), read_only=read_only)
        try:
            # The views' globs are relative to the warehouse: a copied or moved warehouse reads its own files.
            con.execute(f"SET file_search_path = {sql_str(str(warehouse.resolve()))}")
            yield con
        finally:
            con.close()
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()


def catalog_file(warehouse: Path) -> Path:
    """The catalog of ``warehouse``: ``catalog.duckdb`` in it; when its path holds a ``?`` (DuckDB 2.0 cuts a
    database path at the first ``?`` to name its write-ahead log, and resolves links first), a file of the same
    views under ``$XDG_CACHE_HOME/kinematic_pipeline/catalogs/<sha256 of the path>/`` (it holds only views, whose
    globs read the warehouse's own files through ``file_search_path``)."""
    warehouse = Path(warehouse)
    if "?" not in str(warehouse.resolve()):
        return warehouse / "catalog.duckdb"
    import hashlib
    import os

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    key = hashlib.sha256(str(warehouse.resolve()).encode()).hexdigest()[:32]
    folder = cache / "kinematic_pipeline" / "catalogs" / key
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "warehouse.txt").write_text(str(warehouse.resolve()) + "\n")
    return folder / "catalog.duckdb"


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


def refresh_view(warehouse: Path, view: str, directory: Path, schema: dict[str, pl.DataType]) -> None:
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
    with catalog_connection(warehouse) as con:
        con.execute(f'CREATE OR REPLACE VIEW "{view}" AS {body}')


def query(warehouse: Path, sql: str, params: list | None = None) -> pl.DataFrame:
    """Run a read-only query against the catalog (``?`` placeholders bound to ``params``) as a Polars frame."""
    with catalog_connection(warehouse, read_only=True) as con:
        return con.sql(sql, params=params).pl()
