"""The verdict's information questions on a universe with known signal: a score that only copies the trivial
features has a large IC and no partial IC given them; a score with information beyond them keeps it; noise has
neither."""

from __future__ import annotations

import dataclasses
import datetime as dt

import numpy as np
import polars as pl

from kinematic_pipeline.backtest import multiple_testing as mt
from kinematic_pipeline.config import load_settings
from kinematic_pipeline.stages.strategies import RULES, count_trials, strategy_name, strategy_returns
from kinematic_pipeline.stages.verdict import SURVIVORSHIP, beat_buy_and_hold, spa_answer
from kinematic_pipeline.stages.verdict_ablations import (
    CALIBRATION,
    INFORMATION,
    TIMING,
    ablation_comparisons,
    family_answers,
    spline_vs_fd,
)
from kinematic_pipeline.stages.verdict_rules import argmax_equilibrium, days_in_market, market_positions
from kinematic_pipeline.stages.verdict_signal import (
    Comparison,
    daily_ics,
    daily_log_losses,
    daily_partial_ics,
    information_beyond_trivial,
)
from kinematic_pipeline.stages.verdict_trials import luck_of_the_trials

ARGMAX = "calibrated"  # the calibrated argmax


def _default_scores(ret1, extra, rng) -> dict[str, np.ndarray]:
    return {
        "lr_trivial": -ret1 + rng.normal(0, 0.002, ret1.shape),  # the trivial features' own signal
        "lr_fd": -ret1 + rng.normal(0, 0.002, ret1.shape),  # a copy of it: a large IC, nothing beyond
        "lightgbm_fd": -ret1 + extra,  # the reversal and information beyond it
        "lr_spline": rng.normal(0, 1, ret1.shape),  # noise
    }


def _universe(n_days: int = 250, n_tickers: int = 40, scores_of=_default_scores, extra: float = 0.5) -> pl.DataFrame:
    """Next-day returns r = -0.5 ret1 + ``extra`` x (a signal beyond the trivial features) + noise, and the scores
    ``scores_of(ret1, beyond, rng)`` of each variant."""
    rng = np.random.default_rng(3)
    days = [dt.date(2020, 1, 1) + dt.timedelta(days=k) for k in range(n_days)]
    ret1, vol20, beyond = (rng.normal(0, 0.02, (n_days, n_tickers)) for _ in range(3))
    r = -0.5 * ret1 + extra * beyond + rng.normal(0, 0.02, (n_days, n_tickers))  # the reversal, and more
    scores = scores_of(ret1, beyond, rng)
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


