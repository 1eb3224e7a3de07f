"""The volatility task (``tasks/volatility.py``, issue 53) through the real stages, on a copy of the ci warehouse
``.ci/run`` materialized, turned on as an operator would (``KP_TASKS=bsh,vol``): labelled beside Buy/Sell/Hold,
fine-tuned with LoRA from the ci foundations of two tokenizations, predicted on the test tickers and the universe,
and scored against vol20, EWMA, GARCH and HAR on the same ticker-days, with the tokenizations' paired rows and
volatility targeting on each forecast; its tables titled in the report."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import polars as pl
import pytest

from kinematic_pipeline.code_versions import CODE_VERSIONS
from kinematic_pipeline.config import load_settings
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.stages.backtests import materialize_backtests
from kinematic_pipeline.stages.labels import materialize_labels
from kinematic_pipeline.stages.predict import materialize_predictions
from kinematic_pipeline.stages.task_evidence import task_tables, task_verdict_rows
from kinematic_pipeline.tasks.volatility import RealizedVariance
from kinematic_pipeline.training.run import finetune
from kinematic_pipeline.warehouse import LABELS
from kinematic_pipeline_tests.conftest import golden_ci_settings

pytestmark = pytest.mark.e2e

PAIR = ("splinegpt", "rawgpt_fd")


def test_the_volatility_task_is_fine_tuned_predicted_and_scored_beside_the_references(tmp_path):
    golden = golden_ci_settings()
    shutil.copytree(golden.warehouse.root, tmp_path / "ci", symlinks=True)
    settings = load_settings("ci", warehouse=tmp_path / "ci", env={"KP_TASKS": "bsh,vol"})
    wh, week = settings.warehouse, RealizedVariance(5)
    days = wh.shard_days(LABELS)
    before = pl.read_parquet(wh.shard(LABELS, days[100]))
    materialize_labels(settings, days, progress=False)
    after = pl.read_parquet(wh.shard(LABELS, days[100]))
    assert after.select(before.columns).equals(before)  # Buy/Sell/Hold's columns as they were
    assert after[week.label_column].is_finite().all()

    seed, fold = settings.train.seeds[0], settings.folds[-1]
    for variant in PAIR:
        policy = Policy.named(settings.folds, variant, seed, week, fold.name)
        trained = finetune(settings, policy, progress=False)
        assert trained.target_summary["rows"] > 0 and np.isfinite(trained.best_val_loss)
        made = materialize_predictions(settings, policy)
        assert made.path.parent == wh.root / "predictions" / "vol" and made.frame["log_variance"].is_finite().all()
        sized = materialize_backtests(settings, policy, CODE_VERSIONS)  # its backtests partition: the targeting
        assert set(sized.metrics["cost_bps"]) == set(settings.evaluate.backtest.costs_bps)
        assert (sized.metrics["mean_weight"] <= 1).all() and sized.metrics["sharpe"].is_finite().all()
    _traced_by_lineage(settings, policy, str(sized.metrics["ticker"][0]))

    tables = task_tables(settings)
    forecasters, pairs = tables["task_vol5_forecasters"], tables["task_vol5_tokenizations"]
    with pl.Config(tbl_cols=16, tbl_width_chars=200):
        print(f"\n{forecasters.drop('qlike_low', 'qlike_high')}\n{pairs.drop('conditional_on')}")
    names = set(forecasters["forecaster"])
    assert {"vol20", "ewma", "garch", "har", *(f"{v} seed {seed}" for v in PAIR)} == names
    assert forecasters["rows"].n_unique() == 1 and forecasters["in_mcs"].any()  # one set of ticker-days
    assert forecasters["rows"][0] > forecasters["days"][0] * 6  # the universe's tickers beside the six
    assert set(pairs["metric"]) == {"qlike", "rank_ic"} and (pairs["reason"] == "fewer than 3 seeds").all()
    targeting = tables["task_vol5_targeting"]
    print(targeting)
    assert set(targeting["forecaster"]) == names | {"buy_and_hold"} and (targeting["mean_weight"] <= 1).all()
    references = tables["task_vol5_references"]
    assert set(references["variant_b"]) == {"har", "garch"} and set(references["variant_a"]) == set(PAIR)

    first, *pairs = task_verdict_rows(settings)  # one seed: no "yes" can be said
    print("\n".join(f"{r['Question']} -> {r['Answer']}" for r in (first, *pairs)))
    assert first["Question"].startswith("Does a learned forecaster beat HAR and GARCH on next-5-session variance")
    assert "fewer than 3 seeds" in first["Answer"] or first["Answer"].startswith("no:")
    assert len(pairs) == 2 and all(r["Answer"].startswith(("no evidence: fewer than 3 seeds", "no:")) for r in pairs)

    from kinematic_pipeline.stages.report_titles import optional_tables, table_headings

    headings = table_headings(settings)
    assert {"task_vol5_forecasters", "task_vol5_tokenizations"} <= set(optional_tables(settings))
    assert all(len(headings[name][0]) < 100 for name in tables)  # titles a person reads at a glance


def _traced_by_lineage(settings, policy, ticker: str) -> None:
    """The real CLI traces the policy's volatility-targeted Sharpe to its files, and names the one edited after."""
    env = {**os.environ, "KP_PROFILE": "ci", "KP_WAREHOUSE": str(settings.warehouse.root), "KP_TASKS": "bsh,vol"}
    args = [sys.executable, "-m", "kinematic_pipeline", "lineage", *policy.lineage_args.split(), "--ticker", ticker]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    print(done.stdout[-3000:], done.stderr[-2000:])
    assert done.returncode == 0, done.stderr
    first, *links = done.stdout.splitlines()
    assert first.startswith(f"{policy.variant.name} vol5 (volatility targeting") and "Buy & Hold" in first
    assert any(line.strip().startswith("targeting_backtests") for line in links)
    assert any("raw_ohlcv [sizing]" in line for line in links)  # the training bars its sizes were set from
    assert "every link resolves to a file with the recorded hash" in links[-1]
    predictions = settings.warehouse.predictions_file(policy)
    kept = predictions.read_bytes()
    predictions.write_bytes(kept + b"\0")  # a byte after the backtest: the chain breaks there
    broken = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    predictions.write_bytes(kept)
    assert broken.returncode == 1 and f"hash mismatch: {predictions}" in broken.stdout
