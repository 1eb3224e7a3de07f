"""The paper-scale benchmark (issue 56 item 5) measures what it says on a CPU, where CI runs it: the paper's
12.6 M-parameter SplineGPT, the pipeline's windows (a zero volume drops the windows that span it), the FLOPs of a
step of that model, and the projection of the paper's 5 epochs over 22.5 M windows."""

from __future__ import annotations

import datetime as dt
import sys

import numpy as np
import polars as pl
import pytest

from kinematic_pipeline_tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_paper_scale as bps  # noqa: E402


@pytest.fixture(scope="module")
def bars(tmp_path_factory):
    """Three tickers: AAA 300 sessions with a zero volume on its 10th, BBB 100 sessions, CCC 40 (too short), and
    AAA's bars after 2022 (which nothing may read)."""
    rng = np.random.default_rng(0)
    days = [d for d in pl.date_range(dt.date(2021, 9, 1), dt.date(2023, 3, 1), "1d", eager=True) if d.weekday() < 5]
    frames = []
    for ticker, n in (("AAA", None), ("BBB", 100), ("CCC", 40)):
        d = days if n is None else days[-n - 60 : -60]  # BBB and CCC end before 2023
        close = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, len(d))))
        volume = rng.lognormal(12, 0.3, len(d))
        if ticker == "AAA":
            volume[9] = 0.0
        frames.append(pl.DataFrame({"ticker": ticker, "date": d, "close": close, "volume": volume}))
    path = tmp_path_factory.mktemp("bars") / "bars.parquet"
    pl.concat(frames).write_parquet(path)
    return path, sum(1 for d in days if d <= dt.date(2022, 12, 31))


def test_the_windows_are_the_complete_ones_through_2022_and_normalized_as_the_pipeline_does(bars):
    path, aaa_sessions = bars
    read = bps.read_bars(path)
    assert list(read) == ["AAA", "BBB", "CCC"] and len(read["AAA"][0]) == aaa_sessions
    assert list(bps.read_bars(path, 1)) == ["AAA"]  # the name with the most sessions
    # AAA: every 65-session window, less the 9 whose volume intervals (the days s+1..s+64 of the window starting on
    # day s) hold the zero volume of day 9
    price, volume = bps.complete(*read["AAA"])
    assert len(price) == aaa_sessions - 64 - 9 and volume.shape == (len(price), 64)
    assert len(bps.complete(*read["CCC"])[0]) == 0  # 40 sessions hold no window
    windows = bps.spline_windows({"AAA": read["AAA"], "BBB": read["BBB"]})
    assert windows.shape == (len(price) + 100 - 64, 64, 9) and windows.dtype == np.float32
    for channel in bps.SPLINE.anchored:  # c0 and c~0 anchored to the window's first token
        assert np.all(windows[:, 0, channel] == 0)
    zscored = windows[:, :, list(bps.SPLINE.zscored)].reshape(-1, len(bps.SPLINE.zscored)).astype(np.float64)
    np.testing.assert_allclose(zscored.mean(axis=0), 0, atol=1e-4)
    np.testing.assert_allclose(zscored.std(axis=0), 1, atol=1e-3)


def test_the_benchmark_trains_the_paper_size_model_and_counts_its_flops(bars, tmp_path):
    path, _ = bars
    out = tmp_path / "rows.json"
    argv = ["--file", str(path), "--device", "cpu", "--batch", "4", "--steps", "2", "--warmup", "1"]
    result = bps.main([*argv, "--variants", "fp32,bf16", "--matmul", "128", "--tickers", "2", "--json", str(out)])
    assert out.exists()
    assert abs(result["parameters"] - bps.PAPER_PARAMETERS) / bps.PAPER_PARAMETERS < 0.01  # the paper's 12.6 M
    assert [r["variant"] for r in result["rows"]] == ["fp32", "bf16"]
    for row in result["rows"]:
        # a step of a transformer is ~6 FLOPs per parameter and token (forward 2, backward 4), a little more for
        # attention's products; the input projection and the head are a sliver of the parameters
        tokens = row["batch"] * 64
        assert 5.8 * result["parameters"] * tokens < row["flop_per_step"] < 6.5 * result["parameters"] * tokens
        assert row["windows_per_s"] > 0 and np.isfinite(row["loss_last_tenth"])
        assert row["paper_hours"] == pytest.approx(5 * 22.5e6 / row["windows_per_s"] / 3600)
    assert result["file_windows"] >= result["windows"]  # the projection's file: every ticker, not the 2 trained on
