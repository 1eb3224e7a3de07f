"""A second task through the real stages, on a copy of the ci warehouse ``.ci/run`` materialized: the log-variance
forecast of the tests (``helpers/tasks.py``: no package file edited) is labelled on every day beside Buy/Sell/Hold,
fine-tuned with LoRA from a ci foundation, predicted on the test tickers and the universe into its own folder and
view, and tabled for the report from its predictions; Buy/Sell/Hold's labels and predictions are left as they were.
"""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import polars as pl
import pytest

from kinematic_pipeline.config import load_settings
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.stages.labels import materialize_labels
from kinematic_pipeline.stages.predict import materialize_predictions
from kinematic_pipeline.stages.task_evidence import task_tables
from kinematic_pipeline.training.run import finetune
from kinematic_pipeline.warehouse import LABELS
from kinematic_pipeline_tests.conftest import golden_ci_settings
from kinematic_pipeline_tests.helpers.tasks import LogVariance, register_log_variance

pytestmark = pytest.mark.e2e


def test_a_forecast_task_is_labelled_trained_predicted_and_tabled_from_a_ci_foundation(tmp_path, monkeypatch):
    golden = golden_ci_settings()
    shutil.copytree(golden.warehouse.root, tmp_path / "ci", symlinks=True)
    register_log_variance(monkeypatch)
    base = load_settings("ci", warehouse=tmp_path / "ci", env={})
    settings = dataclasses.replace(base, tokenize=dataclasses.replace(base.tokenize, tasks=("bsh", "logvar")))
    wh, task = settings.warehouse, LogVariance()
    days = wh.shard_days(LABELS)
    before = pl.read_parquet(wh.shard(LABELS, days[100]))

    materialize_labels(settings, days, progress=False)
    after = pl.read_parquet(wh.shard(LABELS, days[100]))
    assert after.drop(task.label_column).equals(before)  # Buy/Sell/Hold's columns as they were
    assert after[task.label_column].is_finite().all()

    policy = Policy.named(settings.folds, "splinegpt", settings.train.seeds[0], task, settings.folds[-1].name)
    trained = finetune(settings, policy, progress=False)
    summary = trained.target_summary
    assert summary["rows"] > 0 and np.isfinite(trained.best_val_loss) and trained.steps > 0

    bsh = wh.predictions_file(policy.on(settings.tasks[0]))
    kept = bsh.read_bytes()
    made = materialize_predictions(settings, policy)
    assert made.path == wh.root / "predictions" / "logvar" / f"{policy.stem}.parquet"
    assert bsh.read_bytes() == kept  # Buy/Sell/Hold's predictions untouched
    frame = made.frame
    assert frame.height > 0 and frame["log_variance"].is_finite().all() and made.calibration is None
    assert wh.predictions_extra("universe", policy).exists()  # the report reads it: the universe too

    (name, table), *_ = task_tables(settings).items()
    universe = pl.read_parquet(wh.predictions_extra("universe", policy)).select(frame.columns)
    scored = pl.concat([frame, universe]).unique(["ticker", "date"])  # the test tickers' and the universe's days
    known = scored.filter(pl.col("label").is_finite())
    assert known.height > frame.filter(pl.col("label").is_finite()).height
    prior = float(task.prior(summary)[0])
    gap = (known["label"] - prior).to_numpy()
    constant = float(np.mean(np.exp(gap) - gap - 1.0))  # the training mean's QLIKE on the same rows
    row = table.row(0, named=True)
    print(
        f"\nlog-variance QLIKE on {row['rows']} test ticker-days: splinegpt {row['qlike']:.4f}, training mean {constant:.4f}"
    )
    assert name == "task_logvar5_qlike" and row["variant"] == "splinegpt" and row["rows"] == known.height
    assert np.isfinite(row["qlike"]) and row["qlike"] >= 0
