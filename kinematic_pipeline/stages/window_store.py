"""The window-store stage: one token asset's training-period windows written into the store
(``kinematic_pipeline.window_store``: the format, its reader and its pins), built once per token asset and
training cut, under the store's lock, swapped in whole. The build streams ``tokens.npy`` through a hasher that
records the whole file's sha256 and every 64 MB block's (``verified.BlockHasher``: what an open verifies). What a
killed build or swap left in the staging folder (a half-written store, or the old one swapped out) is removed by the
next build of the same store, before anything else, whether it then rebuilds or finds the store current. No dagster
and no torch here.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
from tqdm.auto import tqdm

from kinematic_pipeline.config import Settings
from kinematic_pipeline.folds import store_cut
from kinematic_pipeline.pins import check_token_inputs
from kinematic_pipeline.tokenizations import Tokenization
from kinematic_pipeline.warehouse import exact_paths as exact
from kinematic_pipeline.warehouse.atomic import PARQUET_COMPRESSION, UMASK, digest, file_sha256, swap_in_folder
from kinematic_pipeline.warehouse.verified import BLOCK_BYTES, BlockHasher
from kinematic_pipeline.window_store import (
    DAYS_FILE,
    DAYS_SCHEMA,
    MANIFEST_FILE,
    MANIFEST_SCHEMA,
    ROWS_FILE,
    ROWS_SCHEMA,
    STORE_CODE_VERSION,
    TOKENS_FILE,
    read_manifest,
    training_shard_days,
)
from kinematic_pipeline.windows import N_TOKENS

STORE_LOCK_TIMEOUT_S = 3600.0  # a second builder waits for the first (a real store takes minutes)
BUILD_CHUNK_WINDOWS = 65_536  # windows read per Parquet call while building (~150 MB of tokens)


@dataclass(frozen=True)
class StoreSummary:
    asset: str
    folder: Path
    manifest: dict
    window_bytes: int  # one window of its tokenization: 64 x channels float32
    rebuilt: bool  # False: the store on disk already held exactly these shards (nothing was written)
    seconds: float = 0.0

    def __str__(self) -> str:
        m = self.manifest
        state = "built" if self.rebuilt else "unchanged"
        return f"{m['windows']:,} windows of {m['days']:,} days ({state}, {self.seconds:.0f} s)"

    def metadata(self) -> dict:
        """What the store's materialization shows (plain values)."""
        m = self.manifest
        return {
            "windows": m["windows"],
            "days": m["days"],
            "date_range": f"{m['first_day']} .. {m['last_day']} (train_end {m['train_end']})",
            "non_finite_windows": m["non_finite_windows"],
            "tokens_sha256": m["tokens_sha256"],
            "shards_digest": m["shards_digest"],
            "rebuilt": self.rebuilt,
            "gigabytes": round(m["windows"] * self.window_bytes / 1e9, 3),
            "stage_seconds": round(self.seconds, 1),
            "path": self.folder,
            "dagster/row_count": m["windows"],
        }


def materialize_window_store(settings: Settings, tok: Tokenization, progress: bool = True) -> StoreSummary:
    """Build (or keep, when it already holds exactly these shards) the store of ``tok``'s tokens for the cut: one writer
    at a time (a lock per store; a second waits, then finds it current), and a full disk named with the store."""
    import errno

    asset, store = tok.tokens_asset, tok.window_store_asset
    with settings.warehouse.day_lock(store, "store", timeout_s=STORE_LOCK_TIMEOUT_S):
        try:
            return _build_window_store(settings, tok, progress)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            folder = settings.warehouse.window_store_dir(asset)
            free = shutil.disk_usage(folder.parent if folder.parent.exists() else settings.warehouse.root).free
            raise OSError(
                exc.errno,
                f"no space left on the device building the {store} ({folder}; {free / 1e9:.1f} GB free, about "
                f"{_store_bytes(settings, tok) / 1e9:.1f} GB needed besides the old store): free space or move "
                "KP_WAREHOUSE",
            ) from None


def _store_bytes(settings: Settings, tok: Tokenization) -> int:
    """The size of ``tok``'s tokens.npy for the cut (windows x 64 x channels float32)."""
    _, metas = training_shard_days(settings, tok.tokens_asset)
    return sum(int(m["windows"]) for m in metas) * N_TOKENS * tok.n_channels * 4


