"""The warehouse: Parquet shards written atomically, content hashes, and the DuckDB catalog of views.

Parquet per partition is the source of truth; ``$KP_WAREHOUSE/catalog.duckdb`` only holds views over
the shards (and small tables), so parallel writers never contend for DuckDB's single-writer lock
except for the brief view refresh, which is serialized by a file lock.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import datetime as dt
import errno
import fcntl
import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from kinematic_pipeline.variants import variant as lookup_variant

PARQUET_COMPRESSION = "zstd"  # fixed writer options: the same frame always gives the same bytes
# The rename alone makes a shard appear whole or not at all when a process is killed; fsync before it
# also survives a power loss, at the cost of writing every shard through to disk (KP_DURABLE_WRITES=1).
DURABLE_WRITES = os.environ.get("KP_DURABLE_WRITES", "0") == "1"


# Asset names: each is the folder of its shards under the warehouse and the name of its catalog view.
RAW_OHLCV, QUARANTINE = "raw_ohlcv", "quarantine"
# Assets whose trading day is one unit: a folder ``<asset>/<day>/`` holding the shard (``bars.parquet``),
# its companions (the quarantine) and its manifest, swapped in whole by one atomic rename. Each member has
# a catalog view over ``<asset>/*/<file>``, which always matches the typed zero-row files of ``<asset>/_schema/``.
DAY_UNITS: dict[str, dict[str, str]] = {
    RAW_OHLCV: {RAW_OHLCV: "bars.parquet", QUARANTINE: "quarantine.parquet", "manifest": "manifest.parquet"}
}
UNIT_OF = {member: asset for asset, members in DAY_UNITS.items() for member in members if member != "manifest"}
SCHEMA_DIR, STAGING_DIR = "_schema", ".staging"
TOKEN_ASSETS = ("spline_tokens", "fd_tokens", "raw_tokens")
ALPHA_ESTIMATES, LABELS, CORPUS_STATS = "alpha_estimates", "labels", "corpus_stats"
PREDICTIONS, BACKTESTS, EQUITY_CURVES, TRADES, PROVENANCE = (
    "predictions",
    "backtests",
    "equity_curves",
    "trades",
    "provenance",
)
MARGIN_BACKTESTS = "margin_backtests"  # the second decision rule's backtests (beside the paper's argmax)
SHARDS_USED_FILE = "shards_used.parquet"  # beside each checkpoint/adapter: the store and shards it trained on
SHARDS_USED_SCHEMA: dict[str, pl.DataType] = {
    "asset": pl.String,  # the token asset, labels, or the window store (split "store")
    "split": pl.String,  # train | val | store
    "date": pl.String,
    "path": pl.String,
    "content_hash": pl.String,
    "windows": pl.Int64,  # windows of the day (of the whole store for the store's row)
    "served": pl.Int64,  # windows of it served over every epoch (0: never drawn)
}


def tau_key(tau: float) -> str:
    """A tau as partition keys and adapter folders spell it: ``0.01``, ``0.0025``."""
    return f"{tau:g}"


def policy_key(variant: str, seed: int) -> str:
    """A fine-tuned policy family as evaluation partitions name it: ``splinegpt@1234``."""
    return f"{variant}@{seed}"


def parse_policy_key(key: str) -> tuple[str, int]:
    variant, _, seed = key.partition("@")
    return variant, int(seed)


def digest(hashes: list[str]) -> str:
    """sha256 over a list of content hashes, concatenated in order (the lineage of a set of shards)."""
    return hashlib.sha256("".join(hashes).encode()).hexdigest()


def combined_hash(hashes: list[str]) -> str:
    """One hash for metadata: the shard's own for a single shard, else the ``digest`` of all of them."""
    return hashes[0] if len(hashes) == 1 else digest(hashes)


