"""``--select a,b`` through the real CLI runs the token stage on what ingest kept from a hostile file."""

from __future__ import annotations

import polars as pl
import pytest

from kinematic_pipeline_tests.helpers.cli import hostile_rows, run_cli


@pytest.mark.e2e
def test_select_with_commas_runs_the_token_stage_on_what_ingest_kept(tmp_path):
    """The README's `--select raw_ohlcv,spline_tokens`; before the fix an inf volume reached the
    tokenizer (about 20 s: the Numba kernels load)."""
    path = tmp_path / "bars.csv"
    pl.DataFrame(hostile_rows()).write_csv(path)
    proc = run_cli(tmp_path, "materialize", "--select", "raw_ohlcv,spline_tokens", source="csv", path=path)
    assert proc.returncode == 0, proc.stderr
    assert "materialized raw_ohlcv, fd_tokens, raw_tokens, spline_tokens" in proc.stdout