def _curves(records: dict[str, np.ndarray], start=dt.date(2021, 1, 4), tau: float = 0.01) -> pl.DataFrame:
    """Pooled equity curves at 10 bps of one ticker and seed: {variant: daily returns} (Buy & Hold included); a
    record is long every day unless all its returns are 0 (flat: in cash)."""
    frames = []
    for variant, r in records.items():
        equity = np.concatenate([[1.0], np.cumprod(1 + r)])
        days = [start + dt.timedelta(days=k) for k in range(equity.size)]
        frames.append(
            pl.DataFrame(
                {
                    "variant": variant,
                    "tau": None if variant == "buy_and_hold" else tau,
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


def _rows(rows: list[dict]) -> dict[str, dict]:
    return {r["Test"].split(":")[0]: r for r in rows}


def test_a_nan_interval_answers_undefined_never_b_is_better(tmp_path):
    settings = load_settings("ci", warehouse=tmp_path, env={})
    rng = np.random.default_rng(0)
    flat = np.zeros(300)  # never in the market: its Sharpe is undefined, so is the difference
    curves = {
        ARGMAX: _curves(
            {"buy_and_hold": rng.normal(0, 0.01, 300), "lr_spline": flat, "lr_fd": rng.normal(0, 0.01, 300)}
        ),
        "margin": pl.DataFrame(),
    }
    diff = mt.sharpe_difference_test(flat, rng.normal(0, 0.01, 300), reps=50)
    assert all(np.isnan(diff))
    strategies = strategy_returns(settings, curves)
    positions = market_positions(settings, curves, strategies.days)
    rows = _rows(spline_vs_fd(settings, strategies, None, in_market=days_in_market(positions), positions=positions))
    row = rows[f"Logistic regression (Spline) - Logistic regression (FD) (spline vs finite differences), {ARGMAX} rule"]
    assert row["Question"] == TIMING and row["Answer"] == (
        "cannot be computed: a Sharpe ratio is undefined: one record's excess returns do not vary (e.g. it never trades)"
    )
    assert "nan" not in row["Statistic"]  # the days and exposures, no "+nan (annualized)"
    assert row["Statistic"].endswith(
        "exposure (mean share of days long per ticker-seed): Logistic regression (Spline) 0%, Logistic regression "
        "(FD) 100%; positions differ on 100% of 300 ticker-days; days with any ticker-seed long: Logistic regression "
        "(Spline) 0, Logistic regression (FD) 300 of 300"
    )
    assert family_answers([Comparison("t", estimate=-1.0)], [("a", "b")]) == [
        "undefined: the statistic or its interval is not finite (a flat record)"
    ]


def test_a_probe_ablation_flat_under_argmax_is_tested_under_the_margin_rule_and_never_skipped(tmp_path):
    """Both probes sell on day one under the argmax (identical flat records: one strategy, once silently skipped);
    under the margin rule they trade, and that comparison is computed; the argmax one says why it cannot be. Each
    timing row prints both sides' days in the market."""
    settings = load_settings("ci", warehouse=tmp_path, env={})
    rng = np.random.default_rng(1)
    market = rng.normal(0.0005, 0.01, 500)
    flat = np.zeros(500)
    argmax = _curves({"buy_and_hold": market, "lr_spline": flat, "lr_fd": flat})
    margin = _curves({"lr_spline": market + rng.normal(0.002, 0.002, 500), "lr_fd": market})
    curves = {ARGMAX: argmax, "margin": margin}
    strategies = strategy_returns(settings, curves)
    assert (
        strategies.column[strategy_name("lr_spline", 0.01, ARGMAX)]
        == strategies.column[strategy_name("lr_fd", 0.01, ARGMAX)]
    )
    assert count_trials(strategies)[0] == 3  # the flat pair merged, plus two margin records
    in_market = days_in_market(market_positions(settings, curves, strategies.days))
    assert in_market[strategy_name("lr_spline", 0.01, ARGMAX)] == 0
    assert in_market[strategy_name("lr_fd", 0.01, "margin")] == 500
    table = spline_vs_fd(settings, strategies, None, in_market=in_market)
    rows = _rows(table)
    pair = "Logistic regression (Spline) - Logistic regression (FD) (spline vs finite differences)"
    argmax_row, margin_row = rows[f"{pair}, {ARGMAX} rule"], rows[f"{pair}, margin rule"]
    assert argmax_row["Answer"] == "cannot be computed: the two records are identical day by day (e.g. neither trades)"
    assert argmax_row["Statistic"].endswith("Logistic regression (Spline) 0, Logistic regression (FD) 0 of 500")
    assert "exposure" not in argmax_row["Statistic"]  # no positions given: the days alone
    assert margin_row["Answer"].startswith("yes: Logistic regression (Spline) is better timed at 5% (Holm p")
    assert (
        "days with any ticker-seed long: Logistic regression (Spline) 500, Logistic regression (FD) 500 of 500"
        in (margin_row["Statistic"])
    )
    model_rows = [r for t, r in rows.items() if t.startswith("SplineGPT")]
    assert len(model_rows) == 2 * (3 + len(RULES))  # no universe, no SplineGPT record: each row says why
    assert all(r["Answer"].startswith("cannot be computed: ") for r in model_rows)
    # per ablation: 2 information tests, 1 calibration test, 1 timing test per rule; every one has its row
    assert len(table) == 4 * (3 + len(RULES))
    assert {r["Question"] for r in table} == {INFORMATION, CALIBRATION, TIMING}
    assert "SplineGPT - RawGPT (spline vs raw values)" in " ".join(rows)  # RawGPT reads raw values, not differences
    assert "SplineGPT - RawGPT-FD (spline vs finite differences)" in " ".join(rows)
    # every strategies' row (SPA, both deflated Sharpe ratios, the model confidence set) names the basket's
    # survivorship and hindsight on real data; none does on a synthetic source, whose names are never delisted
    real = load_settings("ci", warehouse=tmp_path, source="parquet", source_path=str(tmp_path / "x.parquet"), env={})
    strategy_rows = beat_buy_and_hold(real, strategies)
    assert len(strategy_rows) == 4 and all(r["Test"].endswith(f"; {SURVIVORSHIP}") for r in strategy_rows)
    assert {r["Question"].split(" ")[0] for r in strategy_rows} == {"Does", "Is", "Which"}
    assert not any(SURVIVORSHIP in r["Test"] for r in beat_buy_and_hold(settings, strategies))


def test_effective_trials_counts_clusters_of_correlated_strategies():
    rng = np.random.default_rng(2)
    factors = rng.normal(0, 0.01, (400, 3))
    returns = np.column_stack([factors[:, k // 4] + rng.normal(0, 0.001, 400) for k in range(12)])
    assert mt.effective_trials(returns) == 3  # 12 strategies, three independent bets
    assert mt.effective_trials(rng.normal(0, 0.01, (400, 2))) == 2
    assert mt.effective_trials(np.column_stack([factors[:, 0]] * 4)) == 1


def _paired_universe(settings, rng, n_days: int = 120, n: int = 30):
    """lr_spline's probabilities put more mass on the close-to-close label than lr_fd's on the same ticker-days."""
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
    return pl.concat(frames)


def test_the_paired_log_loss_test_finds_the_better_calibrated_twin_under_its_own_question(tmp_path):
    """The paired daily log-loss difference says lr_spline is better calibrated; it is its own question, never
    "more information"; its Newey-West lag is at least 20 days."""
    settings = load_settings("ci", warehouse=tmp_path, env={})
    rng = np.random.default_rng(6)
    universe = _paired_universe(settings, rng)
    losses = daily_log_losses(settings, universe)
    assert losses["lr_spline"]["log_loss"].mean() < losses["lr_fd"]["log_loss"].mean()
    curves = {
        ARGMAX: _curves({"buy_and_hold": rng.normal(0, 0.01, 50), "lr_spline": rng.normal(0, 0.01, 50)}),
        "margin": pl.DataFrame(),
    }
    families = ablation_comparisons(settings, strategy_returns(settings, curves), daily_ics(universe), losses)
    (loss_test,) = [c for c in families[CALIBRATION] if c.test.startswith("Logistic")]
    assert "log loss" in loss_test.test and loss_test.estimate > 0 and loss_test.p < 0.001
    assert "Newey-West lag 20" in loss_test.statistic
    assert not any("log loss" in c.test for c in families[INFORMATION] + families[TIMING])
    assert [len(families[q]) for q in (INFORMATION, CALIBRATION, TIMING)] == [8, 4, 4 * len(RULES)]
    rows = spline_vs_fd(settings, strategy_returns(settings, curves), daily_ics(universe), losses)
    (row,) = [r for r in rows if r["Question"] == CALIBRATION and r["Test"].startswith("Logistic")]
    assert row["Answer"].startswith("yes: Logistic regression (Spline) forecasts better (log loss) at 5%")
    assert row["Trials"] == "1 tests in this family (Holm)"  # the other ablations have no universe rows here


def test_more_information_is_answered_by_the_paired_rank_ic_and_partial_rank_ic(tmp_path):
    """lr_fd copies the trivial features (a large rank IC, nothing beyond them); lr_spline ranks only a weaker
    signal beyond them. The paired rank IC says lr_fd ranks returns better; the paired partial rank IC given ret1
    and vol20 says lr_spline carries more beyond the trivial features: each row says which it tests."""
    settings = load_settings("ci", warehouse=tmp_path, env={})

    def scores(ret1, beyond, rng):
        return {"lr_fd": -ret1 + rng.normal(0, 0.002, ret1.shape), "lr_spline": beyond}

    universe = _universe(scores_of=scores, extra=0.25)
    rng = np.random.default_rng(0)
    curves = {ARGMAX: _curves({"buy_and_hold": rng.normal(0, 0.01, 50)}), "margin": pl.DataFrame()}
    curves[ARGMAX] = pl.concat([curves[ARGMAX], _curves({"lr_spline": rng.normal(0, 0.01, 50)})])
    strategies = strategy_returns(settings, curves)
    rows = spline_vs_fd(settings, strategies, daily_ics(universe), None, daily_partial_ics(universe))
    pair = "Logistic regression (Spline) - Logistic regression (FD) (spline vs finite differences)"
    ic, partial = _rows(rows)[f"{pair}, rank IC"], _rows(rows)[f"{pair}, partial rank IC"]
    assert len(_rows(rows)) == len(rows)  # every row's test is named uniquely before its colon
    assert ic["Question"] == partial["Question"] == INFORMATION
    assert ic["Answer"].startswith("no: Logistic regression (FD) carries more information at 5%")
    assert partial["Answer"].startswith("yes: Logistic regression (Spline) carries more information at 5%")
    assert ic["Trials"] == "2 tests in this family (Holm)"
    assert "lag 20" in ic["Statistic"] and "partial rank-IC difference" in partial["Detectable at 80% power"]
    no_controls = spline_vs_fd(settings, strategies, daily_ics(universe), None, None)
    (missing,) = [r for r in no_controls if r["Test"].startswith("Logistic") and "partial rank IC" in r["Test"]]
    assert missing["Answer"] == "cannot be computed: the universe has no ret1 and vol20 (the trivial probe's features)"


# ---- question 2: the deflated Sharpe ratio (science-5 M1, M2, L4) -----------------------------------------------


def test_the_raw_sharpe_row_says_no_for_strategies_that_only_ride_the_market():
    """200 histories of 1,007 days: a market of true annual Sharpe 0.87, 14 long/cash strategies in it on random
    days (each on 60-100% of them) and one flat. None has skill beyond riding the market: the row centred on the
    trials' mean Sharpe answers "no" in at least 95% of them (a hurdle centred on 0 said "yes" in 97 of 200)."""
    rng = np.random.default_rng(2026)
    days, sd = 1007, 0.01
    names = [f"s{j} tau=0.01" for j in range(15)]
    yes = 0
    for _ in range(200):
        market = rng.normal(0.87 / np.sqrt(252) * sd, sd, days)
        shares = rng.uniform(0.6, 1.0, 14)
        riders = (rng.random((days, 14)) < shares) * market[:, None]
        raw, _ = luck_of_the_trials(names, np.column_stack([riders, np.zeros(days)]), market)
        yes += raw["Answer"].startswith("yes")
    assert yes <= 10, f"the raw-Sharpe row said yes in {yes} of 200 market-riding histories"
    assert (
        raw["Question"]
        == "Is the best strategy's Sharpe above the average trial's Sharpe by more than the luck of N trials?"
    )


def test_n_and_v_leave_out_the_flat_record_and_say_so():
    """A never-trading record has no Sharpe ratio: it is in neither N nor V of the raw row. Its active return
    (minus Buy & Hold) has one, so the active row counts it."""
    rng = np.random.default_rng(4)
    market = rng.normal(0.0004, 0.01, 600)
    returns = np.column_stack([market[:, None] * (rng.random((600, 5)) < 0.8), np.zeros(600)])
    raw, active = luck_of_the_trials([f"s{j}" for j in range(6)], returns, market)
    assert raw["Trials"].startswith(
        "N = 5 strategies with a defined Sharpe ratio (1 record whose Sharpe is undefined, never in the market, "
        "left out of N and V); V = their Sharpe ratios' variance; the hurdle centred on their mean Sharpe"
    )
    assert "DSR" in raw["Statistic"] and "at N = 5 " in raw["Statistic"]
    assert active["Trials"].startswith("N = 6 strategies with a defined Sharpe ratio; V")


def test_the_effective_n_is_information_and_never_answers_yes_alone():
    """Fifteen strategies that are one bet shifted by a constant (correlation 1: one cluster, one eigenvalue) with
    Sharpe ratios from -1.3 to +1.6 a year: at N = 15 the luck of the spread deflates the best; at the effective N
    = 1 its PSR passes. The answer is "no", and says the effective N would pass; a planted edge passes at N."""
    rng = np.random.default_rng(5)
    days, sd = 1007, 0.01
    bet = rng.normal(0, sd, days)
    bet = (bet - bet.mean()) / bet.std(ddof=1) * sd  # mean 0: each Sharpe is exactly its shift's
    shifts = np.linspace(-1.3, 1.6, 15) / np.sqrt(252) * sd
    returns = bet[:, None] + shifts[None, :]
    names = [f"s{j}" for j in range(15)]
    _, active = luck_of_the_trials(names, returns, np.zeros(days))
    assert active["Answer"].startswith("no evidence at the 5% level with N = 15")
    assert "it would pass at the effective N" in active["Answer"] and "never answers yes" in active["Answer"]
    assert "effective N 1-1: 1 silhouette cluster of their return correlations" in active["Trials"]
    assert mt.probabilistic_sharpe_ratio(returns[:, -1]) > 0.95  # what the effective N = 1 tests
    # a planted edge: fourteen noise strategies and one of annual Sharpe 4 pass at the full N
    planted = np.column_stack([rng.normal(0, sd, (days, 14)), rng.normal(4 / np.sqrt(252) * sd, sd, days)])
    _, active = luck_of_the_trials(names, planted, np.zeros(days))
    assert active["Answer"].startswith("yes: survives deflation at 5% with N = 15")
    assert "(s14)" in active["Test"]


# ---- question 4: can the argmax rule tell tokenizations apart? ---------------------------------------------------


def test_the_argmax_equilibrium_row_says_no_when_every_record_never_trades(tmp_path):
    settings = load_settings("ci", warehouse=tmp_path, env={})
    rng = np.random.default_rng(7)
    market = rng.normal(0.0005, 0.01, 300)
    flat = np.zeros(300)
    argmax_rules = [r for r in RULES if r != "margin"]
    curves = {rule: _curves({"splinegpt": flat, "rawgpt_fd": flat, "lr_spline": flat}) for rule in argmax_rules}
    curves[argmax_rules[-1]] = pl.concat([curves[argmax_rules[-1]], _curves({"buy_and_hold": market})])
    curves["margin"] = _curves({"splinegpt": market * (rng.random(300) < 0.5), "rawgpt_fd": market})
    strategies = strategy_returns(settings, curves)
    rows = {
        r["Question"]: r
        for r in argmax_equilibrium(strategies, days_in_market(market_positions(settings, curves, strategies.days)))
    }
    assert set(rows) == {f"Can the {rule} argmax rule tell tokenizations apart?" for rule in argmax_rules}
    for row in rows.values():
        assert row["Answer"] == "no: every variant is in the same equilibrium: never in the market"
        assert row["Statistic"].startswith("3 records of 3 variants; 1 distinct return series; 3 never in the market")
        assert row["Trials"] == "- (descriptive, no test)"
    # with the oracle's days in the market: the oracle never in either ("the rule's"), or in on 120 days
    never = {r: 0 for r in RULES}
    rows = argmax_equilibrium(strategies, days_in_market(market_positions(settings, curves, strategies.days)), never)
    for row in rows:
        assert row["Answer"].startswith("no: every variant (the oracle included) is in the same equilibrium")
        assert row["Answer"].endswith("the rule's equilibrium, not the tokens'")
        assert "the oracle's days in the market 0" in row["Statistic"]
    traded = {r: 120 for r in RULES}
    for row in argmax_equilibrium(
        strategies, days_in_market(market_positions(settings, curves, strategies.days)), traded
    ):
        assert row["Answer"] == (
            "no: every variant is in the same equilibrium: never in the market; the oracle is in the market on 120 "
            "days: the rule can trade perfect information"
        )


def test_the_argmax_equilibrium_row_counts_distinct_records_when_they_trade(tmp_path):
    settings = load_settings("ci", warehouse=tmp_path, env={})
    rng = np.random.default_rng(8)
    market = rng.normal(0.0005, 0.01, 300)
    flat = np.zeros(300)
    records = {"buy_and_hold": market, "splinegpt": market, "rawgpt_fd": flat, "lr_spline": flat}
    curves = {ARGMAX: _curves(records), "margin": pl.DataFrame()}
    curves[ARGMAX] = pl.concat([curves[ARGMAX], _curves({"rawgpt": market}, tau=0.005)])
    strategies = strategy_returns(settings, curves)
    in_market = days_in_market(market_positions(settings, curves, strategies.days))
    (row,) = [r for r in argmax_equilibrium(strategies, in_market) if ARGMAX in r["Question"]]
    assert row["Statistic"] == (
        "4 records of 4 variants; 2 distinct return series; 2 never in the market; days in the market 0-300 of 300; "
        "matched pairs of tokenizations that differ: 1 of 1"  # rawgpt is at another tau: no pair
    )
    assert row["Answer"] == "yes, descriptively: 1 of 1 matched pairs differ (SplineGPT / RawGPT-FD)"
    # science-6 L-E: records that read no tokens differ, but within the matched pair the two are one series
    records = {"buy_and_hold": market, "momentum_1d": market, "splinegpt": flat, "rawgpt_fd": flat}
    curves = {ARGMAX: _curves(records), "margin": pl.DataFrame()}
    strategies = strategy_returns(settings, curves)
    in_market = days_in_market(market_positions(settings, curves, strategies.days))
    (row,) = [r for r in argmax_equilibrium(strategies, in_market) if ARGMAX in r["Question"]]
    assert row["Answer"].startswith("no: within each of the 1 matched pairs of tokenizations the two records are one")


def test_a_tokenization_yes_needs_three_seeds_of_one_sign_beside_the_day_only_test(tmp_path):
    """The rank-IC row of SplineGPT against RawGPT-FD: the seeds' mean daily IC difference is clearly positive
    (the day-only Holm test says yes), but one seed of three goes the other way: the answer is "no evidence across
    seeds", and the statistic prints each seed's difference; with the three seeds agreeing it is "yes"."""
    settings = load_settings("ci", warehouse=tmp_path, env={})
    rng = np.random.default_rng(4)
    records = {"buy_and_hold": rng.normal(0, 0.01, 300), "lr_spline": rng.normal(0, 0.01, 300)}
    strategies = strategy_returns(settings, {ARGMAX: _curves(records), "margin": pl.DataFrame()})
    dates = [dt.date(2020, 1, 1) + dt.timedelta(days=k) for k in range(400)]

    def series(mean: float) -> pl.DataFrame:
        return pl.DataFrame({"date": dates, "rank_ic": rng.normal(mean, 0.02, len(dates))})

    def answers(spline_means: tuple[float, float, float]) -> dict:
        by_seed = {("rawgpt_fd", s): series(0.0) for s in (1, 2, 3)}
        by_seed |= {("splinegpt", s): series(m) for s, m in zip((1, 2, 3), spline_means, strict=True)}
        mean = {
            v: pl.concat([by_seed[(v, s)] for s in (1, 2, 3)]).group_by("date").agg(pl.col("rank_ic").mean())
            for v in ("splinegpt", "rawgpt_fd")
        }
        rows = _rows(spline_vs_fd(settings, strategies, mean, by_seed={"rank_ic": by_seed}))
        row = rows["SplineGPT - RawGPT-FD (spline vs finite differences), rank IC"]
        return row

    split = answers((0.03, 0.03, -0.01))
    assert split["Answer"].startswith("no evidence across seeds: 1 of 3 seeds disagrees (each day-only Holm p")
    assert "seeds as replicates: +0.029" in split["Statistic"] and "(2 of 3 agree)" in split["Statistic"]
    agreed = answers((0.03, 0.02, 0.025))
    assert agreed["Answer"].startswith("yes: SplineGPT carries more information at 5%")
    assert "(3 of 3 agree)" in agreed["Statistic"] and "conditional on the 3 trained models" in agreed["Statistic"]


def test_another_tasks_rows_follow_and_name_next_day_direction_the_negative_control():
    from kinematic_pipeline.stages.verdict import NEGATIVE_CONTROL, VERDICT_SCHEMA, with_task_rows
    from kinematic_pipeline.stages.verdict_signal import BEYOND_TRIVIAL

    def row(question: str) -> dict:
        return dict.fromkeys(VERDICT_SCHEMA, "-") | {"Question": question}

    table = pl.DataFrame([row(BEYOND_TRIVIAL), row(CALIBRATION), row(TIMING)], schema=VERDICT_SCHEMA)
    assert with_task_rows(table, []).equals(table)  # Buy/Sell/Hold alone: as it was
    vol = row("Does a learned forecaster beat HAR and GARCH on next-5-session variance (QLIKE)?")
    both = with_task_rows(table, [vol])
    assert both["Question"].to_list() == [
        NEGATIVE_CONTROL + BEYOND_TRIVIAL,
        NEGATIVE_CONTROL + CALIBRATION,
        TIMING,  # a strategy's timing is not a forecast of direction
        vol["Question"],
    ]


def _seeded_curves(records: dict[tuple[str, int], np.ndarray]) -> pl.DataFrame:
    """``_curves`` with a seed per record: {(variant, seed): daily returns}."""
    return pl.concat(
        [_curves({variant: r}).with_columns(pl.lit(seed).alias("seed")) for (variant, seed), r in records.items()]
    )


def test_a_timing_yes_needs_three_seeds_of_one_sign(tmp_path):
    """The timing row of SplineGPT against RawGPT-FD with three seeds each: SplineGPT's pooled record beats
    RawGPT-FD's by far on the day-only test, but with one seed the other way the answer is "no evidence across
    seeds", the statistic printing each seed's Sharpe difference; with the three agreeing it is "yes"."""
    settings = load_settings("ci", warehouse=tmp_path, env={})
    rng = np.random.default_rng(5)
    market = rng.normal(0.0, 0.01, 600)

    def timing_row(edges: tuple[float, float, float]) -> dict:
        records = {("buy_and_hold", 0): market}
        records |= {("rawgpt_fd", s): market + rng.normal(0, 0.002, 600) for s in (1, 2, 3)}
        records |= {("splinegpt", s): market + e + rng.normal(0, 0.002, 600) for s, e in zip((1, 2, 3), edges)}
        curves = {ARGMAX: _seeded_curves(records), "margin": pl.DataFrame()}
        strategies = strategy_returns(settings, curves)
        from kinematic_pipeline.stages.strategies import strategy_returns_by_seed

        by_seed = {"sharpe": strategy_returns_by_seed(settings, curves, strategies.days)}
        rows = _rows(spline_vs_fd(settings, strategies, None, by_seed=by_seed))
        return rows[f"SplineGPT - RawGPT-FD (spline vs finite differences), {ARGMAX} rule"]

    split = timing_row((0.004, 0.004, -0.002))
    assert split["Answer"].startswith("no evidence across seeds: 1 of 3 seeds disagrees")
    assert "seeds as replicates: +" in split["Statistic"] and "(2 of 3 agree)" in split["Statistic"]
    agreed = timing_row((0.004, 0.003, 0.0035))
    assert agreed["Answer"].startswith("yes: SplineGPT is better timed at 5%")
    assert "(3 of 3 agree)" in agreed["Statistic"] and "Ledoit-Wolf HAC test" in agreed["Test"]


def test_a_probe_pair_is_fitted_once_and_needs_no_seeds():
    """lr_spline and lr_fd are fitted once (seed 0): their rows are the day-only test's, never "fewer than 3
    seeds"."""
    from kinematic_pipeline.stages.verdict_signal import replicated

    dates = [dt.date(2020, 1, 1) + dt.timedelta(days=k) for k in range(100)]
    series = pl.DataFrame({"date": dates, "rank_ic": np.linspace(0, 0.1, 100)})
    comparison = Comparison("t", "s", "i", 0.01, 0.001, se=0.001, unit="rank_ic", pair=("a", "b"))
    by_seed = {("lr_spline", 0): series, ("lr_fd", 0): series}
    assert replicated(comparison, by_seed, "lr_spline", "lr_fd", "rank_ic", 1.0, (50, 0)) is comparison
    seeded = replicated(
        comparison,
        {("splinegpt", 1): series, ("rawgpt_fd", 1): series},
        "splinegpt",
        "rawgpt_fd",
        "rank_ic",
        1.0,
        (50, 0),
    )
    assert seeded.replication["reason"] == "fewer than 3 seeds"


def test_a_direction_row_whose_seed_scores_no_day_says_why_instead_of_raising():
    """A GPT seed whose score is constant across names every day has no daily rank IC (all null): its row answers
    "no evidence" with that reason and the statistic names the seed that has none (it raised before)."""
    from kinematic_pipeline.stages.verdict_signal import replicated, replication_text

    dates = [dt.date(2020, 1, 1) + dt.timedelta(days=k) for k in range(60)]
    series = pl.DataFrame({"date": dates, "rank_ic": np.linspace(0, 0.1, 60)})
    flat = series.with_columns(pl.lit(None, dtype=pl.Float64).alias("rank_ic"))
    by_seed = {("splinegpt", s): series for s in (1, 2, 3)} | {("rawgpt_fd", s): series for s in (1, 3)}
    by_seed[("rawgpt_fd", 2)] = flat
    comparison = Comparison("t", "s", "i", 0.01, 0.001, se=0.001, unit="rank_ic", pair=("a", "b"))
    row = replicated(comparison, by_seed, "splinegpt", "rawgpt_fd", "rank_ic", 1.0, (50, 0)).replication
    assert row["answer"] == "no evidence" and row["reason"] == "1 of 3 seeds scores no day that both sides score"
    text = replication_text(dataclasses.replace(comparison, replication=row))
    assert text == f"; seeds as replicates: +0.0000, none, +0.0000 ({row['reason']})"
