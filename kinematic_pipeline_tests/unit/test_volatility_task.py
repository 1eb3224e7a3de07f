"""The volatility task (issue 53, ``tasks/volatility.py``): its target by hand and by the labels stage (close-to-close
returns whatever the classes' label source), its QLIKE loss and prior, its keys, and its place in the run's grid (the
first horizon reported, the others swept; a forecast's volatility targeting backtested in its partitions)."""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl
import pytest
import torch

from kinematic_pipeline.tasks.volatility import VARIANCE_FLOOR, RealizedVariance, log_realized_variance


def test_the_target_is_the_log_of_the_summed_squared_returns_of_the_next_h_sessions():
    forward = np.array([[0.01, -0.02, 0.0, 0.03, 0.01], [0.01, np.nan, 0.0, 0.0, 0.0], [0.0] * 5])
    expected = [np.log(0.01**2 + 0.02**2 + 0.03**2 + 0.01**2), np.nan, np.log(VARIANCE_FLOOR)]
    np.testing.assert_allclose(RealizedVariance(5).target(forward), expected, rtol=1e-12)
    np.testing.assert_allclose(RealizedVariance(1).target(forward), np.log([1e-4, 1e-4, VARIANCE_FLOOR]), rtol=1e-12)
    np.testing.assert_allclose(RealizedVariance(2).target(forward[:, :3]), log_realized_variance(forward[:, :2]))
    with pytest.raises(ValueError, match="whole number of sessions"):
        RealizedVariance(0)


def test_keys_and_names_follow_the_horizon():
    week, day = RealizedVariance(5), RealizedVariance(1)
    assert (week.key, week.stem, week.folder, week.label_column) == ("vol5", "vol5", "task=vol5", "label_vol_vol5")
    assert day.key == "vol1" and week != day and week == RealizedVariance() and week.horizon == 5
    assert week.predictions_view == "predictions_vol" and week.rules == () and week.returns == "close"


def test_qlike_is_least_at_the_true_variance_and_the_prior_is_the_best_constant():
    rng = np.random.default_rng(1)
    variance = np.exp(rng.normal(-7.0, 0.6, 20_000))
    realized = variance * rng.chisquare(5, variance.size) / 5  # RV_5 of N(0, variance / 5) returns: unbiased
    target = torch.tensor(np.log(realized))
    task = RealizedVariance(5)

    def qlike(shift: float) -> float:
        return float(task.loss(torch.tensor(np.log(variance) + shift)[:, None], target))

    assert qlike(0.0) < min(qlike(-0.15), qlike(0.15))
    hand = np.mean(realized / variance - np.log(realized / variance) - 1.0)
    assert qlike(0.0) == pytest.approx(hand, rel=1e-9)
    constant = torch.full((realized.size, 1), float(task.prior(task.summary(np.log(realized)))[0]), dtype=torch.float64)
    assert float(task.loss(constant, target)) < min(float(task.loss(constant + s, target)) for s in (-0.05, 0.05))
    unknown = torch.tensor([float("nan")], dtype=torch.float64)
    z = torch.zeros((1, 1), dtype=torch.float64, requires_grad=True)
    none = task.loss(z, unknown)
    assert float(none.detach()) == 0.0 and none.requires_grad  # nothing known: no loss, a graph still


