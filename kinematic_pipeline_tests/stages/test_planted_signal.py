"""The positive control: a synthetic universe with a planted signal whose oracle daily IC is the one asked for."""

from __future__ import annotations

import dataclasses
import datetime as dt

import numpy as np
import polars as pl
import pytest

from kinematic_pipeline.backtest.signal import daily_ic
from kinematic_pipeline.config import SyntheticConfig, load_settings
from kinematic_pipeline.sources.synthetic import SyntheticSource
from kinematic_pipeline_tests.helpers import ROOT


def _oracle_ic(planted: float, n_tickers: int = 120) -> float:
    config = dataclasses.replace(SyntheticConfig(n_tickers=n_tickers, late_listing_fraction=0.0), planted_ic=planted)
    source = SyntheticSource(config, dt.date(2019, 1, 2), dt.date(2021, 12, 31))
    truth = source.ground_truth().sort("ticker", "date")
    frame = truth.with_columns(
        (pl.col("position").shift(-1) - pl.col("position")).over("ticker").alias("r_next")
    ).drop_nulls("r_next")
    return float(daily_ic(frame, "velocity", "r_next")["rank_ic"].mean())


@pytest.mark.parametrize("planted", [0.05, 0.1, 0.3])
def test_the_oracle_daily_ic_is_the_planted_strength(planted):
    # Spearman of a bivariate normal with correlation rho: (6 / pi) asin(rho / 2)
    expected = 6 / np.pi * np.arcsin(planted / 2)
    assert _oracle_ic(planted) == pytest.approx(expected, abs=0.012)  # 755 days x 120 tickers: se ~0.003


def test_at_strength_zero_the_prices_are_a_random_walk():
    config = dataclasses.replace(SyntheticConfig(n_tickers=20, late_listing_fraction=0.0), planted_ic=0.0)
    truth = SyntheticSource(config, dt.date(2019, 1, 2), dt.date(2021, 12, 31)).ground_truth()
    assert (truth["velocity"] == 0).all()  # no drift at all: nothing to predict
    r = truth.sort("ticker", "date").select(pl.col("position").diff().over("ticker")).drop_nulls().to_series()
    assert r.std() == pytest.approx(0.015, rel=0.03)


def test_planted_strength_is_a_checked_setting():
    assert load_settings("ci", env={"KP_PLANTED_IC": "0.2"}).synthetic.planted_ic == 0.2
    assert load_settings("ci", env={"KP_SYNTHETIC_TICKERS": "40"}).synthetic.n_tickers == 40
    for bad in ("1.5", "-0.1", "strong"):
        with pytest.raises(ValueError, match="KP_PLANTED_IC"):
            load_settings("ci", env={"KP_PLANTED_IC": bad})
    with pytest.raises(ValueError, match="on the synthetic source"):
        load_settings("ci", env={"KP_PLANTED_IC": "0.1", "KP_SOURCE": "csv", "KP_SOURCE_PATH": "x.csv"})


@pytest.mark.slow
def test_the_protocol_detects_a_planted_signal_and_nothing_at_strength_zero(tmp_path):
    """Through the real CLI (``benchmarks/planted_signal.py``: tokens, window stores, probes, rules, backtests,
    verdict) on 40 synthetic tickers, the two strengths side by side: at strength 0 neither IC row of the verdict says yes; at an oracle IC of
    0.2 both do (the scores rank tomorrow's returns, beyond the trivial features too). About 2 minutes."""
    import json
    import subprocess
    import sys

    script = ROOT / "benchmarks" / "planted_signal.py"
    table = tmp_path / "table.json"
    command = [sys.executable, str(script), "--strengths", "0", "0.2", "--out", str(tmp_path), "--json", str(table)]
    command += ["--side-by-side", "2"]  # the two strengths at once, one thread each
    proc = subprocess.run(command, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = {r["row"]: r for r in json.loads(table.read_text())}
    beyond = rows["Does any model carry directional information beyond the trivial features?"]
    ranks = rows["Does any model's score rank the next day's returns (rank IC > 0)?"]
    assert beyond["IC 0"] == ranks["IC 0"] == "no evidence at the 5% level"
    assert beyond["IC 0.2"] == ranks["IC 0.2"] == "yes"
