"""Model and store files checked against the sha256 their manifest recorded, before anything reads them.

A window store's ``tokens.npy`` (5 GB a tokenization on the real file), a foundation's ``model.pt``, an adapter's
files and a probe's model are each listed with their sha256 by whoever wrote them (the store's ``manifest.parquet``,
a model folder's ``files.json``, a probe's ``fit.json``). ``verify_file`` compares the bytes on disk with that
record and raises ``CorruptFileError`` (one line: the file, both hashes, the fix) when they differ: one flipped bit,
an edit, a truncation. A file whose bytes were verified once is not hashed again while its (size, mtime_ns) stay
those it was verified at: the process remembers it, and a sidecar ``<file>.verified`` (size, mtime_ns, sha256)
carries it to the next process; a writer that computed the hash while writing records the sidecar at once
(``record_verified``), so a 5 GB store costs a stat and a small read per open, not a re-hash. A write through the
file system changes the mtime, so any later change is hashed again; what keeps both the size and mtime_ns of a
damaged file (a restore that sets times, bit rot under the file system) is caught only once its sidecar is removed
(``rm <file>.verified``: the next open re-hashes).
"""

from __future__ import annotations

import json
from pathlib import Path

from kinematic_pipeline.atomic_files import file_sha256, write_bytes_atomic

SIDECAR_SUFFIX = ".verified"
_VERIFIED: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256, this process


class CorruptFileError(ValueError):
    """A model or store file whose bytes differ from the sha256 its manifest recorded (or that is missing)."""


def sidecar(path: Path) -> Path:
    return path.with_name(path.name + SIDECAR_SUFFIX)


def record_verified(path: Path, sha256: str) -> None:
    """Record that ``path`` holds ``sha256`` as of now (its writer hashed what it wrote)."""
    path = Path(path)
    st = path.stat()
    _VERIFIED[(str(path), st.st_size, st.st_mtime_ns)] = sha256
    record = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256}
    try:
        write_bytes_atomic(sidecar(path), json.dumps(record).encode())
    except OSError:  # a read-only warehouse: the next process hashes again
        pass


def verify_file(path: Path, sha256: str, fix: str) -> Path:
    """``path`` once its bytes are those of ``sha256``; ``CorruptFileError`` naming the file, both hashes and
    ``fix`` (what to re-materialize) otherwise."""
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise CorruptFileError(f"{path} is missing (its manifest records sha256 {sha256[:16]}): {fix}") from None
    key = (str(path), st.st_size, st.st_mtime_ns)
    if _VERIFIED.get(key) == sha256:
        return path
    try:
        seen = json.loads(sidecar(path).read_text())
    except (OSError, ValueError):
        seen = None
    if seen == {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256}:
        _VERIFIED[key] = sha256
        return path
    actual = file_sha256(path)
    if actual != sha256:
        raise CorruptFileError(
            f"{path} ({st.st_size:,} bytes) is not the file its manifest records (sha256 {actual[:16]}, the manifest "
            f"says {sha256[:16]}): damaged or edited after it was written: {fix}"
        )
    record_verified(path, sha256)
    return path


MODEL_MANIFEST = "files.json"  # in a model folder: {relative path: sha256} of the files a load reads


def write_model_manifest(folder: Path, files: list[Path]) -> dict[str, str]:
    """Record the sha256 of ``files`` (under ``folder``) in ``folder/files.json``, each marked verified."""
    folder = Path(folder)
    hashes = {str(Path(f).relative_to(folder)): file_sha256(Path(f)) for f in files}
    for name, sha in hashes.items():
        record_verified(folder / name, sha)
    write_bytes_atomic(folder / MODEL_MANIFEST, json.dumps(hashes, indent=1, sort_keys=True).encode())
    return hashes


def verify_model_folder(folder: Path, fix: str) -> dict[str, str]:
    """Every file ``folder/files.json`` lists, verified (``verify_file``); ``CorruptFileError`` when the record
    is missing (a folder written by an older version) or damaged."""
    folder = Path(folder)
    manifest = folder / MODEL_MANIFEST
    try:
        hashes = json.loads(manifest.read_text())
        if not isinstance(hashes, dict) or not hashes:
            raise ValueError("no files listed")
    except FileNotFoundError:
        raise CorruptFileError(f"{manifest} is missing (a model saved by an older version): {fix}") from None
    except ValueError as exc:
        raise CorruptFileError(f"{manifest} is not a model's file list ({exc}): {fix}") from None
    for name, sha in hashes.items():
        verify_file(folder / name, sha, fix)
    return hashes
