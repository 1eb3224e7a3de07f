"""Bar sources: the synthetic universe's determinism and ground truth, file layouts, yfinance offline."""

from __future__ import annotations

import datetime as dt
import sys
import types

import numpy as np
import polars as pl
import pytest

from kinematic_pipeline.calendar import is_trading_day
from kinematic_pipeline.config import SyntheticConfig, load_settings
from kinematic_pipeline.sources import RAW_SCHEMA, make_source
from kinematic_pipeline.sources.files import FileSource
from kinematic_pipeline.sources.synthetic import SyntheticSource
from kinematic_pipeline_tests.helpers import ROOT

START, END = dt.date(2019, 1, 2), dt.date(2022, 12, 30)
REAL_DATA = ROOT.parent / "shared" / "data" / "sp500_daily_2000_2022.parquet"


@pytest.fixture(scope="module")
def universe():
    return SyntheticSource(SyntheticConfig(n_tickers=12), START, END)


def test_synthetic_universe_is_seeded_and_sub_ranges_agree_with_the_full_history(universe):
    full = universe.read(START, END)
    again = SyntheticSource(SyntheticConfig(n_tickers=12), START, END).read(START, END)
    assert full.equals(again)
    window = (dt.date(2021, 6, 1), dt.date(2021, 6, 30))
    assert universe.read(*window).equals(full.filter(pl.col("date").is_between(*window)))
    other_seed = SyntheticSource(SyntheticConfig(n_tickers=12, seed=1), START, END).read(START, END)
    assert not other_seed["close"].equals(full["close"])
    assert full.schema == pl.Schema(RAW_SCHEMA)


def test_synthetic_bars_follow_the_nyse_calendar_and_the_ohlc_contract(universe):
    bars = universe.read(START, END)
    assert all(is_trading_day(d) for d in bars["date"].unique().to_list())
    assert bars.select((pl.col("high") >= pl.max_horizontal("open", "close")).all()).item()
    assert bars.select((pl.col("low") <= pl.min_horizontal("open", "close")).all()).item()
    assert (bars["low"] > 0).all() and (bars["volume"] >= 0).all()
    listing = bars.group_by("ticker").agg(pl.col("date").min())["date"]
    assert listing.n_unique() > 1  # some tickers list later (IPOs)


def test_ground_truth_is_exact_kinematics_behind_the_noisy_close(universe):
    truth = universe.ground_truth().sort("ticker", "date")
    bars = universe.read(START, END).sort("ticker", "date")
    x, v, a = (truth[c].to_numpy() for c in ("position", "velocity", "acceleration"))
    same = truth["ticker"].to_numpy()[1:] == truth["ticker"].to_numpy()[:-1]
    # piecewise-constant acceleration over each day: v_t = v_{t-1} + a_t, x_t = x_{t-1} + v_{t-1} + a_t/2
    np.testing.assert_allclose(v[1:][same], v[:-1][same] + a[1:][same], rtol=0, atol=1e-12)
    np.testing.assert_allclose(x[1:][same], x[:-1][same] + v[:-1][same] + a[1:][same] / 2, rtol=0, atol=1e-12)
    noise = np.log(bars["close"].to_numpy()) - x
    assert 0.001 < noise.std() < 0.01  # measurement noise of the configured size
    assert set(truth["regime"].unique()) >= {"up_trend", "down_trend", "mean_reversion"}


def test_synthetic_volume_rises_with_volatility(universe):
    truth = universe.ground_truth().sort("ticker", "date")
    bars = universe.read(START, END).sort("ticker", "date").filter(pl.col("volume") > 0)
    joined = (
        bars.join(truth, on=["ticker", "date"])
        .with_columns(
            move=pl.col("position").diff().abs().over("ticker"),
            log_volume=pl.col("volume").log() - pl.col("volume").log().mean().over("ticker"),
        )
        .drop_nulls("move")
    )
    assert np.corrcoef(joined["move"].to_numpy(), joined["log_volume"].to_numpy())[0, 1] > 0.1