def test_the_labels_stage_builds_it_from_close_to_close_returns_whatever_the_classes_read(tmp_path):
    from kinematic_pipeline.calendar import trading_days
    from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv
    from kinematic_pipeline.stages.labels import materialize_labels
    from kinematic_pipeline.stages.tokenize import materialize_tokens
    from kinematic_pipeline.tokenizations import SPLINE
    from kinematic_pipeline_tests.conftest import CUT, END, START, _bars, _settings

    settings = _settings(tmp_path, "wh", _bars(2), taus=(0.01,), tasks=("bsh", "vol"), label_source="spline")
    assert [t.key for t in settings.tasks] == ["0.01", "vol5", "vol1"] and settings.label_horizon == 5
    days = [d for d in trading_days(START, END) if d <= CUT]
    materialize_raw_ohlcv(settings, trading_days(START, END), progress=False)
    materialize_tokens(settings, days, (SPLINE,), progress=False)
    materialize_labels(settings, days, progress=False)
    labels = pl.concat([pl.read_parquet(settings.warehouse.shard("labels", d)) for d in days]).sort("ticker", "date")
    week, day = RealizedVariance(5), RealizedVariance(1)
    assert labels.schema[week.label_column] == labels.schema[day.label_column] == pl.Float32
    r_close = labels["r_close"].to_numpy()
    assert not np.allclose(r_close, labels["r_spline"].to_numpy(), equal_nan=True)  # two sources, told apart
    np.testing.assert_allclose(
        labels[day.label_column].to_numpy(), np.log(np.maximum(r_close**2, VARIANCE_FLOOR)), 1e-6
    )

    checked = 0
    for (ticker,), rows in labels.group_by("ticker", maintain_order=True):  # the loop twin: the next five r_close
        r, got = rows["r_close"].to_numpy(), rows[week.label_column].to_numpy()
        for i in range(len(rows) - 5):
            ahead = r[i : i + 5]  # r_close of day j is the return from j to the session after it
            if np.isfinite(ahead).all():
                assert got[i] == pytest.approx(np.log(max(np.sum(ahead**2), VARIANCE_FLOOR)), rel=1e-5), (ticker, i)
                checked += 1
    assert checked > 50


def test_the_grid_reports_the_first_horizon_and_backtests_each_forecasts_volatility_targeting(tmp_path):
    from kinematic_pipeline.config import load_settings
    from kinematic_pipeline.run_keys import policy_keys

    base = load_settings("ci", warehouse=tmp_path, env={})
    settings = load_settings("ci", warehouse=tmp_path, env={"KP_TASKS": "bsh, vol"})  # the operator's switch
    assert settings.tokenize.tasks == ("bsh", "vol") and settings.tasks[: len(base.tasks)] == base.tasks
    with pytest.raises(ValueError, match=r"'vols' is not registered"):
        load_settings("ci", warehouse=tmp_path, env={"KP_TASKS": "bsh,vols"})
    week, day = RealizedVariance(5), RealizedVariance(1)
    assert week.reported(settings) and not day.reported(settings)
    keys = policy_keys(settings, "splinegpt")
    assert {k.rpartition("|")[2] for k in keys} >= {"vol5", "vol1"}
    assert len([k for k in keys if k.endswith("|vol5")]) >= len([k for k in keys if k.endswith("|vol1")])
    assert [k for k in policy_keys(settings, "lr_spline") if "|vol" in k]  # the probes regress it
    assert not [k for k in policy_keys(settings, "momentum_20d") if "|vol" in k]  # a rule forecasts nothing
    from kinematic_pipeline.orchestration.partitions import decision_partitions
    from kinematic_pipeline.run_keys import named_task

    # a forecast has no rule, but its volatility-targeted sizes are backtested in the same partitions
    assert not week.rules and week.backtested and all(t.backtested for t in base.tasks)
    assert decision_partitions(settings, "splinegpt").get_partition_keys() == keys
    assert named_task(settings, "vol5") == week and named_task(settings, "0.01").key == "0.01"
    with pytest.raises(
        ValueError, match=r"'vol9' is neither a tau nor one of the run's tasks \(.*0.01, .*vol5, vol1\)"
    ):
        named_task(settings, "vol9")
    with pytest.raises(ValueError, match="vol_horizons"):
        dataclasses.replace(base.tokenize, vol_horizons=(5, 5))


