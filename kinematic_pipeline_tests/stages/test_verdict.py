"""The verdict's information questions on a universe with known signal: a score that only copies the trivial
features has a large IC and no partial IC given them; a score with information beyond them keeps it; noise has
neither."""

from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl

from kinematic_pipeline.backtest import multiple_testing as mt
from kinematic_pipeline.config import load_settings
from kinematic_pipeline.stages.strategies import count_trials, strategy_returns
from kinematic_pipeline.stages.verdict import ablation_comparisons, family_answers, spa_answer, spline_vs_fd
from kinematic_pipeline.stages.verdict_signal import (
    Comparison,
    daily_ics,
    daily_log_losses,
    information_beyond_trivial,
)


def _universe(n_days: int = 250, n_tickers: int = 40) -> pl.DataFrame:
    rng = np.random.default_rng(3)
    days = [dt.date(2020, 1, 1) + dt.timedelta(days=k) for k in range(n_days)]
    ret1, vol20, extra = (rng.normal(0, 0.02, (n_days, n_tickers)) for _ in range(3))
    r = -0.5 * ret1 + 0.5 * extra + rng.normal(0, 0.02, (n_days, n_tickers))  # the reversal, and more
    scores = {
        "lr_trivial": -ret1 + rng.normal(0, 0.002, r.shape),  # the trivial features' own signal
        "lr_fd": -ret1 + rng.normal(0, 0.002, r.shape),  # a copy of it: a large IC, nothing beyond
        "lightgbm_fd": -ret1 + extra,  # the reversal and information beyond it
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
                "ret1": ret1.ravel(),
                "vol20": vol20.ravel(),
            }
        )
        for v, s in scores.items()
    ]
    return pl.concat(frames)


def test_a_copy_of_the_trivial_features_ranks_returns_but_carries_nothing_beyond_them(tmp_path):
    settings = load_settings("ci", warehouse=tmp_path, env={})
    beyond, own = information_beyond_trivial(settings, _universe())
    assert beyond["Question"].startswith("Does any model carry directional information beyond the trivial features")
    assert "partial rank IC on the universe given ret1, vol20" in beyond["Test"]
    assert own["Question"].startswith("Does any model's score rank the next day's returns")
    assert beyond["Answer"] == "yes: lightgbm_fd at 5% (Holm)"  # the copy and the noise: nothing beyond
    assert own["Answer"] == "yes: lightgbm_fd, lr_fd at 5% (Holm)"  # the copy ranks returns all the same
    assert "Holm over 3 models and probes (250 days)" in own["Test"]


def test_without_a_signal_or_the_trivial_features_the_answer_is_no_evidence(tmp_path):
    settings = load_settings("ci", warehouse=tmp_path, env={})
    universe = _universe().filter(pl.col("variant") == "lr_spline").drop("ret1", "vol20")
    (own,) = information_beyond_trivial(settings, universe)  # no trivial features: the IC against 0 only
    assert own["Answer"] == "no evidence at the 5% level"


# ---- each verdict row says exactly what its statistic says (issue 29) ---------------------------------------


def _curves(records: dict[str, np.ndarray], start=dt.date(2021, 1, 4)) -> pl.DataFrame:
    """Pooled equity curves at 10 bps of one ticker and seed: {variant: daily returns} (Buy & Hold included)."""
    frames = []
    for variant, r in records.items():
        equity = np.concatenate([[1.0], np.cumprod(1 + r)])
        days = [start + dt.timedelta(days=k) for k in range(equity.size)]
        frames.append(
            pl.DataFrame(
                {
                    "variant": variant,
                    "tau": None if variant == "buy_and_hold" else 0.01,
                    "seed": 0,
                    "ticker": "T",
                    "cost_bps": 10.0,
                    "date": pl.Series(days, dtype=pl.Date),
                    "equity": equity,
                    "position": pl.Series(np.full(equity.size, int(np.any(r != 0))), dtype=pl.Int8),  # flat: cash
                },
                schema_overrides={"tau": pl.Float64},
            )
        )
    return pl.concat(frames)


def test_the_spa_answer_comes_from_spas_p_value_and_stepm_only_says_which():
    answer = spa_answer(0.03, [])  # SPA rejects while StepM, a different procedure, names none
    assert answer.startswith("yes: SPA rejects 'none beats Buy & Hold' (consistent p = 0.030)")
    assert "StepM names none at 5%" in answer
    assert spa_answer(0.2, ["a tau=0.01"]).startswith("no evidence at the 5% level (SPA consistent p = 0.200)")
    assert spa_answer(0.001, ["a tau=0.01"]).endswith("StepM names a tau=0.01")


def test_a_nan_interval_answers_undefined_never_b_is_better(tmp_path):
    settings = load_settings("ci", warehouse=tmp_path, env={})
    rng = np.random.default_rng(0)
    flat = np.zeros(300)  # never in the market: its Sharpe is undefined, so is the difference
    curves = {
        "argmax": _curves(
            {"buy_and_hold": rng.normal(0, 0.01, 300), "lr_spline": flat, "lr_fd": rng.normal(0, 0.01, 300)}
        ),
        "margin": pl.DataFrame(),
    }
    diff = mt.sharpe_difference_test(flat, rng.normal(0, 0.01, 300), reps=50)
    assert all(np.isnan(diff))
    rows = {r["Test"].split(":")[0]: r for r in spline_vs_fd(settings, strategy_returns(settings, curves), None)}
    assert rows["Logistic regression (Spline) - Logistic regression (FD), argmax rule"]["Answer"].startswith(
        "undefined"
    )
    assert family_answers([Comparison("t", estimate=-1.0)], [("a", "b")]) == [
        "undefined: the statistic or its interval is not finite (a flat record)"
    ]