@dataclass(frozen=True)
class Warehouse:
    """The layout of ``$KP_WAREHOUSE``: the one place that knows where every file lives.

    - ``<asset>/<YYYY-MM-DD>.parquet``: one shard per trading-day partition (or ``<asset>/<name>.parquet``
      for the unpartitioned and the evaluation assets), with ``manifests/<asset>/<day>.parquet`` beside
      each trading-day shard (its content hash and counts);
    - ``raw_ohlcv/<YYYY-MM-DD>/`` (``DAY_UNITS``): a day as one unit, ``bars.parquet`` (the kept bars),
      ``quarantine.parquet`` (only when rows were quarantined) and ``manifest.parquet``, replaced together
      by one atomic rename (``write_shard`` with ``companions``); ``raw_ohlcv/_schema/`` holds typed
      zero-row twins so that the catalog's globs always match;
    - ``models/<variant>/seed=<seed>/foundation/model.pt`` and ``.../seed=<seed>/adapters/tau=<tau>/``,
      each with the ``shards_used.parquet`` it trained on;
    - ``catalog.duckdb``: views over the shards (``refresh_view``), with globs relative to the warehouse
      (every connection sets ``file_search_path`` to it): a copied or moved warehouse reads its own files.
    """

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def catalog_path(self) -> Path:
        return self.root / "catalog.duckdb"

    # --- shards and manifests -------------------------------------------------------------------------

    def shard(self, asset: str, key: dt.date | str) -> Path:
        """``<asset>/<key>.parquet``: a trading day's shard, or a named one (``stats``, ``splinegpt_tau0.01``);
        for a member of a day unit (``raw_ohlcv``, ``quarantine``), its file in ``<unit>/<day>/``."""
        if asset in UNIT_OF:
            return self.unit_dir(UNIT_OF[asset], key) / DAY_UNITS[UNIT_OF[asset]][asset]
        return self.root / asset / f"{key}.parquet"

    def manifest(self, asset: str, day: dt.date | str) -> Path:
        if asset in DAY_UNITS:
            return self.unit_dir(asset, day) / DAY_UNITS[asset]["manifest"]
        return self.root / "manifests" / asset / f"{day}.parquet"

    def unit_dir(self, asset: str, day: dt.date | str) -> Path:
        """``<asset>/<day>/``: the folder of a day unit (``DAY_UNITS``)."""
        return self.root / asset / str(day)

    def shard_days(self, asset: str, *, after: dt.date | None = None, until: dt.date | None = None) -> list[dt.date]:
        """Sorted days of ``asset``'s shards with ``after < day <= until`` (file names only: nothing is opened)."""
        if asset in DAY_UNITS:
            return _unit_days_in(self.root / asset, after, until)
        return _days_in(self.root / asset, after, until)

    def manifest_days(self, asset: str) -> list[dt.date]:
        """Sorted days whose ``asset`` shard has a manifest (a shard counts once its manifest is written)."""
        if asset in DAY_UNITS:
            return _unit_days_in(self.root / asset, None, None)  # a unit exists whole or not at all
        return _days_in(self.root / "manifests" / asset, None, None)

    def manifest_row(self, asset: str, day: dt.date, columns: list[str] | None = None) -> dict:
        path = self.manifest(asset, day)
        if not path.exists():
            raise FileNotFoundError(f"{asset} partition {day} has no manifest ({path}); materialize {asset} for it")
        return pl.read_parquet(path, columns=columns).row(0, named=True)

    def content_hash(self, asset: str, day: dt.date, default: str | None = None) -> str:
        """The sha256 its manifest records for ``asset``'s shard of ``day`` (``default`` if there is none)."""
        if default is not None and not self.manifest(asset, day).exists():
            return default
        return self.manifest_row(asset, day, ["content_hash"])["content_hash"]

    def manifest_rows(self, asset: str, days: list[dt.date], columns: list[str]) -> list[dict]:
        """``manifest_row`` of many days, in their order, in one read of their manifests."""
        if not days:
            return []
        frame = pl.read_parquet([self.manifest(asset, d) for d in days], columns=["partition_date", *columns])
        by_day = {row.pop("partition_date"): row for row in frame.iter_rows(named=True)}
        return [by_day[d] for d in days]

    def content_hashes(self, asset: str, days: list[dt.date]) -> list[str]:
        """``content_hash`` of many days, in their order."""
        return [row["content_hash"] for row in self.manifest_rows(asset, days, ["content_hash"])]

    def write_shard(
        self,
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
        if asset in DAY_UNITS:
            return self._write_unit(asset, day, frame, record, manifest_schema, compression, companions or {})
        record = {**record, "content_hash": write_parquet_atomic(frame, self.shard(asset, day), compression)}
        row = {k: record[k] for k in manifest_schema}
        write_parquet_atomic(pl.DataFrame([row], schema=manifest_schema), self.manifest(asset, day))
        return record

    def _write_unit(self, asset, day, frame, record, manifest_schema, compression, companions) -> dict:
        members = DAY_UNITS[asset]
        folder = self.root / asset
        staging = folder / STAGING_DIR
        staging.mkdir(parents=True, exist_ok=True)
        for stale in staging.glob(f"{day}.*"):  # left by a writer of this day that was killed: repair
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(dir=staging, prefix=f"{day}."))
        try:
            os.chmod(tmp, 0o755)  # mkdtemp's 0700 would become the day's
            record = {**record, "content_hash": _write_file(frame, tmp / members[asset], compression)}
            for member, companion in companions.items():
                if companion is not None and companion.height:
                    record[f"{member}_hash"] = _write_file(companion, tmp / members[member], compression)
                else:
                    record[f"{member}_hash"] = ""
            row = {k: record[k] for k in manifest_schema}
            _write_file(pl.DataFrame([row], schema=manifest_schema), tmp / members["manifest"], PARQUET_COMPRESSION)
            final = self.unit_dir(asset, day)
            if _same_files(tmp, final):
                shutil.rmtree(tmp)  # a re-run with the same input: the day and its mtimes stay untouched
            else:
                if DURABLE_WRITES:
                    _fsync_dir(tmp)
                _swap_in(tmp, final)
                if DURABLE_WRITES:
                    _fsync_dir(folder)
                shutil.rmtree(tmp, ignore_errors=True)  # now the old day (if there was one)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        for legacy in (folder / f"{day}.parquet", self.root / "manifests" / asset / f"{day}.parquet"):
            remove_if_exists(legacy)  # the flat layout before day units
        for member in members:
            if member not in (asset, "manifest"):
                remove_if_exists(self.root / member / f"{day}.parquet")
        return record

    def ensure_unit_views(self, asset: str, schemas: dict[str, dict[str, pl.DataType]]) -> None:
        """The typed zero-row files of ``<asset>/_schema/`` and one view per member of the unit over
        ``<asset>/*/<file>`` (the manifest's view is ``<asset>_manifest``). The globs always match, so the
        views are right at every instant, before, during and after any write: no refresh is needed."""
        members = DAY_UNITS[asset]
        with catalog_connection(self.root) as con:  # its lock: one writer of the _schema files at a time
            for member, schema in schemas.items():
                write_parquet_atomic(pl.DataFrame(schema=schema), self.root / asset / SCHEMA_DIR / members[member])
            for member in schemas:
                view = f"{asset}_manifest" if member == "manifest" else member
                glob = f"{asset}/*/{members[member]}"
                con.execute(
                    f'CREATE OR REPLACE VIEW "{view}" AS SELECT * FROM read_parquet({_sql_str(glob)}, union_by_name = true)'
                )

    # --- derived stores -------------------------------------------------------------------------------

    def window_store_dir(self, asset: str) -> Path:
        """``window_store/<token asset>/``: the training-period windows of a token asset (``window_store.py``)."""
        return self.root / "window_store" / asset

    # --- models -----------------------------------------------------------------------------------------

    def model_dir(self, variant: str, seed: int) -> Path:
        """``models/<variant>/seed=<seed>/``: its ``foundation/`` and ``adapters/tau=<tau>/`` folders."""
        return self.root / "models" / variant / f"seed={seed}"

    def foundation_dir(self, variant: str, seed: int) -> Path:
        return self.model_dir(variant, seed) / "foundation"

    def foundation_checkpoint(self, variant: str, seed: int) -> Path:
        return self.foundation_dir(variant, seed) / "model.pt"

    def adapter_dir(self, variant: str, tau_key: str, seed: int) -> Path:
        return self.model_dir(variant, seed) / "adapters" / f"tau={tau_key}"

    def model_count(self, variant: str) -> tuple[int, int]:
        """(foundations, adapters) of ``variant`` in the warehouse, over every seed."""
        root = self.root / "models" / variant
        return len(list(root.glob("seed=*/foundation/model.pt"))), len(list(root.glob("seed=*/adapters/tau=*")))

    def has_adapter(self, variant: str, tau_key: str, seed: int) -> bool:
        """Whether the fine-tuned head of (variant, tau, seed) was saved."""
        return lookup_variant(variant).head_saved(self.adapter_dir(variant, tau_key, seed))

    def adapter_files(self, variant: str, tau_key: str, seed: int) -> list[Path]:
        """The files that define the fine-tuned head of (variant, tau, seed), sorted."""
        head = lookup_variant(variant).head_path(self.adapter_dir(variant, tau_key, seed))
        return [head] if head.is_file() else sorted(p for p in head.rglob("*") if p.is_file())

    def policy_files(self, variant: str, tau_key: str, seed: int) -> tuple[Path, Path]:
        """(foundation model.pt, adapter folder) of a fine-tuned policy; a clear error when either is missing."""
        foundation = self.foundation_checkpoint(variant, seed)
        adapter = self.adapter_dir(variant, tau_key, seed)
        if not foundation.exists():
            raise FileNotFoundError(f"{foundation} is missing: materialize {variant}_foundation partition {seed}")
        if not self.has_adapter(variant, tau_key, seed):
            raise FileNotFoundError(
                f"{adapter} holds no adapter: materialize {variant}_adapter partition {seed}|{tau_key}"
            )
        return foundation, adapter

    # --- the catalog --------------------------------------------------------------------------------------

    def refresh_view(self, view: str, schema: dict[str, pl.DataType], folder: Path | None = None) -> None:
        """(Re)create ``view`` over the ``*.parquet`` of ``folder`` (default: the asset folder named ``view``)."""
        refresh_view(self.root, view, self.root / view if folder is None else folder, schema)

    def refresh_manifest_view(self, asset: str, schema: dict[str, pl.DataType]) -> None:
        self.refresh_view(f"{asset}_manifest", schema, self.root / "manifests" / asset)

    def query(self, sql: str, params: list | None = None) -> pl.DataFrame:
        return query(self.root, sql, params)