def test_directory_of_yfinance_style_csv_files(tmp_path):
    for ticker, close in (("NVDA", 100.0), ("TSLA", 200.0)):
        (tmp_path / f"{ticker}.csv").write_text(
            "Date,Open,High,Low,Close,Adj Close,Volume\n"
            f"2021-03-01,{close},{close + 1},{close - 1},{close},{close},1000\n"
            f"2021-03-02 00:00:00-05:00,{close},{close + 1},{close - 1},{close},{close},1100\n"
        )
    source = FileSource(tmp_path, "csv")
    bars = source.read(dt.date(2021, 1, 1), dt.date(2021, 12, 31))
    assert bars["ticker"].to_list() == ["NVDA", "NVDA", "TSLA", "TSLA"]
    assert bars["date"].to_list()[:2] == [dt.date(2021, 3, 1), dt.date(2021, 3, 2)]
    assert source.date_range() == (dt.date(2021, 3, 1), dt.date(2021, 3, 2))
    assert bars["adj_close"].null_count() == 0


def test_yfinance_multi_level_csv_header(tmp_path):
    (tmp_path / "download.csv").write_text(
        "Price,Close,High,Low,Open,Volume\nTicker,XOM,XOM,XOM,XOM,XOM\nDate,,,,,\n2021-03-01,60.0,61.0,59.0,59.5,5000\n"
    )
    bars = FileSource(tmp_path / "download.csv", "csv").read(dt.date(2021, 1, 1), dt.date(2021, 12, 31))
    assert bars.select("ticker", "open", "close").row(0) == ("XOM", 59.5, 60.0)


@pytest.mark.skipif(not REAL_DATA.exists(), reason="the shared real data is not beside this checkout")
def test_the_real_file_layout_is_read_as_is():
    source = FileSource(REAL_DATA, "parquet")
    bars = source.read(dt.date(2022, 12, 1), dt.date(2022, 12, 2))
    assert bars.height == 914 and bars["ticker"].n_unique() == 457
    assert source.date_range() == (dt.date(2000, 1, 3), dt.date(2022, 12, 30))


def test_yfinance_offline_fails_at_once_with_a_message(monkeypatch):
    import socket

    monkeypatch.setitem(sys.modules, "yfinance", sys.modules.get("yfinance") or types.ModuleType("yfinance"))

    def refuse(*args, **kwargs):
        raise OSError("Temporary failure in name resolution")

    monkeypatch.setattr(socket, "create_connection", refuse)
    with pytest.raises(RuntimeError, match="offline"):
        make_source(load_settings("ci", source="yfinance", env={}))


def test_yfinance_without_the_extra_says_how_to_install(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_yfinance(name, *args, **kwargs):
        if name == "yfinance":
            raise ImportError("No module named 'yfinance'")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "yfinance", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_yfinance)
    with pytest.raises(RuntimeError, match=r"kinematic_pipeline\[yfinance\]"):
        make_source(load_settings("ci", source="yfinance", env={}))


def test_source_tickers_reads_the_ticker_column_or_the_file_names_without_the_bars(tmp_path):
    from kinematic_pipeline.sources.files import source_tickers

    long = tmp_path / "long.csv"
    long.write_text("symbol,date,open,high,low,close,volume\nMSFT,2021-01-04,1,1,1,1,1\nAAPL,2021-01-04,1,1,1,1,1\n")
    assert source_tickers(long, "csv") == ("AAPL", "MSFT")
    folder = tmp_path / "per_ticker"
    folder.mkdir()
    for name in ("nvda", "ibm"):  # yfinance-style: the ticker is the file's stem
        (folder / f"{name}.csv").write_text("Date,Open,High,Low,Close,Adj Close,Volume\n2021-01-04,1,1,1,1,1,1\n")
    assert source_tickers(folder, "csv") == ("IBM", "NVDA")
    headed = tmp_path / "prices.csv"  # yfinance's multi-level header: the ticker in the row under the header
    headed.write_text(
        "Price,Close,High,Low,Open,Volume\nTicker,nvda,nvda,nvda,nvda,nvda\nDate,,,,,\n2021-01-04,1,1,1,1,1\n"
    )
    assert source_tickers(headed, "csv") == ("NVDA",)
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"\x00\x01not parquet")
    assert source_tickers(garbage, "parquet") is None and source_tickers(tmp_path / "gone.parquet", "parquet") is None
