"""Paths are paths, not patterns: a warehouse and a source under a folder whose name holds ``[``, ``]``, ``*``,
``?``, quotes and spaces read exactly their own files, through the real CLI (ingest, the three tokenizations,
labels, window stores, corpus statistics, the catalog's views), while a decoy folder that the name would
match as a glob holds other bars that must never be read."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys

import polars as pl
import pytest

from kinematic_pipeline.config import SyntheticConfig
from kinematic_pipeline.sources.synthetic import SyntheticSource
from kinematic_pipeline.warehouse import Warehouse
from kinematic_pipeline_tests.helpers import ROOT

pytestmark = pytest.mark.e2e
REPO = ROOT
START, END = dt.date(2021, 1, 4), dt.date(2021, 6, 30)
ODD = "runs [a] *? 'q\" s"  # as a glob, "[a]" matches "a", "*" anything, "?" one character
DECOY = "runs a xx 'q\" s"  # a name the glob would match


def _bars(tickers: int, seed: int) -> pl.DataFrame:
    config = SyntheticConfig(n_tickers=tickers, seed=seed, late_listing_fraction=0.0, zero_volume_prob=0.0)
    return (
        SyntheticSource(config, START, END)
        .read(START, END)
        .select("ticker", "date", "open", "high", "low", "close", "volume")
    )


def test_a_warehouse_and_source_with_glob_characters_read_exactly_their_own_files(tmp_path):
    own, decoy = tmp_path / ODD, tmp_path / DECOY
    for folder, bars in ((own, _bars(3, 1)), (decoy, _bars(5, 2).with_columns(pl.col("ticker") + "_DECOY"))):
        (folder / "source").mkdir(parents=True)
        bars.write_parquet(folder / "source" / "bars.parquet")
    home = tmp_path / "dagster_home"  # Dagster's own SQLite URLs are not ours to fix: a plain DAGSTER_HOME
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
        "KP_PROFILE": "ci",
        "KP_SOURCE": "parquet",
        "KP_SOURCE_PATH": str(own / "source"),
        "KP_WAREHOUSE": str(own / "ware house"),
        "DAGSTER_HOME": str(home),
        "KP_START_DATE": str(START),
        "KP_END_DATE": str(END),
        "KP_TRAIN_END": "2021-05-28",
    }
    select = "raw_ohlcv,spline_tokens,fd_tokens,raw_tokens,labels,spline_window_store,spline_corpus_stats"
    proc = subprocess.run(
        [sys.executable, "-m", "kinematic_pipeline", "materialize", "--select", select],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    wh = Warehouse(own / "ware house")
    tickers = wh.query("SELECT DISTINCT ticker FROM raw_ohlcv ORDER BY 1")["ticker"].to_list()
    assert tickers == sorted(_bars(3, 1)["ticker"].unique().to_list())  # none of the decoy's
    for view in ("spline_tokens", "fd_tokens", "labels"):
        assert wh.query(f"SELECT count(DISTINCT ticker) AS n FROM {view}")["n"].item() == 3, view
    stats = wh.query("SELECT * FROM corpus_stats WHERE tokenization = 'spline'")
    assert stats.height == 7 and stats["fit_end"].max() == dt.date(2021, 5, 28)
    assert not (decoy / "ware house").exists()