def _build_window_store(settings: Settings, tok: Tokenization, progress: bool) -> StoreSummary:
    import time

    started = time.perf_counter()
    wh, asset, window = settings.warehouse, tok.tokens_asset, (N_TOKENS, tok.n_channels)
    days, metas = training_shard_days(settings, asset)
    if not days:
        raise ValueError(f"no {asset} windows on or before {store_cut(settings)}: materialize {asset} first")
    check_token_inputs(settings, asset, days)  # tokenized from the raw days on disk now, look-back included
    shards_digest = digest([m["content_hash"] for m in metas])
    final = wh.window_store_dir(asset)
    staging_root = final.parent / ".staging"
    clear_staging(staging_root, asset)  # before the check below: a current store leaves no staging behind either
    current = read_manifest(final)
    if current is not None and _holds(final, current, shards_digest, store_cut(settings)):
        return StoreSummary(
            asset, final, current, tok.window_bytes, rebuilt=False, seconds=time.perf_counter() - started
        )

    counts = np.array([m["windows"] for m in metas], dtype=np.int64)
    first_rows = np.concatenate([[0], np.cumsum(counts)[:-1]])
    total = int(counts.sum())
    staging_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=staging_root, prefix=f"{asset}."))
    try:
        tmp.chmod(0o777 & ~UMASK)  # mkdtemp's 0700 would become the store's: the user's umask decides
        rows = []
        bar = tqdm(total=len(days), desc=f"{asset} window store", unit="day", disable=not progress)
        # plain appends, hashed as they are written (a memory map would count every written page in the RSS)
        with open(tmp / TOKENS_FILE, "wb") as out:
            tokens_hash = BlockHasher(out, BLOCK_BYTES)
            header = {"descr": "<f4", "fortran_order": False, "shape": (total, *window)}
            np.lib.format.write_array_header_1_0(tokens_hash, header)
            for lo, hi in _chunks(counts, BUILD_CHUNK_WINDOWS):
                paths = wh.verified_shards(asset, days[lo:hi])  # the bytes its manifests record, or nothing
                frame = exact.read_parquet(paths, columns=["ticker", "date", "tokens"])
                _check_rows(frame, asset, days[lo:hi], counts[lo:hi])
                block = frame["tokens"].to_numpy().reshape(-1, *window).astype("<f4", copy=False)
                tokens_hash.write(np.ascontiguousarray(block).tobytes())
                rows.append(frame.select("date", "ticker", pl.Series("finite", np.isfinite(block).all(axis=(1, 2)))))
                bar.update(hi - lo)
            if wh.durable:
                out.flush()
                os.fsync(out.fileno())
        bar.close()
        row_frame = pl.concat(rows).cast(ROWS_SCHEMA)
        day_frame = pl.DataFrame(
            {
                "date": days,
                "first_row": first_rows,
                "windows": counts,
                "path": [wh.shard(asset, d).relative_to(wh.root).as_posix() for d in days],
                "content_hash": [m["content_hash"] for m in metas],
            },
            schema=DAYS_SCHEMA,
        )
        row_frame.write_parquet(tmp / ROWS_FILE, compression=PARQUET_COMPRESSION, statistics=True)
        day_frame.write_parquet(tmp / DAYS_FILE, compression=PARQUET_COMPRESSION, statistics=True)
        manifest = {
            "asset": asset,
            "train_end": store_cut(settings),
            "first_day": days[0],
            "last_day": days[-1],
            "days": len(days),
            "windows": total,
            "non_finite_windows": int((~row_frame["finite"]).sum()),
            "tokens_sha256": tokens_hash.hexdigest(),
            "rows_sha256": file_sha256(tmp / ROWS_FILE),
            "days_sha256": file_sha256(tmp / DAYS_FILE),
            "shards_digest": shards_digest,
            "code_version": STORE_CODE_VERSION,
            "block_bytes": BLOCK_BYTES,
            "block_sha256": tokens_hash.block_hashes(),
        }
        pl.DataFrame([manifest], schema=MANIFEST_SCHEMA).write_parquet(
            tmp / MANIFEST_FILE, compression=PARQUET_COMPRESSION
        )
        swap_in_folder(tmp, final, wh.durable)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # after the swap: the old store (if there was one)
    return StoreSummary(asset, final, manifest, tok.window_bytes, rebuilt=True, seconds=time.perf_counter() - started)


def clear_staging(staging_root: Path, asset: str) -> list[Path]:
    """Remove what a killed build or swap of ``asset``'s store left in ``staging_root`` (a half-written store, or the
    old store swapped out and not yet removed); the caller holds the store's lock. Returns what was removed."""
    removed = []
    for stale in sorted(staging_root.glob(f"{asset}.*")) if staging_root.is_dir() else []:
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)
        removed.append(stale)
    return removed


def _chunks(counts: np.ndarray, max_windows: int):
    """(lo, hi) day ranges of about ``max_windows`` windows each (at least one day)."""
    lo, acc = 0, 0
    for k, n in enumerate(counts):
        acc += int(n)
        if acc >= max_windows:
            yield lo, k + 1
            lo, acc = k + 1, 0
    if lo < len(counts):
        yield lo, len(counts)


def _check_rows(frame: pl.DataFrame, asset: str, days: list[dt.date], counts: np.ndarray) -> None:
    """The shards hold what their manifests say: per day, the recorded number of windows, dated that day."""
    got = frame.group_by("date").len()
    have = dict(zip(got["date"].to_list(), got["len"].to_list()))
    for day, n in zip(days, counts):
        if have.get(day, 0) != n:
            raise ValueError(
                f"{asset} shard {day} holds {have.get(day, 0)} windows dated {day}, its manifest says {n}: "
                f"re-materialize {asset} for {day}"
            )


def _holds(folder: Path, manifest: dict, shards_digest: str, train_end: dt.date) -> bool:
    """Whether the store in ``folder`` was built by this code for this cut from these shards, byte-intact."""
    if (manifest["shards_digest"], manifest["train_end"], manifest["code_version"]) != (
        shards_digest,
        train_end,
        STORE_CODE_VERSION,
    ):
        return False
    if manifest.get("block_bytes") != BLOCK_BYTES or not manifest.get("block_sha256"):
        return False  # built before block checksums (or with other blocks): rebuilt, its bytes unchanged
    files = {TOKENS_FILE: "tokens_sha256", ROWS_FILE: "rows_sha256", DAYS_FILE: "days_sha256"}
    return all((folder / f).exists() and file_sha256(folder / f) == manifest[k] for f, k in files.items())
