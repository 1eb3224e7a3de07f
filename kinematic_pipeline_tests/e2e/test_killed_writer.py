"""A process killed mid-write leaves no partial shard visible, and the next write repairs it byte for byte (a real
writer process, SIGKILL).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import duckdb
import numpy as np
import polars as pl
import pytest

from kinematic_pipeline.warehouse.atomic import file_sha256, write_parquet_atomic

WRITER = """
import sys
import numpy as np, polars as pl
from kinematic_pipeline.warehouse.atomic import write_parquet_atomic
frame = pl.DataFrame({"x": np.random.default_rng(0).random(20_000_000)})  # ~160 MB: a write that takes a while
while True:
    write_parquet_atomic(frame, sys.argv[1], compression="uncompressed")
"""


@pytest.mark.e2e  # kills a real writer process mid-write; run in CI with -m e2e
def test_a_killed_write_leaves_no_partial_shard_and_the_next_write_repairs_it(tmp_path):
    shard = tmp_path / "spline_tokens" / "2021-03-01.parquet"
    old = pl.DataFrame({"x": np.arange(5, dtype=np.float64)})
    old_hash = write_parquet_atomic(old, shard)

    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(shard)])
    try:
        deadline = time.monotonic() + 120
        while not any(p.stat().st_size > 1_000_000 for p in shard.parent.glob(".*.tmp")):
            assert time.monotonic() < deadline and writer.poll() is None, "the writer never started a write"
            time.sleep(0.01)
        writer.send_signal(signal.SIGKILL)  # in the middle of writing the temporary file
    finally:
        writer.wait()

    partial = list(shard.parent.glob(".*.tmp"))
    assert partial, "the kill should have left the partial temporary file behind"
    # Readers glob *.parquet: they see either the old shard or a complete new one, never the partial file.
    visible = duckdb.sql(f"SELECT count(*) FROM read_parquet('{shard.parent}/*.parquet')").fetchall()[0][0]
    assert visible in (5, 20_000_000)
    assert pl.read_parquet(shard).height == visible

    repaired_hash = write_parquet_atomic(old, shard)  # the next run rewrites the shard ...
    assert repaired_hash == old_hash == file_sha256(shard)  # ... byte-identically
    assert not list(shard.parent.glob(".*.tmp"))  # and clears what the killed writer left
