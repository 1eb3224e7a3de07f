"""A warehouse that repairs itself, through the real CLI: a zero-length or truncated file in a day unit never locks
the views nor blocks the re-ingest that rewrites it (it is moved aside with its unit, and the day is written
again, byte for byte), and a catalog that cannot be opened is rebuilt from the shards, saying so."""

from __future__ import annotations

import pytest

from kinematic_pipeline.warehouse import Warehouse
from kinematic_pipeline.warehouse.atomic import file_sha256
from kinematic_pipeline_tests.helpers.cli import run_cli

pytestmark = pytest.mark.e2e


def test_a_damaged_day_is_moved_aside_and_rewritten_and_a_damaged_catalog_rebuilt(tmp_path):
    assert run_cli(tmp_path, "materialize", "--select", "raw_ohlcv").returncode == 0
    wh = Warehouse(tmp_path / "warehouse")
    rows = wh.query("SELECT count(*) AS n FROM raw_ohlcv")["n"].item()
    days = wh.manifest_days("raw_ohlcv")
    zero, cut = (
        wh.unit_dir("raw_ohlcv", days[3]) / "bars.parquet",
        wh.unit_dir("raw_ohlcv", days[7]) / "manifest.parquet",
    )
    before = {p: file_sha256(p) for p in (zero, cut)}
    zero.write_bytes(b"")  # a disk that filled
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])  # a copy that stopped half-way

    proc = run_cli(tmp_path, "materialize", "--select", "raw_ohlcv")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for day in (days[3], days[7]):
        assert f"damaged raw_ohlcv/{day}/" in proc.stderr and f"the day {day} is rewritten" in proc.stderr
    assert {p: file_sha256(p) for p in (zero, cut)} == before  # the same bytes as before the damage
    assert wh.query("SELECT count(*) AS n FROM raw_ohlcv")["n"].item() == rows
    assert len(list((wh.root / "_damaged").glob("*/raw_ohlcv/*"))) == 2  # kept for a post-mortem

    wh.catalog_path.write_bytes(b"not a database")
    proc = run_cli(tmp_path, "info")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "could not be opened" in proc.stderr and "rebuilt 3 view(s) from the shards" in proc.stderr
    assert wh.query("SELECT count(*) AS n FROM raw_ohlcv")["n"].item() == rows