def _days_in(folder: Path, after: dt.date | None, until: dt.date | None) -> list[dt.date]:
    if not folder.is_dir():
        return []
    days = (dt.date.fromisoformat(p.stem) for p in folder.glob("*.parquet") if _is_day(p.stem))
    return sorted(d for d in days if (after is None or d > after) and (until is None or d <= until))


def _unit_days_in(folder: Path, after: dt.date | None, until: dt.date | None) -> list[dt.date]:
    if not folder.is_dir():
        return []
    days = (dt.date.fromisoformat(p.name) for p in folder.iterdir() if _is_day(p.name) and p.is_dir())
    return sorted(d for d in days if (after is None or d > after) and (until is None or d <= until))


def _write_file(frame: pl.DataFrame, path: Path, compression: str) -> str:
    """Write ``frame`` to a fresh ``path`` (in a staging folder) and return its sha256."""
    frame.write_parquet(path, compression=compression, statistics=True)
    if DURABLE_WRITES:
        with open(path, "rb") as fh:
            os.fsync(fh.fileno())
    return file_sha256(path)


def _same_files(new: Path, old: Path) -> bool:
    """Whether folder ``old`` holds exactly the files of ``new``, byte for byte."""
    if not old.is_dir():
        return False
    names = sorted(p.name for p in new.iterdir())
    if names != sorted(p.name for p in old.iterdir()):
        return False
    return all(_holds(old / n, file_sha256(new / n), (new / n).stat().st_size) for n in names)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_RENAME_EXCHANGE, _AT_FDCWD = 2, -100
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False where that is not supported."""
    renameat2 = getattr(_libc, "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def swap_in_folder(new: Path, final: Path) -> None:
    """Replace folder ``final`` by folder ``new`` in one atomic step (see ``_swap_in``); the old one, if any,
    is left at ``new``'s path for the caller to remove."""
    final.parent.mkdir(parents=True, exist_ok=True)
    if DURABLE_WRITES:
        _fsync_dir(new)
    _swap_in(new, final)
    if DURABLE_WRITES:
        _fsync_dir(final.parent)


