"""The window store: one token asset's training-period windows in one memory-mapped file, indexed by row.

Training draws each epoch as a uniform sample of every training window (every day and ticker equally
likely). Reading a sample spread over thousands of day shards from Parquet would read every shard whole;
the store is built once per token asset and training cut from those shards and serves any set of rows at
memory speed (page cache) or random-read speed (disk), without ever loading the corpus: at the paper's scale
(~22.5 M windows) it is ~52 GB, of which an epoch touches only the rows it samples.

Layout, ``$KP_WAREHOUSE/window_store/<token asset>/`` (``Warehouse.window_store_dir``), swapped in whole:
- ``tokens.npy``: float32 [N, 64, channels], the shards' ``tokens`` in (day, shard row) order, as stored
  (unanchored, unnormalized: corpus_stats normalize them where they are consumed); ``np.load(mmap_mode="r")``;
- ``rows.parquet``: one row per window, same order: ``date``, ``ticker``, ``finite`` (every value finite);
- ``days.parquet``: one row per day: ``date``, ``first_row``, ``windows``, ``path`` and ``content_hash`` of
  the day's shard (the lineage of every row);
- ``manifest.parquet``: one row: the asset, the training cut, the counts, the sha256 of the three files
  above, the sha256 of every 64 MB block of ``tokens.npy`` (``block_bytes``, ``block_sha256``) and
  ``shards_digest`` (sha256 over the shards' content hashes, in day order).

Only shards dated on or before the last fold's training end (``folds.store_cut``; a single cut: ``split.train_end``) are
ever opened, so nothing after the cut can be served; each fold reads the prefix of days up to its own training end.
``open_store`` compares the manifest with the settings' cut and the token manifests of today: a store built
from other shards is an error that names the asset to re-materialize; then the bytes, whatever their mtime says
(``verified``): the row and day index are hashed whole, and every block of ``tokens.npy`` against the block hashes
the build recorded (several blocks at once; a read verifies any block it touches that was not, so no window is
served from an unverified block). A flipped byte is one line naming the file, the block, its rows and days and the
asset to re-materialize, never statistics of garbage. The cost (``docs/operations.md``): one pass over the file
per open, at the page cache's or the disk's read rate. No dagster and no torch here.
"""

from __future__ import annotations

import datetime as dt
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from kinematic_pipeline.code_versions import CODE_VERSIONS
from kinematic_pipeline.config import Settings
from kinematic_pipeline.folds import Fold, split_days, store_cut
from kinematic_pipeline.pins import StalePairError
from kinematic_pipeline.tokenizations import Tokenization
from kinematic_pipeline.warehouse import exact_paths as exact
from kinematic_pipeline.warehouse.atomic import digest
from kinematic_pipeline.warehouse.verified import CorruptFileError, verify_blocks, verify_file
from kinematic_pipeline.windows import N_TOKENS

STORE_CODE_VERSION = CODE_VERSIONS["window_store"]  # recorded in the store's manifest
TOKENS_FILE, ROWS_FILE, DAYS_FILE, MANIFEST_FILE = "tokens.npy", "rows.parquet", "days.parquet", "manifest.parquet"
_HASHED = {TOKENS_FILE: "tokens_sha256", ROWS_FILE: "rows_sha256", DAYS_FILE: "days_sha256"}  # file -> manifest
ROWS_SCHEMA: dict[str, pl.DataType] = {"date": pl.Date, "ticker": pl.String, "finite": pl.Boolean}
DAYS_SCHEMA: dict[str, pl.DataType] = {
    "date": pl.Date,
    "first_row": pl.Int64,
    "windows": pl.Int64,
    "path": pl.String,  # the day's token shard, relative to the warehouse
    "content_hash": pl.String,
}
MANIFEST_SCHEMA: dict[str, pl.DataType] = {
    "asset": pl.String,
    "train_end": pl.Date,  # the cut the store was built for: no day after it
    "first_day": pl.Date,
    "last_day": pl.Date,
    "days": pl.Int64,
    "windows": pl.Int64,
    "non_finite_windows": pl.Int64,  # kept in the file, never sampled (rows.finite is false)
    "tokens_sha256": pl.String,
    "rows_sha256": pl.String,
    "days_sha256": pl.String,
    "shards_digest": pl.String,
    "code_version": pl.String,
    "block_bytes": pl.Int64,  # the checksum block of tokens.npy (verified.BLOCK_BYTES when it was built)
    "block_sha256": pl.List(pl.String),  # the sha256 of every block of tokens.npy, in file order
}


