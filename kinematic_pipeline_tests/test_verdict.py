"""The verdict's information questions on a universe with known signal: a trivial probe with a negative IC
flatters pure noise beside it, which the second question (IC against 0) does not."""

from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl

from kinematic_pipeline.config import load_settings
from kinematic_pipeline.stages.verdict import information_beyond_trivial


def _universe(n_days: int = 250, n_tickers: int = 40) -> pl.DataFrame:
    rng = np.random.default_rng(3)
    days = [dt.date(2020, 1, 1) + dt.timedelta(days=k) for k in range(n_days)]
    r = rng.normal(0, 0.02, (n_days, n_tickers))
    scores = {
        "lr_trivial": -r + rng.normal(0, 0.1, r.shape),  # the one-day reversal: a negative IC
        "lightgbm_fd": r + rng.normal(0, 0.1, r.shape),  # a real (weak) signal
        "lr_spline": rng.normal(0, 1, r.shape),  # noise
    }
    frames = [
        pl.DataFrame(
            {
                "variant": v,
                "ticker": np.tile([f"T{j:02d}" for j in range(n_tickers)], n_days),
                "date": pl.Series([d for d in days for _ in range(n_tickers)], dtype=pl.Date),
                "score": s.ravel(),
                "r_close": r.ravel(),
            }
        )
        for v, s in scores.items()
    ]
    return pl.concat(frames)


def test_noise_beats_a_negative_trivial_ic_but_not_zero(tmp_path):
    settings = load_settings("ci", warehouse=tmp_path, env={})
    beyond, own = information_beyond_trivial(settings, _universe())
    assert beyond["Question"].startswith("Does any model carry directional information beyond the trivial")
    assert own["Question"].startswith("Does any model's score rank the next day's returns")
    assert beyond["Answer"] == "yes: lightgbm_fd, lr_spline at 5% (Holm)"  # noise looks informative beside it
    assert own["Answer"] == "yes: lightgbm_fd at 5% (Holm)"  # against 0, only the signal
    assert "Holm over 2 models and probes (250 days)" in own["Test"]


def test_without_a_signal_the_answer_is_no_evidence(tmp_path):
    settings = load_settings("ci", warehouse=tmp_path, env={})
    universe = _universe().filter(pl.col("variant") == "lr_spline")
    (own,) = information_beyond_trivial(settings, universe)  # no trivial probe: the IC against 0 only
    assert own["Answer"] == "no evidence at the 5% level"
