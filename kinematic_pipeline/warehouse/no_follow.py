"""Files opened in place, never through a symbolic link: the locks (a day's, the catalog's) and an appended trace.

Every other file is written whole by ``atomic`` (a rename over the final path replaces a link, never writes through
it). A lock must stay the same file while it is held, so it is opened in place: with ``O_NOFOLLOW``, so that a link
planted at its path (to a file outside the warehouse) is refused in one line naming it, and never truncated, so
that no run empties a file it was pointed at. No dagster.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

HOLDER_BYTES = 256  # a lock's holder line, padded to this width: written over in place, never truncated


class LinkedFileError(ValueError):
    """A file the package opens in place is a symbolic link (or not a plain file): refused, never followed."""


def open_no_follow(path: Path, flags: int, what: str = "file", create: bool = True) -> int:
    """A descriptor of ``path`` opened with ``flags | O_NOFOLLOW`` (and ``O_CREAT`` unless ``create`` is false;
    the mode ``open()`` would give, the umask deciding); ``LinkedFileError`` naming ``path`` when it is a symbolic
    link or not a plain file."""
    try:
        fd = os.open(path, flags | (os.O_CREAT if create else 0) | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW's answer for a link at the last component
            raise LinkedFileError(
                f"{path} is a symbolic link: a {what} is never opened through one (it may point outside the "
                "warehouse); remove the link and retry"
            ) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or a device planted there: never read or written
        os.close(fd)
        raise LinkedFileError(f"{path} is not a plain file: a {what} is only ever a plain file; remove it and retry")
    return fd


def own_file(fd: int) -> bool:
    """Whether the open file ``fd`` has one name only (a hard link elsewhere would share whatever is written)."""
    return os.fstat(fd).st_nlink == 1


def write_holder(fd: int, text: str) -> None:
    """``text`` at the start of the lock ``fd``, padded with spaces to ``HOLDER_BYTES`` (never truncated); only in a
    file of its own (``own_file``): a lock hard-linked to another file is held, its bytes left alone."""
    if own_file(fd):
        os.pwrite(fd, text.encode()[:HOLDER_BYTES].ljust(HOLDER_BYTES), 0)


def read_holder(fd: int) -> str:
    """The holder line of the lock ``fd`` ("" when none is written)."""
    return os.pread(fd, HOLDER_BYTES, 0).decode(errors="replace").strip()


def append_text(path: Path, text: str) -> None:
    """``text`` appended to ``path`` (created if missing), never through a symbolic link."""
    fd = open_no_follow(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