class StaleStoreError(StalePairError):
    """The store on disk was built for another cut or from other shards than the warehouse holds now."""


def training_shard_days(settings: Settings, asset: str) -> tuple[list[dt.date], list[dict]]:
    """The days of ``asset`` on or before the cut that hold windows, and their manifest rows (file names and
    manifests only: no shard is opened, none after the cut is listed)."""
    wh = settings.warehouse
    days = wh.shard_days(asset, until=store_cut(settings))
    metas = wh.manifest_rows(asset, days, ["windows", "content_hash"])
    kept = [(d, m) for d, m in zip(days, metas) if m["windows"] > 0]  # a day before any ticker has 64 sessions
    return [d for d, _ in kept], [m for _, m in kept]


def fold_split(settings: Settings, asset: str, fold: Fold) -> tuple[list[dt.date], list[dt.date]]:
    """The training and validation days of ``fold``: the days of ``asset``'s window store on or before the
    fold's training end, split by date as its models' fine-tuning splits them (``training.data``)."""
    days = [d for d in training_shard_days(settings, asset)[0] if d <= fold.train_end]
    return split_days(days, settings.train.val_fraction)


def validation_days(settings: Settings, asset: str, fold: Fold) -> list[dt.date]:
    """The validation days of ``fold``'s training: the last ``val_fraction`` of its days that hold windows (the
    window store's days up to the fold's training end, listed from the manifests)."""
    return fold_split(settings, asset, fold)[1]


def read_manifest(folder: Path) -> dict | None:
    path = folder / MANIFEST_FILE
    return exact.read_parquet(path).row(0, named=True) if path.exists() else None


READ_THREADS = 8  # positional reads in flight while serving a batch (a cold disk serves them in parallel)


