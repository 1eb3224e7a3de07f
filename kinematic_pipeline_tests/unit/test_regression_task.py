"""A regression task costs its own module: a log-variance forecast defined in the tests alone (``helpers/tasks.py``,
no package file edited), with a float target unknown as NaN, one output, a QLIKE loss and a prior from its training targets' mean, is written by the
labels stage, served by the training data with no unknown target drawn, starts its head at its prior, trains through
``FinetuneModule``, is pinned with its adapter by its own record, and is predicted by the model predictor into a
frame of its own outputs, purged and left uncalibrated as the task says, and written to a folder and a catalog view of
its own beside Buy/Sell/Hold's."""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl
import pytest
import torch

from kinematic_pipeline_tests.helpers.tasks import LogVariance, register_log_variance


@pytest.fixture
def log_variance(monkeypatch):
    register_log_variance(monkeypatch)


def test_a_regression_task_defined_in_the_tests_is_labelled_served_and_trained_by_the_package_unchanged(
    tmp_path, log_variance
):
    from kinematic_pipeline.calendar import trading_days
    from kinematic_pipeline.model_pins import PIN_FILE, pin_foundation
    from kinematic_pipeline.models import build_model
    from kinematic_pipeline.policy import Foundation
    from kinematic_pipeline.stages.corpus import materialize_corpus_stats
    from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv
    from kinematic_pipeline.stages.labels import materialize_labels
    from kinematic_pipeline.stages.tokenize import materialize_tokens
    from kinematic_pipeline.stages.window_store import materialize_window_store
    from kinematic_pipeline.tokenizations import SPLINE
    from kinematic_pipeline.training.data import WindowDataModule
    from kinematic_pipeline.training.modules import FinetuneModule
    from kinematic_pipeline.training.run import build_classifier
    from kinematic_pipeline_tests.conftest import CUT, END, START, _bars, _settings

    task = LogVariance()
    settings = _settings(tmp_path, "wh", _bars(2), taus=(0.01,), tasks=("bsh", "logvar"))
    assert task in settings.tasks and settings.label_horizon == 5
    days = [d for d in trading_days(START, END) if d <= CUT]
    materialize_raw_ohlcv(settings, trading_days(START, END), progress=False)
    materialize_tokens(settings, days, (SPLINE,), progress=False)
    materialize_labels(settings, days, progress=False)
    materialize_window_store(settings, SPLINE, progress=False)
    materialize_corpus_stats(settings, (SPLINE,))

    labels = pl.concat([pl.read_parquet(settings.warehouse.shard("labels", d)) for d in days])
    assert labels.schema[task.label_column] == pl.Float32
    target = labels[task.label_column].to_numpy()
    assert np.isfinite(target).mean() > 0.9  # known but for the sessions the data does not reach yet

    policy = Foundation("splinegpt", settings.train.seeds[0], settings.folds[0]).on(task)  # one of the run's
    data = WindowDataModule(settings, policy)
    data.setup()
    summary = data.target_summary()
    drawn = data._train.labels
    assert drawn.dtype == np.float32 and np.isfinite(drawn).all() and summary["rows"] == len(drawn) > 0
    x, y = next(iter(data.train_dataloader()))
    assert y.dtype == torch.float32 and torch.isfinite(y).all()

    torch.manual_seed(0)
    classifier = build_classifier(settings, policy, build_model("splinegpt", settings.model), summary)
    (bias,) = [m.bias for name, m in classifier.named_modules() if name.endswith("cls_head") and hasattr(m, "bias")]
    assert bias.shape == (1,) and float(bias.detach()[0]) == pytest.approx(np.log(summary["mean_variance"]), rel=1e-6)
    module = FinetuneModule(classifier, task, settings.train, total_steps=2)
    loss, logits, _ = module.model_step((x, y))
    assert logits.shape == (len(y), 1) and torch.isfinite(loss) and float(loss.detach()) >= 0
    torch.testing.assert_close(loss, task.loss(logits, y))

    adapter = settings.warehouse.adapter_dir(policy)
    assert adapter.name == "task=logvar5" and policy.stem.startswith("splinegpt_logvar5_seed")  # named by the task
    adapter.mkdir(parents=True)
    foundation = tmp_path / "model.pt"
    foundation.write_bytes(b"weights")
    pin_foundation(settings.warehouse, adapter, foundation, "0" * 64, task.record)
    pinned = (adapter / PIN_FILE).read_text()
    assert "class_weights" not in pinned and '"foundation_sha256": "' + "0" * 64 in pinned

    from kinematic_pipeline.predictors.base import calibrated, purge_labels
    from kinematic_pipeline.predictors.model import predict
    from kinematic_pipeline.window_store import validation_days

    fit_days = validation_days(settings, policy.variant.token_asset, policy.fold)
    made = predict(settings, policy, classifier.eval(), fit_days)
    frame = made.frame
    assert frame.columns == ["variant", "task", "seed", "ticker", "date", "close", "log_variance", "label"]
    assert frame.height > 0 and (frame["task"] == task.key).all() and frame.schema["label"] == pl.Float32
    assert frame["log_variance"].is_finite().all()  # the head's own value, not a softmax
    purged = purge_labels(frame, policy)
    late = purged.filter(pl.col("date") > policy.fold.label_end)
    assert late.height > 0 and late["label"].is_nan().all()  # a target that reads past the purge is unknown
    result, validation, universe = calibrated(made, purged, None, purged)
    assert result.calibration is None and result.frame.equals(frame) and universe is None  # no calibration
    shown = made.metadata()
    assert shown["rows"] == frame.height and "mean_log_variance" in str(shown["per_ticker"])

    from kinematic_pipeline.model_pins import MODEL_FILES_SCHEMA
    from kinematic_pipeline.stages.predict import _write

    wh = settings.warehouse
    path = _write(settings, policy, result, validation, None, None, pl.DataFrame(schema=MODEL_FILES_SCHEMA))
    assert path == wh.root / "predictions" / "logvar" / f"{policy.stem}.parquet"
    assert wh.predictions_extra("validation", policy).parent == wh.root / "predictions" / "logvar" / "validation"
    viewed = wh.query(f"SELECT * FROM {task.predictions_view} ORDER BY ticker, date")
    assert task.predictions_view == "predictions_logvar" and viewed.drop("fold").equals(frame)
    assert not any(wh.root.joinpath("predictions").glob("*.parquet"))  # Buy/Sell/Hold's view reads none of it

    from kinematic_pipeline.report import document
    from kinematic_pipeline.stages.report_titles import optional_tables, table_headings
    from kinematic_pipeline.stages.task_evidence import task_tables

    tables = task_tables(settings)  # the task's own evidence, from its policies' predictions
    (name,) = tables
    known = frame.filter(pl.col("label").is_finite())
    gap = (known["label"] - known["log_variance"]).to_numpy()
    assert name == "task_logvar5_qlike" and tables[name]["rows"].to_list() == [known.height]
    assert tables[name]["qlike"][0] == pytest.approx(np.mean(np.exp(gap) - gap - 1.0), rel=1e-9)
    headings = table_headings(settings)
    assert name in optional_tables(settings) and headings[name][0].startswith("QLIKE of each forecaster")
    text = document.render_report("r", {}, tables, {}, "", relative_to=tmp_path, table_headings=headings)
    assert "QLIKE of each forecaster" in text and "splinegpt" in text