def _swap_in(new: Path, final: Path) -> None:
    """Put folder ``new`` at ``final``; the old ``final`` (if any) ends at ``new``'s path. One atomic step
    where the kernel can exchange two names; else the old folder is moved aside first (the day is absent,
    never torn, for that instant)."""
    if not final.exists():
        os.rename(new, final)  # a new day: one rename
        return
    if _exchange(new, final):
        return
    aside = new.with_name(new.name + ".old")
    os.rename(final, aside)
    os.rename(new, final)
    os.rename(aside, new)


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _is_day(stem: str) -> bool:
    return len(stem) == 10 and stem[4] == "-" and stem[7] == "-" and stem.replace("-", "").isdigit()


def write_shards_used(out_dir: Path, shards: list[dict]) -> Path:
    """Record every shard a training run streamed from (asset, split, date, path, sha256) next to its output."""
    path = Path(out_dir) / SHARDS_USED_FILE
    write_parquet_atomic(pl.DataFrame(shards, schema=SHARDS_USED_SCHEMA), path)
    return path


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
            # The views' globs are relative to the warehouse: a copied or moved warehouse reads its own files.
            con.execute(f"SET file_search_path = {_sql_str(str(warehouse.resolve()))}")
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
    """(Re)create ``view`` over every ``*.parquet`` in ``directory``; typed and empty when there are none.

    The glob is relative to the warehouse when ``directory`` is inside it (see ``catalog_connection``)."""
    directory = Path(directory).resolve()
    has_files = directory.is_dir() and any(directory.glob("*.parquet"))
    if has_files:
        root = Path(warehouse).resolve()
        glob = directory / "*.parquet"
        rel = glob.relative_to(root) if glob.is_relative_to(root) else glob
        body = f"SELECT * FROM read_parquet({_sql_str(str(rel))}, union_by_name = true)"
    else:
        body = f"SELECT {_sql_schema(schema)} WHERE false"
    with catalog_connection(warehouse) as con:
        con.execute(f'CREATE OR REPLACE VIEW "{view}" AS {body}')


def query(warehouse: Path, sql: str, params: list | None = None) -> pl.DataFrame:
    """Run a read-only query against the catalog (``?`` placeholders bound to ``params``) as a Polars frame."""
    with catalog_connection(warehouse, read_only=True) as con:
        return con.sql(sql, params=params).pl()
