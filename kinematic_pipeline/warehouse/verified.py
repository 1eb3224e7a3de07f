"""Model and store files checked against the sha256 their manifest recorded, every time they are read.

A window store's ``tokens.npy`` (5 GB a tokenization on the real file), a foundation's ``model.pt``, an adapter's
files and a probe's model are each listed with their sha256 by whoever wrote them (the store's ``manifest.parquet``,
a model folder's ``files.json``, a probe's ``fit.json``). ``verify_file`` compares the bytes on disk with that
record and raises ``CorruptFileError`` (one line: the file, both hashes, the fix) when they differ: one flipped bit,
an edit, a truncation.

No stat is taken as proof that a file is the one its manifest records. Real disks corrupt bytes without touching a
file's mtime, and ``cp -p``, ``rsync -a`` and ``tar x`` put the mtime back after a damaged copy, so a (size, mtime_ns)
record would pass a damaged file. Small files (a model folder's files, a store's row and day index: up to a few
hundred MB) are hashed whole at a load. A large file is checked by blocks (``BLOCK_BYTES``, 64 MB, as HDFS and ZFS do):
its writer records the sha256 of every block (``BlockHasher``) and a reader verifies the blocks it is about to read
(``verify_blocks``: several in flight, each once per open), which names the damaged block, not just the file.
``<file>.verified`` sidecars written by older versions are ignored (and skipped by the listings of a model's files).

What one process has hashed it does not hash again while the file is the same file (``process_sha256``,
``verify_blocks``): same device, inode, size, mtime and ctime, its last change at least ``RACY_NS`` older than the
hash. Any write to a file, and putting its mtime back, moves its ctime, which no user-space tool can set back; a copy
or a re-materialized file is a new inode. A worker that opens the same 5 GB store for 20 adapters thus hashes it once,
and a flipped byte with the mtime put back is still refused at the next open. What a new process reads it hashes
again (each ``materialize`` starts new workers). What this does not see is a byte the disk changes by itself while
one process runs, which re-hashing would not see either while the page cache serves the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kinematic_pipeline.warehouse.atomic import file_sha256, write_bytes_atomic

SIDECAR_SUFFIX = ".verified"  # older versions' (size, mtime_ns, sha256) record beside a file: never trusted now
BLOCK_BYTES = 64 << 20  # a large file's checksum block (the last one is shorter)
VERIFY_THREADS = 8  # blocks hashed at once (hashlib releases the GIL: a cached file verifies at several GB/s)
_READ_BYTES = 4 << 20  # what one read of a block asks for (bounds the memory of a verification)
RACY_NS = 2_000_000_000  # a file changed less than this before it was hashed is hashed again at its next read
_HASHED: dict[tuple, str] = {}  # (path, part, identity) -> the sha256 this process computed of those bytes


class CorruptFileError(ValueError):
    """A model or store file whose bytes differ from the sha256 its manifest recorded (or that is missing)."""


def sidecar(path: Path) -> Path:
    """The sidecar an older version wrote beside ``path`` (ignored: see the module's docstring)."""
    return path.with_name(path.name + SIDECAR_SUFFIX)


def without_sidecars(paths: list[Path]) -> list[Path]:
    """``paths`` less older versions' sidecars (a cache, never part of a model's identity)."""
    return [p for p in paths if not p.name.endswith(SIDECAR_SUFFIX)]


def _missing(path: Path, sha256: str, fix: str) -> CorruptFileError:
    return CorruptFileError(f"{path} is missing (its manifest records sha256 {sha256[:16]}): {fix}")


def _mismatch(path: Path, size: int, actual: str, sha256: str, fix: str) -> CorruptFileError:
    return CorruptFileError(
        f"{path} ({size:,} bytes) is not the file its manifest records (sha256 {actual[:16]}, the manifest "
        f"says {sha256[:16]}): damaged or edited after it was written: {fix}"
    )


def _identity(st: os.stat_result) -> tuple | None:
    """A file's (device, inode, size, mtime, ctime); None while its last change is less than ``RACY_NS`` old (a
    write in the same timestamp tick would leave them as they are: git's "racy" entries)."""
    if time.time_ns() - st.st_ctime_ns < RACY_NS:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def hashed_once(path: Path, part: object, st: os.stat_result, compute: Callable[[], str]) -> str:
    """``compute()`` (the sha256 of ``part`` of ``path``: None for the whole file, a block's index), or what this
    process computed for the same part of the same file (``st``, taken before the hash: a change while it runs is
    a new identity next time)."""
    identity = _identity(st)
    if identity is None:
        return compute()
    key = (str(path), part, identity)
    sha = _HASHED.get(key)
    if sha is None:
        sha = _HASHED[key] = compute()
    return sha


def forget_hashes() -> None:
    """Forget what this process hashed: the next verification of every file hashes it (benchmarks)."""
    _HASHED.clear()


def process_sha256(path: Path) -> str:
    """``file_sha256(path)``, hashed once per process while the file stays the same file (``hashed_once``)."""
    return hashed_once(Path(path), None, os.stat(path), lambda: file_sha256(path))


def verify_file(path: Path, sha256: str, fix: str) -> Path:
    """``path`` once its bytes are those of ``sha256`` (hashed now, or earlier by this process while it stays the same
    file: ``process_sha256``); ``CorruptFileError`` naming the file, both hashes and ``fix`` otherwise."""
    path = Path(path)
    try:
        actual, size = process_sha256(path), path.stat().st_size
    except FileNotFoundError:
        raise _missing(path, sha256, fix) from None
    if actual != sha256:
        raise _mismatch(path, size, actual, sha256, fix)
    return path


def verified_bytes(path: Path, sha256: str, fix: str) -> bytes:
    """The bytes of ``path``, read once and checked against ``sha256`` (what a load then parses is what was
    hashed); ``CorruptFileError`` as ``verify_file``."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise _missing(path, sha256, fix) from None
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        raise _mismatch(path, len(data), actual, sha256, fix)
    return data


MODEL_MANIFEST = "files.json"  # in a model folder: {relative path: sha256} of the files a load reads


def write_model_manifest(folder: Path, files: list[Path]) -> dict[str, str]:
    """Record the sha256 of ``files`` (under ``folder``) in ``folder/files.json``."""
    folder = Path(folder)
    hashes = {str(Path(f).relative_to(folder)): file_sha256(Path(f)) for f in files}
    write_bytes_atomic(folder / MODEL_MANIFEST, json.dumps(hashes, indent=1, sort_keys=True).encode())
    return hashes


def model_manifest(folder: Path, fix: str) -> dict[str, str]:
    """``folder/files.json``: {relative path: sha256}; ``CorruptFileError`` when it is missing (a folder written by
    an older version) or is not such a list."""
    manifest = Path(folder) / MODEL_MANIFEST
    try:
        hashes = json.loads(manifest.read_text())
        if not isinstance(hashes, dict) or not hashes:
            raise ValueError("no files listed")
    except FileNotFoundError:
        raise CorruptFileError(f"{manifest} is missing (a model saved by an older version): {fix}") from None
    except ValueError as exc:
        raise CorruptFileError(f"{manifest} is not a model's file list ({exc}): {fix}") from None
    return hashes


def verify_model_folder(folder: Path, fix: str) -> dict[str, str]:
    """Every file ``folder/files.json`` lists, hashed now and verified (``verify_file``); ``CorruptFileError`` when
    the record is missing (a folder written by an older version) or a file is damaged."""
    folder = Path(folder)
    hashes = model_manifest(folder, fix)
    for name, sha in hashes.items():
        verify_file(folder / name, sha, fix)
    return hashes


# large files: one sha256 per block, recorded by the writer, verified per block by the reader


class BlockHasher:
    """A binary file being written that hashes what goes through it: the whole file's sha256 (``hexdigest``) and
    every ``block_bytes`` block's (``block_hashes``)."""

    def __init__(self, out, block_bytes: int = BLOCK_BYTES) -> None:
        self.out, self.block_bytes = out, int(block_bytes)
        self.sha, self.block, self.filled, self.blocks = hashlib.sha256(), hashlib.sha256(), 0, []

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        self.sha.update(view)
        while view.nbytes:
            take = min(view.nbytes, self.block_bytes - self.filled)
            self.block.update(view[:take])
            self.filled += take
            view = view[take:]
            if self.filled == self.block_bytes:
                self.blocks.append(self.block.hexdigest())
                self.block, self.filled = hashlib.sha256(), 0
        return self.out.write(data)

    def hexdigest(self) -> str:
        return self.sha.hexdigest()

    def block_hashes(self) -> list[str]:
        """Every block's sha256, the last (shorter) one included: call once everything is written."""
        return self.blocks + ([self.block.hexdigest()] if self.filled else [])


def block_sha256(fd: int, index: int, block_bytes: int) -> str:
    """The sha256 of block ``index`` of the open file ``fd`` (what is there: a truncated file hashes short)."""
    sha, pos, end = hashlib.sha256(), index * block_bytes, (index + 1) * block_bytes
    while pos < end:
        data = os.pread(fd, min(_READ_BYTES, end - pos), pos)
        if not data:
            break
        sha.update(data)
        pos += len(data)
    return sha.hexdigest()


def verify_blocks(
    path: Path,
    hashes: list[str],
    block_bytes: int,
    blocks: Iterable[int],
    fix: str,
    describe: Callable[[int], str] | None = None,
    fd: int | None = None,
) -> None:
    """Blocks ``blocks`` of ``path`` hashed now (several at once) and compared with ``hashes`` (the writer's); one
    ``CorruptFileError`` naming the file, the first damaged block (``describe(k)``: what it holds, e.g. its rows and
    days), both hashes and ``fix`` otherwise."""
    blocks = sorted(set(int(k) for k in blocks))
    if not blocks:
        return
    own = fd is None
    if own:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise CorruptFileError(f"{path} is missing: {fix}") from None
    try:
        st = os.fstat(fd)

        def block(k: int) -> str:
            return hashed_once(path, (block_bytes, k), st, lambda: block_sha256(fd, k, block_bytes))

        with ThreadPoolExecutor(min(VERIFY_THREADS, len(blocks)), thread_name_prefix="verify") as pool:
            actual = list(pool.map(block, blocks))
    finally:
        if own:
            os.close(fd)
    bad = [(k, a) for k, a in zip(blocks, actual) if a != hashes[k]]
    if bad:
        k, a = bad[0]
        lo, hi = k * block_bytes, (k + 1) * block_bytes
        what = f", {describe(k)}" if describe is not None else ""
        more = f" (and {len(bad) - 1} more block(s))" if len(bad) > 1 else ""
        raise CorruptFileError(
            f"{path} is not the file its manifest records: block {k} (bytes {lo:,}..{hi:,}{what}){more} has sha256 "
            f"{a[:16]}, the manifest says {hashes[k][:16]}: damaged since it was written: {fix}"
        )


# derived files (features, corpus statistics): the sha256 of each in a record of its own, verified at every read


def record_path(path: Path) -> Path:
    """Where the record of ``path`` lives: ``<folder's parent>/.<folder>.sha256/<name>``, outside the file's folder,
    so that a folder of Parquet files stays one (``pl.read_parquet(folder)`` refuses any other file in it)."""
    path = Path(path)
    return path.parent.parent / f".{path.parent.name}.sha256" / path.name


def write_record(path: Path, sha256: str, durable: bool = False) -> None:
    """Record ``sha256``, the hash of the bytes just written to ``path`` (``record_path``; ``verify_recorded`` checks
    it at every read)."""
    record = record_path(path)
    record.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(record, (sha256 + "\n").encode(), durable)


def verify_recorded(path: Path, fix: str) -> Path:
    """``path`` once its bytes are those its record (``write_record``) names; ``CorruptFileError`` naming the file
    and ``fix`` when they differ or the record is missing (a file written by an older version)."""
    path = Path(path)
    record = record_path(path)
    try:
        sha = record.read_text().strip()
    except FileNotFoundError:
        raise CorruptFileError(f"{record} is missing (written by an older version, or damaged): {fix}") from None
    return verify_file(path, sha, fix)