def test_qlike_is_least_at_the_true_variance_and_the_prior_at_the_targets_mean():
    rng = np.random.default_rng(0)
    variance = np.exp(rng.normal(-8.0, 0.5, 20_000))
    realized = variance * rng.chisquare(1, variance.size)  # an unbiased, noisy proxy of each day's variance
    target = torch.tensor(np.log(realized))
    task = LogVariance()

    def qlike(shift: float) -> float:
        return float(task.loss(torch.tensor(np.log(variance) + shift)[:, None], target))

    assert qlike(0.0) < min(qlike(-0.2), qlike(0.2))  # QLIKE ranks the true variance first under a noisy proxy
    constant = torch.full((realized.size, 1), float(task.prior(task.summary(np.log(realized)))[0]), dtype=torch.float64)
    best = float(task.loss(constant, target))
    for shift in (-0.05, 0.05):
        assert best < float(task.loss(constant + shift, target))  # the prior is the best constant forecast


def test_the_dag_gives_a_forecast_predictions_for_every_policy_and_backtests_to_none(tmp_path, log_variance):
    import dagster as dg

    from kinematic_pipeline.config import load_settings
    from kinematic_pipeline.definitions import build_definitions
    from kinematic_pipeline.orchestration.plan import normalize_selection, plan_runs
    from kinematic_pipeline.run_keys import policy_keys

    base = load_settings("ci", warehouse=tmp_path, env={})
    settings = dataclasses.replace(base, tokenize=dataclasses.replace(base.tokenize, tasks=("bsh", "logvar")))
    keys = policy_keys(settings, "splinegpt")
    forecasts = [k for k in keys if k.endswith("|logvar5")]
    assert forecasts and len(keys) == len(policy_keys(base, "splinegpt")) + len(forecasts)
    graph = build_definitions(settings).resolve_asset_graph()

    def partitions(asset: str) -> list[str]:
        return graph.get(dg.AssetKey(asset)).partitions_def.get_partition_keys()

    assert partitions("splinegpt_adapter") == partitions("splinegpt_predictions") == keys  # trained and predicted
    assert partitions("splinegpt_backtests") == [k for k in keys if k not in forecasts]  # a forecast decides nothing
    assert partitions("lr_spline_predictions") == policy_keys(base, "lr_spline")  # the task's own choice of variants
    runs = plan_runs(build_definitions(settings), normalize_selection("splinegpt_predictions,splinegpt_backtests"))
    assert [[k.to_user_string() for k in run] for run in runs] == [
        ["splinegpt_predictions"],
        ["splinegpt_backtests", "splinegpt_margin_backtests"],
    ]
    unchanged = plan_runs(build_definitions(base), normalize_selection("splinegpt_predictions,splinegpt_backtests"))
    assert len(unchanged) == 1  # Buy/Sell/Hold alone: one run, as before

    from kinematic_pipeline.stages.report_titles import all_titles

    assert all_titles(settings).keys() - all_titles(base).keys() == {"task_logvar5_qlike"}  # the report's one slot