@dataclass
class WindowStore:
    """An open store: the manifest, the day and row index, and the tokens file. ``read`` serves any rows with
    positional reads (one per run of consecutive rows, several in flight), at page-cache speed when the file
    is cached and at the disk's random-read rate when it is not (a memory map would fault in 64 KB around
    every 2.3 KB window). The file is opened on first use in each process: a pickled store (a DataLoader
    worker, a DDP rank) reopens it, never copies it."""

    folder: Path
    manifest: dict
    days: pl.DataFrame  # DAYS_SCHEMA
    rows: pl.DataFrame  # ROWS_SCHEMA
    tokenization: Tokenization  # whose tokens it holds
    _file: tuple | None = field(default=None, repr=False)  # (fd, data offset, thread pool) in this process
    # per block of tokens.npy: verified against the manifest's block_sha256 (carried to a pickled copy: a
    # DataLoader worker or a spawned rank does not hash again what its parent verified)
    _verified: np.ndarray | None = field(default=None, repr=False)

    @property
    def asset(self) -> str:
        return self.manifest["asset"]

    @property
    def path(self) -> Path:
        return self.folder / TOKENS_FILE

    @property
    def window_bytes(self) -> int:
        return self.tokenization.window_bytes

    @property
    def tokens(self) -> np.ndarray:
        """The whole file as a read-only memory map [N, 64, channels] (for sequential reads; ``read`` for samples),
        once every block is verified."""
        self.verify_rows(0, self.manifest["windows"])
        return np.load(self.path, mmap_mode="r")

    @property
    def fix(self) -> str:
        return f"materialize {self.tokenization.window_store_asset}"

    def _blocks_of(self, first: np.ndarray, last: np.ndarray) -> np.ndarray:
        """The blocks holding the bytes of rows ``first`` .. ``last`` (inclusive, paired arrays)."""
        _, offset, _ = self._open()
        size = int(self.manifest["block_bytes"])
        lo = (offset + first.astype(np.int64) * self.window_bytes) // size
        hi = (offset + (last.astype(np.int64) + 1) * self.window_bytes - 1) // size
        if lo.size == 1:
            return np.arange(int(lo[0]), int(hi[0]) + 1)
        return np.unique(np.concatenate([np.arange(a, b + 1) for a, b in zip(lo.tolist(), hi.tolist())]))

    def _verify_blocks(self, blocks: np.ndarray) -> None:
        hashes = self.manifest["block_sha256"]
        if self._verified is None:
            self._verified = np.zeros(len(hashes), dtype=bool)
        todo = [int(k) for k in blocks if not self._verified[k]]
        if not todo:
            return
        fd, offset, _ = self._open()
        verify_blocks(self.path, hashes, int(self.manifest["block_bytes"]), todo, self.fix, self._describe, fd)
        self._verified[todo] = True

    def _describe(self, block: int) -> str:
        """What block ``block`` of tokens.npy holds: its rows and their days."""
        _, offset, _ = self._open()
        size, n = int(self.manifest["block_bytes"]), int(self.manifest["windows"])
        first = max(0, (block * size - offset) // self.window_bytes)
        last = min(n - 1, ((block + 1) * size - 1 - offset) // self.window_bytes)
        if n == 0 or last < 0:
            return "the file's header"
        starts = self.days["first_row"].to_numpy()
        dates = self.days["date"]
        day = [dates[int(np.searchsorted(starts, r, "right") - 1)] for r in (first, last)]
        return f"rows {first:,}..{last:,}, days {day[0]} .. {day[1]}"

    def verify_rows(self, lo: int, hi: int) -> None:
        """Verify the blocks of tokens.npy that hold rows ``lo`` .. ``hi - 1`` (each block once per open store; the
        file's header with the first); ``CorruptFileError`` naming the first damaged block."""
        if self._verified is not None and self._verified.all():
            return
        if hi <= lo:
            return
        blocks = self._blocks_of(np.array([lo]), np.array([hi - 1]))
        self._verify_blocks(np.union1d(blocks, [0]))

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_file": None}

    def _open(self) -> tuple:
        if self._file is None:
            try:
                with open(self.path, "rb") as fh:
                    version = np.lib.format.read_magic(fh)
                    read_header = (
                        np.lib.format.read_array_header_1_0
                        if version == (1, 0)
                        else np.lib.format.read_array_header_2_0
                    )
                    shape, _, dtype = read_header(fh)
                    offset = fh.tell()
            except ValueError as exc:  # a damaged header: numpy's own words, then the fix
                raise CorruptFileError(f"{self.path} has no readable array header ({exc}): {self.fix}") from None
            if shape != (self.manifest["windows"], N_TOKENS, self.tokenization.n_channels) or dtype != np.dtype("<f4"):
                raise StaleStoreError(f"{self.path} holds {dtype} {shape}, not what its manifest says: {self.fix}")
            size = self.path.stat().st_size
            if size != offset + shape[0] * self.window_bytes:
                raise CorruptFileError(
                    f"{self.path} is not the file its manifest records: it holds {size:,} bytes, its {shape[0]:,} "
                    f"windows take {offset + shape[0] * self.window_bytes:,} (truncated or extended since it was "
                    f"written): {self.fix}"
                )
            fd = os.open(self.path, os.O_RDONLY)
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no read-ahead around a sampled window
            self._file = (fd, offset, ThreadPoolExecutor(READ_THREADS, thread_name_prefix="window-store"))
        return self._file

    @property
    def day_of_row(self) -> np.ndarray:
        """(N,) int32: the index into ``days`` of every row."""
        return np.repeat(np.arange(self.days.height, dtype=np.int32), self.days["windows"].to_numpy())

    def read(self, rows: np.ndarray) -> np.ndarray:
        """The windows of store ``rows`` (distinct), float32 [len(rows), 64, 9], in the order asked."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= self.manifest["windows"]):
            raise IndexError(f"rows outside the window store of {self.asset} (0 .. {self.manifest['windows'] - 1})")
        fd, offset, pool = self._open()
        order = np.argsort(rows, kind="stable")
        ordered = rows[order]
        buffer = np.empty((rows.size, N_TOKENS, self.tokenization.n_channels), dtype=np.float32)
        raw = memoryview(buffer.reshape(-1).view(np.uint8))
        breaks = np.flatnonzero(np.diff(ordered) != 1) + 1
        starts, ends = np.r_[0, breaks], np.r_[breaks, rows.size]
        if rows.size and not (self._verified is not None and self._verified.all()):
            # the blocks this read touches, verified first (once each): no window of a damaged block is served
            self._verify_blocks(self._blocks_of(ordered[starts], ordered[ends - 1]))

        def read_run(k: int) -> None:
            lo, hi = int(starts[k]), int(ends[k])
            view = raw[lo * self.window_bytes : hi * self.window_bytes]
            if os.preadv(fd, [view], offset + int(ordered[lo]) * self.window_bytes) != len(view):
                raise StaleStoreError(f"{self.path} is shorter than its manifest says: re-{self.fix}")

        if rows.size:
            list(pool.map(read_run, range(starts.size)))
        out = np.empty_like(buffer)
        out[order] = buffer
        return out


def open_store(settings: Settings, tok: Tokenization) -> WindowStore:
    """The store of ``tok``'s tokens for the settings' cut; ``StaleStoreError`` naming what to re-materialize when it is
    missing, was built for another cut, or from shards other than the warehouse's current ones."""
    wh, asset, fix = settings.warehouse, tok.tokens_asset, f"materialize {tok.window_store_asset}"
    folder = wh.window_store_dir(asset)
    manifest = read_manifest(folder)
    if manifest is None:
        raise StaleStoreError(f"no window store of {asset} under {folder}: {fix}")
    if manifest["train_end"] != store_cut(settings):
        raise StaleStoreError(
            f"the window store of {asset} ({folder}) was built for the training cut {manifest['train_end']}, "
            f"not {store_cut(settings)} (the last fold's): {fix}"
        )
    _, metas = training_shard_days(settings, asset)
    now = digest([m["content_hash"] for m in metas])
    if now != manifest["shards_digest"]:
        raise StaleStoreError(
            f"the window store of {asset} ({folder}) was built from other {asset} shards (digest "
            f"{manifest['shards_digest'][:12]}, the warehouse's is {now[:12]}): {fix}"
        )
    if not manifest.get("block_sha256") or not manifest.get("block_bytes"):
        raise StaleStoreError(
            f"the window store of {asset} ({folder}) was built by an older version (no block checksums of "
            f"{TOKENS_FILE} in its manifest): {fix}"
        )
    for name in (ROWS_FILE, DAYS_FILE):  # small: hashed whole, on every open
        verify_file(folder / name, manifest[_HASHED[name]], fix)
    days = exact.read_parquet(folder / DAYS_FILE)
    rows = exact.read_parquet(folder / ROWS_FILE)
    if rows.height != manifest["windows"] or days.height != manifest["days"]:
        raise StaleStoreError(f"the window store of {asset} ({folder}) does not match its manifest: {fix}")
    store = WindowStore(folder, manifest, days, rows, tok)
    store.verify_rows(0, manifest["windows"])  # tokens.npy: every block against the build's hashes, once per open
    return store


__all__ = [
    "CorruptFileError",
    "StaleStoreError",
    "WindowStore",
    "open_store",
    "training_shard_days",
]
