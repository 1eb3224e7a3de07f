"""Files that appear whole or not at all: atomic Parquet writes, folders swapped in by one rename, hashes.

The one way the package writes a file outside a staging folder: ``write_bytes_atomic`` (``write_text_atomic``,
``write_parquet_atomic``); a figure or a ``torch.save`` goes to a ``BytesIO`` first. The rename replaces a symbolic
link planted at the final path, never writes through it (``test_one_way_to_write.py``). A killed writer leaves the
old file (or folder) or the new one, never a partial one: files are written under a temporary name and renamed; a
folder of several files is staged and exchanged with the old one in one
``renameat2(RENAME_EXCHANGE)`` (two renames where the kernel cannot). ``durable=True`` (``KP_DURABLE_WRITES=1``,
read by ``config.load_settings``) also fsyncs before each rename, which survives a power loss. No dagster.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import hashlib
import os
import tempfile
from pathlib import Path

import polars as pl

from kinematic_pipeline.warehouse.no_follow import LinkedFileError

PARQUET_COMPRESSION = "zstd"  # fixed writer options: the same frame always gives the same bytes


def digest(hashes: list[str]) -> str:
    """sha256 over a list of content hashes, concatenated in order (the lineage of a set of shards)."""
    return hashlib.sha256("".join(hashes).encode()).hexdigest()


def combined_hash(hashes: list[str]) -> str:
    """One hash for metadata: the shard's own for a single shard, else the ``digest`` of all of them."""
    return hashes[0] if len(hashes) == 1 else digest(hashes)


def file_sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def write_parquet_atomic(
    frame: pl.DataFrame, path: Path, compression: str = PARQUET_COMPRESSION, durable: bool = False
) -> str:
    """Write ``frame`` to ``path`` via a temporary file and an atomic rename; return its sha256.

    Readers (DuckDB globs ``*.parquet``, the training loader) never see a partial file: the temporary
    name does not end in ``.parquet``, and ``os.replace`` swaps the complete file in at once. A temporary
    file left by a killed writer of the same shard is removed here (one writer per shard at a time).
    A shard that already holds the same bytes is left alone, mtime included: re-running a partition
    whose input did not change touches nothing.
    """
    return _write_atomic(path, lambda tmp: frame.write_parquet(tmp, compression=compression, statistics=True), durable)


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


UMASK = _current_umask()  # read once, at import (os.umask can only be read by setting it)


def write_bytes_atomic(path: Path, data: bytes, durable: bool = False) -> str:
    """``data`` to ``path`` like ``write_parquet_atomic`` (temporary file, atomic rename, same bytes left alone)."""
    return _write_atomic(path, lambda tmp: Path(tmp).write_bytes(data), durable)


def write_text_atomic(path: Path, text: str, durable: bool = False) -> str:
    """``text`` (UTF-8) to ``path`` by ``write_bytes_atomic``; its sha256."""
    return write_bytes_atomic(path, text.encode(), durable)


def _remove_stale_temporaries(path: Path) -> None:
    """Remove the temporary files of ``path`` that a killed writer left: those no process holds a lock on. A live
    writer holds an exclusive ``flock`` on its temporary file from its creation to its rename (the kernel drops it
    when the writer dies), so two writers of one target (every variant's backtests write the fold's Buy & Hold
    file) never remove each other's file mid-write."""
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        try:
            fd = os.open(stale, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:  # gone already, or a link: not ours to follow
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError: a writer holds it, alive
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
        except BlockingIOError:
            continue
        finally:
            os.close(fd)


_WAREHOUSE_ROOTS: set[Path] = set()  # every warehouse this process has opened (``Warehouse`` registers its root)


def register_warehouse(root: Path) -> None:
    """``root`` is a warehouse: a file written under it must stay in it (``inside_warehouse``)."""
    _WAREHOUSE_ROOTS.add(Path(os.path.abspath(root)))


def inside_warehouse(folder: Path) -> None:
    """``LinkedFileError`` naming the link when ``folder``, under a registered warehouse, resolves outside it: a
    folder of the warehouse planted as a symbolic link to one elsewhere (``reports/`` -> ``/etc``) never receives a
    file. Links that stay inside the warehouse, and a warehouse that is itself a link, are fine."""
    folder = Path(os.path.abspath(folder))
    for root in _WAREHOUSE_ROOTS:
        if not folder.is_relative_to(root):
            continue
        real_root, step = root.resolve(), root
        for part in folder.relative_to(root).parts:
            step = step / part
            if step.is_symlink() and not step.resolve().is_relative_to(real_root):
                raise LinkedFileError(
                    f"{step} is a symbolic link to {step.resolve()}, outside the warehouse {root}: nothing is "
                    "written through it; remove the link and retry"
                )


def _write_atomic(path: Path, write, durable: bool) -> str:
    path = Path(path)
    inside_warehouse(path.parent)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(path)  # left by a writer that was killed: repair
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held until the rename: this file is a live writer's
        os.fchmod(fd, 0o666 & ~UMASK)  # mkstemp's 0600 would become the file's: the user's umask decides, as for open()
        write(tmp)
        if durable:
            _fsync_file(Path(tmp))
        sha = file_sha256(Path(tmp))
        if holds(path, sha, os.path.getsize(tmp)):
            os.unlink(tmp)  # a re-run with the same input: the file and its mtime stay untouched
        else:
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    finally:
        os.close(fd)
    return sha


def write_staged_file(frame: pl.DataFrame, path: Path, compression: str, durable: bool = False) -> str:
    """Write ``frame`` to a fresh ``path`` in a staging folder (swapped in later as a whole); return its sha256."""
    frame.write_parquet(path, compression=compression, statistics=True)
    if durable:
        _fsync_file(path)
    return file_sha256(path)


def holds(path: Path, sha: str, size: int) -> bool:
    """Whether ``path`` already holds exactly the bytes with sha256 ``sha`` (size compared first). A symbolic link
    never does (what it points at may hold them): it is replaced by the file itself."""
    try:
        return not path.is_symlink() and path.stat().st_size == size and file_sha256(path) == sha
    except FileNotFoundError:
        return False


def same_files(new: Path, old: Path) -> bool:
    """Whether folder ``old`` holds exactly the files of ``new``, byte for byte."""
    if not old.is_dir():
        return False
    names = sorted(p.name for p in new.iterdir())
    if names != sorted(p.name for p in old.iterdir()):
        return False
    return all(holds(old / n, file_sha256(new / n), (new / n).stat().st_size) for n in names)


def remove_if_exists(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        Path(path).unlink()


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


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


def swap_in_folder(new: Path, final: Path, durable: bool = False) -> None:
    """Replace folder ``final`` by folder ``new`` in one atomic step (see ``_swap_in``); the old one, if any,
    is left at ``new``'s path for the caller to remove."""
    final.parent.mkdir(parents=True, exist_ok=True)
    if durable:
        _fsync_dir(new)
    _swap_in(new, final)
    if durable:
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