def test_a_probe_ablation_flat_under_argmax_is_tested_under_the_margin_rule_and_never_skipped(tmp_path):
    """Both probes sell on day one under the argmax (identical flat records: one strategy, once silently skipped);
    under the margin rule they trade, and that comparison is computed; the argmax one says why it cannot be."""
    settings = load_settings("ci", warehouse=tmp_path, env={})
    rng = np.random.default_rng(1)
    market = rng.normal(0.0005, 0.01, 500)
    flat = np.zeros(500)
    argmax = _curves({"buy_and_hold": market, "lr_spline": flat, "lr_fd": flat})
    margin = _curves({"lr_spline": market + rng.normal(0.002, 0.002, 500), "lr_fd": market})
    strategies = strategy_returns(settings, {"argmax": argmax, "margin": margin})
    assert strategies.column["lr_spline tau=0.01"] == strategies.column["lr_fd tau=0.01"]
    assert count_trials(strategies)[0] == 3  # the flat pair merged, plus two margin records
    rows = {r["Test"].split(":")[0]: r for r in spline_vs_fd(settings, strategies, None)}
    argmax_row = rows["Logistic regression (Spline) - Logistic regression (FD), argmax rule"]
    margin_row = rows["Logistic regression (Spline) - Logistic regression (FD), margin rule"]
    assert argmax_row["Answer"] == "cannot be computed: the two records are identical day by day (e.g. neither trades)"
    assert margin_row["Answer"].startswith("yes: Logistic regression (Spline) is better at 5% (Holm p")
    model_rows = [r for t, r in rows.items() if t.startswith("SplineGPT")]
    assert model_rows and all(r["Answer"].startswith("cannot be computed: no") for r in model_rows)
    assert len(rows) == 12  # 4 ablations x (2 rules + the universe IC): every one has its row


def test_effective_trials_counts_clusters_of_correlated_strategies():
    rng = np.random.default_rng(2)
    factors = rng.normal(0, 0.01, (400, 3))
    returns = np.column_stack([factors[:, k // 4] + rng.normal(0, 0.001, 400) for k in range(12)])
    assert mt.effective_trials(returns) == 3  # 12 strategies, three independent bets
    assert mt.effective_trials(rng.normal(0, 0.01, (400, 2))) == 2
    assert mt.effective_trials(np.column_stack([factors[:, 0]] * 4)) == 1


def test_the_paired_log_loss_test_finds_the_better_calibrated_twin(tmp_path):
    """On the same ticker-days, lr_spline's probabilities put more mass on the close-to-close label than lr_fd's:
    the paired daily log-loss difference says lr_spline is better; the IC test of the same pair runs beside it."""

    settings = load_settings("ci", warehouse=tmp_path, env={})
    rng = np.random.default_rng(6)
    n_days, n = 120, 30
    r = rng.normal(0, 0.02, (n_days, n))
    informed = np.where(
        r[..., None] > 0.01, [0.7, 0.1, 0.2], np.where(r[..., None] < -0.01, [0.1, 0.7, 0.2], [0.2, 0.2, 0.6])
    )
    blurred = 0.5 * informed + 0.5 / 3
    w = np.asarray(settings.train.class_weights)
    frames = []
    for variant, p in (("lr_spline", informed), ("lr_fd", blurred)):
        q = p * w / (p * w).sum(axis=-1, keepdims=True)  # what a weighted model outputs: de-weighting undoes it
        frames.append(
            pl.DataFrame(
                {
                    "variant": variant,
                    "ticker": np.tile([f"T{j}" for j in range(n)], n_days),
                    "date": pl.Series(
                        [dt.date(2021, 1, 1) + dt.timedelta(days=d) for d in range(n_days) for _ in range(n)]
                    ),
                    "p_buy": q[..., 0].ravel(),
                    "p_sell": q[..., 1].ravel(),
                    "p_hold": q[..., 2].ravel(),
                    "r_close": r.ravel(),
                    "score": (p[..., 0] - p[..., 1]).ravel(),
                }
            )
        )
    universe = pl.concat(frames)
    losses = daily_log_losses(settings, universe)
    assert losses["lr_spline"]["log_loss"].mean() < losses["lr_fd"]["log_loss"].mean()
    curves = {
        "argmax": _curves({"buy_and_hold": rng.normal(0, 0.01, 50), "lr_spline": rng.normal(0, 0.01, 50)}),
        "margin": pl.DataFrame(),
    }
    comparisons = ablation_comparisons(settings, strategy_returns(settings, curves), daily_ics(universe), losses)
    (loss_test,) = [c for c in comparisons if "log loss" in c.test and c.test.startswith("Logistic")]
    assert loss_test.estimate > 0 and loss_test.p < 0.001
    assert len(comparisons) == 16  # 4 ablations x (2 rules + the universe's IC and log loss)
