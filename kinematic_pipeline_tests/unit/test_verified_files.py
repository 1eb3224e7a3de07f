"""Model and store files verified against the sha256 their writer recorded, whatever their mtime says: a byte flipped
with the mtime put back (bit rot, ``cp -p`` / ``rsync -a`` / ``tar x`` after a damaged copy) is refused in one line
naming the file and the fix; a large file is checked per 64 MB block and the line names the block."""

from __future__ import annotations

import hashlib
import io
import os
import time

import pytest

from kinematic_pipeline.warehouse.atomic import file_sha256
from kinematic_pipeline.warehouse.verified import (
    BlockHasher,
    CorruptFileError,
    verified_bytes,
    verify_blocks,
    verify_file,
    verify_model_folder,
    write_model_manifest,
)


def flip_keeping_mtime(path, offset: int | None = None) -> None:
    """One bit of ``path`` flipped in place, its size and mtime_ns (and atime) put back as they were."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2 if offset is None else offset] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns and path.stat().st_size == st.st_size


def test_a_byte_flipped_with_the_mtime_put_back_is_refused(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"x" * 1000)
    sha = file_sha256(path)
    assert verify_file(path, sha, "fix it") == path
    flip_keeping_mtime(path)
    with pytest.raises(CorruptFileError, match=r"weights.bin .* is not the file its manifest records.*: fix it$"):
        verify_file(path, sha, "fix it")
    with pytest.raises(CorruptFileError, match="is not the file its manifest records"):
        verified_bytes(path, sha, "fix it")
    path.write_bytes(path.read_bytes()[:10])  # a truncation
    with pytest.raises(CorruptFileError, match=r"\(10 bytes\) is not the file"):
        verify_file(path, sha, "fix it")
    path.unlink()
    with pytest.raises(CorruptFileError, match="is missing"):
        verify_file(path, sha, "fix it")


def test_an_old_sidecar_is_no_proof(tmp_path):
    """A ``<file>.verified`` an older version wrote (size, mtime_ns, sha256) is ignored: the bytes are hashed."""
    import json

    path = tmp_path / "model.pt"
    path.write_bytes(os.urandom(4096))
    sha = file_sha256(path)
    flip_keeping_mtime(path)
    st = path.stat()
    record = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha}
    (tmp_path / "model.pt.verified").write_text(json.dumps(record))
    with pytest.raises(CorruptFileError, match="model.pt"):
        verify_file(path, sha, "fix it")


def test_a_model_folder_with_a_byte_flipped_and_its_mtime_kept_is_refused_on_every_load(tmp_path):
    folder = tmp_path / "adapter"
    (folder / "adapter").mkdir(parents=True)
    files = [folder / "adapter" / "adapter_model.safetensors", folder / "adapter" / "adapter_config.json"]
    files[0].write_bytes(os.urandom(10_000))
    files[1].write_text('{"r": 8}')
    write_model_manifest(folder, files)
    for _ in range(2):  # verified twice: nothing remembered makes the second load trust the first
        assert set(verify_model_folder(folder, "re-materialize x_adapter")) == {
            "adapter/adapter_model.safetensors",
            "adapter/adapter_config.json",
        }
    flip_keeping_mtime(files[0])
    with pytest.raises(CorruptFileError, match=r"adapter_model.safetensors .*: re-materialize x_adapter$"):
        verify_model_folder(folder, "re-materialize x_adapter")


def test_block_hashes_are_each_blocks_sha256_and_a_damaged_block_is_named(tmp_path):
    data = os.urandom(10_000)
    out = io.BytesIO()
    writer = BlockHasher(out, block_bytes=4096)
    for piece in (data[:100], data[100:5000], data[5000:]):  # writes that do not fall on block bounds
        writer.write(piece)
    blocks = [hashlib.sha256(data[k : k + 4096]).hexdigest() for k in range(0, len(data), 4096)]
    assert writer.block_hashes() == blocks and writer.hexdigest() == hashlib.sha256(data).hexdigest()
    path = tmp_path / "tokens.npy"
    path.write_bytes(data)
    verify_blocks(path, blocks, 4096, range(3), "materialize it")
    flip_keeping_mtime(path, offset=5000)  # in block 1
    verify_blocks(path, blocks, 4096, [0, 2], "materialize it")  # the blocks a read does not touch still pass
    with pytest.raises(CorruptFileError, match=r"tokens.npy is not the file .*block 1 \(bytes 4,096..8,192, rows"):
        verify_blocks(path, blocks, 4096, [1, 2], "materialize it", describe=lambda k: "rows of block")
    path.write_bytes(data[:6000])  # truncated: the blocks past its end hash short
    with pytest.raises(CorruptFileError, match=r"block 1 .*\(and 1 more block\(s\)\).*: materialize it$"):
        verify_blocks(path, blocks, 4096, range(3), "materialize it")


def test_a_process_hashes_an_unchanged_file_once_and_any_write_since_again(tmp_path, monkeypatch):
    """Within one process a file already hashed is not hashed again while it is the same file (device, inode, size,
    mtime, ctime); a byte flipped with the mtime put back moves the ctime, so the next verification hashes and
    refuses it. Files changed less than ``RACY_NS`` before (here: all, by default) are hashed every time."""
    from kinematic_pipeline.warehouse import verified

    hashed = {"files": 0, "blocks": 0}
    real_file, real_block = verified.file_sha256, verified.block_sha256

    def count(kind, fn):
        def counted(*args):
            hashed[kind] += 1
            return fn(*args)

        return counted

    monkeypatch.setattr(verified, "file_sha256", count("files", real_file))
    monkeypatch.setattr(verified, "block_sha256", count("blocks", real_block))
    path, store = tmp_path / "model.pt", tmp_path / "tokens.npy"
    path.write_bytes(os.urandom(4096))
    store.write_bytes(os.urandom(3 * 4096))
    sha = file_sha256(path)
    blocks = [hashlib.sha256(store.read_bytes()[k : k + 4096]).hexdigest() for k in range(0, 3 * 4096, 4096)]
    for _ in range(2):  # just written: racy, hashed on every verification
        verify_file(path, sha, "fix it")
        verify_blocks(store, blocks, 4096, range(3), "fix it")
    assert hashed == {"files": 2, "blocks": 6}

    monkeypatch.setattr(verified, "RACY_NS", 0)  # as if written long ago
    for _ in range(3):
        verify_file(path, sha, "fix it")
        verify_blocks(store, blocks, 4096, range(3), "fix it")
    assert hashed == {"files": 3, "blocks": 9}  # once each, then remembered
    time.sleep(0.05)  # past the kernel's timestamp tick
    flip_keeping_mtime(path)
    flip_keeping_mtime(store, offset=5000)  # in block 1
    with pytest.raises(CorruptFileError, match="model.pt .* is not the file its manifest records"):
        verify_file(path, sha, "fix it")
    with pytest.raises(CorruptFileError, match=r"block 1 \(bytes 4,096..8,192\)"):
        verify_blocks(store, blocks, 4096, range(3), "fix it")
    assert hashed == {"files": 4, "blocks": 12}
    copy = tmp_path / "copy.pt"  # a copy is a new inode: hashed, whatever its stat says
    copy.write_bytes(path.read_bytes())
    os.utime(copy, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns))
    with pytest.raises(CorruptFileError, match="copy.pt"):
        verify_file(copy, sha, "fix it")
    assert hashed["files"] == 5
