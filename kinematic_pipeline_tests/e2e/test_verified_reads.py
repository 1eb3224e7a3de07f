"""Bytes verified on read, through the real CLI: a day shard whose bytes differ from its manifest's sha256 (one
flipped bit) is never consumed; the step stops with one line naming the file, both hashes and the partition to
re-materialize, and re-materializing it repairs the warehouse."""

from __future__ import annotations

import pytest

from kinematic_pipeline.warehouse import Warehouse
from kinematic_pipeline_tests.helpers.cli import assert_one_line_error, run_cli

pytestmark = pytest.mark.e2e


def _flip(path, offset_fraction: float = 0.5) -> None:
    data = bytearray(path.read_bytes())
    data[int(len(data) * offset_fraction)] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_flipped_bit_in_a_day_shard_is_never_read(tmp_path):
    select = "raw_ohlcv,spline_tokens"
    assert run_cli(tmp_path, "materialize", "--select", select).returncode == 0
    wh = Warehouse(tmp_path / "warehouse")
    days = wh.manifest_days("spline_tokens")
    token, bars = wh.shard("spline_tokens", days[-3]), wh.shard("raw_ohlcv", days[-5])
    _flip(token)
    proc = run_cli(tmp_path, "materialize", "--select", "spline_window_store")
    assert_one_line_error(proc, str(token), "is not the file its manifest records", f"spline_tokens for {days[-3]}")
    _flip(bars)
    proc = run_cli(tmp_path, "materialize", "--select", "spline_tokens")
    assert_one_line_error(proc, str(bars), "is not the file its manifest records", f"raw_ohlcv for {days[-5]}")
    # the fix the message names: re-materialize the partitions (the ingest rewrites the day, tokens follow)
    assert run_cli(tmp_path, "materialize", "--select", f"{select},spline_window_store").returncode == 0
