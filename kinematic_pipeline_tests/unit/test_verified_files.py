"""Every model and store file is verified before use, through the real CLI on the ci warehouse ``.ci/run``
materialized (``KP_GOLDEN_WAREHOUSE``, its ``DAGSTER_HOME`` and profile in the environment).

One flipped byte and a truncation of each kind (a foundation's ``model.pt``, an adapter's weights, a window
store's ``tokens.npy``) are refused before anything reads them: the step fails with one message naming the file and
the asset to re-materialize, never a bare torch/safetensors error or statistics of garbage. With the file put back,
the same step succeeds and the predictions' bytes are those before. The verified sidecar that spares a re-hash is
no loophole: the damaged file's mtime changed, so it is hashed again.
"""

from __future__ import annotations

import pytest

from kinematic_pipeline.atomic_files import file_sha256
from kinematic_pipeline.verified import CorruptFileError, record_verified, sidecar, verify_file


def _damaged(data: bytes) -> list[tuple[str, bytes]]:
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x01
    return [("a flipped byte", bytes(flipped)), ("a truncation", data[: len(data) // 3])]


def test_a_verified_file_is_hashed_again_once_it_changes(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"x" * 1000)
    sha = file_sha256(path)
    record_verified(path, sha)
    assert sidecar(path).exists()
    verify_file(path, sha, "fix it")  # the sidecar holds (size, mtime_ns, sha256): no re-hash
    for _what, data in _damaged(path.read_bytes()):
        path.write_bytes(data)
        with pytest.raises(CorruptFileError, match=r"weights.bin .* is not the file its manifest records.*fix it"):
            verify_file(path, sha, "fix it")
    path.unlink()
    with pytest.raises(CorruptFileError, match="is missing"):
        verify_file(path, sha, "fix it")