def test_its_evidence_scores_the_runs_forecasts_beside_the_references_on_the_same_ticker_days(tmp_path):
    from kinematic_pipeline.backtest.volatility_forecasts import ewma_forecast
    from kinematic_pipeline.calendar import trading_days
    from kinematic_pipeline.run_keys import run_policies
    from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv
    from kinematic_pipeline.stages.labels import materialize_labels
    from kinematic_pipeline.stages.task_evidence import task_bars, task_predictions, task_tables
    from kinematic_pipeline.stages.tokenize import materialize_tokens
    from kinematic_pipeline.tokenizations import SPLINE
    from kinematic_pipeline_tests.conftest import END, START, _bars, _settings

    settings = _settings(tmp_path, "wh", _bars(6), taus=(0.01,), tasks=("bsh", "vol"))
    wh, week = settings.warehouse, RealizedVariance(5)
    days = trading_days(START, END)
    materialize_raw_ohlcv(settings, days, progress=False)
    materialize_tokens(settings, days, (SPLINE,), progress=False)
    materialize_labels(settings, days, progress=False)
    labels = pl.concat([pl.read_parquet(wh.shard("labels", d)) for d in days])
    closes = pl.concat([pl.read_parquet(wh.shard("raw_ohlcv", d), columns=["ticker", "date", "close"]) for d in days])
    (fold,) = settings.folds
    tested = labels.filter(pl.col("date") >= fold.test_start).join(closes, on=["ticker", "date"])
    policies = [p for p in run_policies(settings) if p.task == week and p.variant.seeded]  # the models' (no probe)
    assert {p.variant.name for p in policies} == {"splinegpt", "rawgpt_fd", "rawgpt", "patchtst"}
    rng = np.random.default_rng(0)
    ewma = ewma_forecast(task_bars(settings, tested), 5)
    frame = tested.join(ewma, on=["ticker", "date"]).sort("ticker", "date")
    for policy in policies:  # a stand-in for each model's forecasts: EWMA's, with noise of the seed
        outputs = frame["log_variance"].to_numpy() + rng.normal(0, 0.1, frame.height)
        made = week.predictions_frame(frame, policy, outputs[:, None])
        wh.write(made.with_columns(pl.lit(fold.label).alias("fold")), wh.predictions_file(policy))

    predictions = task_predictions(settings, week)
    assert predictions["variant"].n_unique() == 4 and predictions["seed"].n_unique() == len(settings.train.seeds)
    tables = task_tables(settings)
    forecasters, pairs = tables["task_vol5_forecasters"], tables["task_vol5_tokenizations"]
    names = set(forecasters["forecaster"])
    assert {"vol20", "ewma", "har"} <= names and "garch" not in names  # half a year of bars: no GARCH fit
    assert f"splinegpt seed {settings.train.seeds[0]}" in names and forecasters["rows"].n_unique() == 1
    assert forecasters.filter(pl.col("forecaster") == "har")["dm_t"].is_nan().all()
    assert set(pairs["variant_b"]) == {"rawgpt_fd", "rawgpt"} and (pairs["answer"] == "no evidence").all()
    assert (pairs["reason"] == "fewer than 3 seeds").all()  # the ci profile trains two

    # computed once, by the verdict: its rows from these tables, paper_tables reading them back, none left stale
    from kinematic_pipeline.stages.task_evidence import read_task_tables, task_verdict_rows, write_task_tables

    assert task_verdict_rows(settings, tables) == task_verdict_rows(settings)
    write_task_tables(settings, tables)
    back = read_task_tables(settings)
    assert list(back) == list(tables) and all(back[n].equals(tables[n]) for n in tables)
    assert "task_vol5_targeting" in tables
    kept = {n: t for n, t in tables.items() if n != "task_vol5_targeting"}
    write_task_tables(settings, kept)  # a later verdict without one of them (e.g. no targeting backtest)
    assert list(read_task_tables(settings)) == list(kept)
    assert not (wh.report_tables_dir / "task_vol5_targeting.md").exists()
