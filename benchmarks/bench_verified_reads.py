"""What verifying what is read costs (issue 40): a window store's block checksums at the `real` profile's size, and a
model file hashed on every load.

    python benchmarks/bench_verified_reads.py [--gigabytes 5] [--model-megabytes 48] [--dir /tmp]

It writes a store-sized file through ``verified.BlockHasher`` (the store builder's path), then times
``verified.verify_blocks`` over every block (what ``window_store.open_store`` does once per open: a training run, a
corpus-statistics or features run) from the page cache and, when the cache can be dropped (root), from disk; and
``verified.verify_file`` of a model-sized file (each load of an adapter, foundation or probe), and the next open of the
unchanged store in the same process (``verified.hashed_once``: not hashed again). The reference measured
in the same run is a plain sequential read of the same bytes (what any reader pays anyway). Prints seconds and GB/s.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from kinematic_pipeline.warehouse.atomic import file_sha256
from kinematic_pipeline.warehouse.verified import (
    BLOCK_BYTES,
    RACY_NS,
    BlockHasher,
    forget_hashes,
    verify_blocks,
    verify_file,
)

CHUNK = 16 << 20


def _write(path: Path, size: int) -> list[str]:
    block = os.urandom(CHUNK)
    with open(path, "wb") as raw:
        out = BlockHasher(raw)
        for _ in range(size // CHUNK):
            out.write(block)
        raw.flush()
        os.fsync(raw.fileno())
    return out.block_hashes()


def _drop_cache() -> bool:
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def _read(path: Path) -> float:
    start = time.perf_counter()
    with open(path, "rb") as f:
        while f.read(CHUNK):
            pass
    return time.perf_counter() - start


def _verify(path: Path, hashes: list[str], remembered: bool = False) -> float:
    """Seconds to verify every block: hashed now, or (``remembered``) from what this process already hashed."""
    if not remembered:
        forget_hashes()
    start = time.perf_counter()
    verify_blocks(path, hashes, BLOCK_BYTES, range(len(hashes)), "re-materialize the store")
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gigabytes", type=float, default=5.0, help="the store's size (real: ~5 GB a tokenization)")
    parser.add_argument("--model-megabytes", type=float, default=48.0, help="a model file's size (real: ~48 MB)")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args(argv)
    size = int(args.gigabytes * (1 << 30)) // CHUNK * CHUNK
    gb = size / (1 << 30)
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        store, model = Path(folder) / "tokens.npy", Path(folder) / "model.pt"
        hashes = _write(store, size)
        print(f"store: {gb:.2f} GB in {len(hashes)} blocks of {BLOCK_BYTES >> 20} MB")
        for label, cold in (("page cache", False), ("disk (cache dropped)", True)):
            if cold and not _drop_cache():
                print(f"  {label}: cannot drop the page cache here (not root): skipped")
                continue
            read = _read(store)
            if cold:
                _drop_cache()
            verify = _verify(store, hashes)
            print(
                f"  {label}: plain read {read:.2f} s ({gb / read:.2f} GB/s); verify every block {verify:.2f} s "
                f"({gb / verify:.2f} GB/s) = {verify / read:.2f}x the plain read"
            )
        time.sleep(RACY_NS / 1e9)  # the store is no longer racy: what one process hashed it remembers
        first, again = _verify(store, hashes), _verify(store, hashes, remembered=True)
        print(
            f"  same process, unchanged store: first open {first:.2f} s, the next open {again:.3f} s "
            f"({first / max(again, 1e-9):,.0f}x: the file's device, inode, size, mtime and ctime are unchanged)"
        )
        model.write_bytes(os.urandom(int(args.model_megabytes * (1 << 20))))
        sha = file_sha256(model)
        start = time.perf_counter()
        for _ in range(10):
            verify_file(model, sha, "re-materialize the model")
        per_load = (time.perf_counter() - start) / 10
        print(
            f"model: {args.model_megabytes:g} MB hashed on load in {1000 * per_load:.0f} ms (page cache, just written)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
