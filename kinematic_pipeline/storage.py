"""The warehouse: Parquet shards written atomically, content hashes, and the DuckDB catalog of views.

Parquet per partition is the source of truth; ``$KP_WAREHOUSE/catalog.duckdb`` only holds views over
the shards (and small tables), so parallel writers never contend for DuckDB's single-writer lock
except for the brief view refresh, which is serialized by a file lock.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl

PARQUET_COMPRESSION = "zstd"  # fixed writer options: the same frame always gives the same bytes
# The rename alone makes a shard appear whole or not at all when a process is killed; fsync before it
# also survives a power loss, at the cost of writing every shard through to disk (KP_DURABLE_WRITES=1).
DURABLE_WRITES = os.environ.get("KP_DURABLE_WRITES", "0") == "1"


def shard_path(warehouse: Path, asset: str, day: dt.date | str) -> Path:
    """``$KP_WAREHOUSE/<asset>/<YYYY-MM-DD>.parquet``: one shard per trading-day partition."""
    return Path(warehouse) / asset / f"{day}.parquet"


def manifest_path(warehouse: Path, asset: str, day: dt.date | str) -> Path:
    return Path(warehouse) / "manifests" / asset / f"{day}.parquet"


def model_dir(warehouse: Path, variant: str) -> Path:
    """``$KP_WAREHOUSE/models/<variant>/``: its ``foundation/`` and ``adapters/tau=<tau>/`` folders."""
    return Path(warehouse) / "models" / variant


def foundation_checkpoint(warehouse: Path, variant: str) -> Path:
    return model_dir(warehouse, variant) / "foundation" / "model.pt"


def adapter_dir(warehouse: Path, variant: str, tau_key: str) -> Path:
    return model_dir(warehouse, variant) / "adapters" / f"tau={tau_key}"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_parquet_atomic(frame: pl.DataFrame, path: Path, compression: str = PARQUET_COMPRESSION) -> str:
    """Write ``frame`` to ``path`` via a temporary file and an atomic rename; return its sha256.

    Readers (DuckDB globs ``*.parquet``, the training loader) never see a partial file: the temporary
    name does not end in ``.parquet``, and ``os.replace`` swaps the complete file in at once. A temporary
    file left by a killed writer of the same shard is removed here (one writer per shard at a time).
    A shard that already holds the same bytes is left alone, mtime included: re-running a partition
    whose input did not change touches nothing.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}.*.tmp"):  # left by a writer that was killed: repair
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        frame.write_parquet(tmp, compression=compression, statistics=True)
        if DURABLE_WRITES:
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        digest = file_sha256(Path(tmp))
        if _holds(path, digest, os.path.getsize(tmp)):
            os.unlink(tmp)  # a re-run with the same input: the shard and its mtime stay untouched
        else:
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return digest


def _holds(path: Path, digest: str, size: int) -> bool:
    """Whether ``path`` already holds exactly the bytes with sha256 ``digest`` (size compared first)."""
    try:
        return path.stat().st_size == size and file_sha256(path) == digest
    except FileNotFoundError:
        return False


def remove_if_exists(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        Path(path).unlink()


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
                    raise TimeoutError(
                        f"catalog {warehouse / 'catalog.duckdb'} stayed locked for {timeout_s:.0f}s"
                    ) from exc
                time.sleep(0.05)
        con = duckdb.connect(str(warehouse / "catalog.duckdb"), read_only=read_only)
        try:
            yield con
        finally:
            con.close()
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()


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
    """(Re)create ``view`` over every ``*.parquet`` in ``directory``; typed and empty when there are none."""
    directory = Path(directory).resolve()
    has_files = directory.is_dir() and any(directory.glob("*.parquet"))
    if has_files:
        glob = str(directory / "*.parquet").replace("'", "''")
        body = f"SELECT * FROM read_parquet('{glob}', union_by_name = true)"
    else:
        body = f"SELECT {_sql_schema(schema)} WHERE false"
    with catalog_connection(warehouse) as con:
        con.execute(f'CREATE OR REPLACE VIEW "{view}" AS {body}')


def query(warehouse: Path, sql: str, params: list | None = None) -> pl.DataFrame:
    """Run a read-only query against the catalog (``?`` placeholders bound to ``params``) as a Polars frame."""
    with catalog_connection(warehouse, read_only=True) as con:
        return con.sql(sql, params=params).pl()
