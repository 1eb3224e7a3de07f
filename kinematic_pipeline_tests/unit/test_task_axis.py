"""A new task costs its own module: a tiny task defined here alone (no package file edited) is held by a policy, builds
its target, trains through ``FinetuneModule`` with its own loss and validation metric, starts its head at its own
prior, and decides through its own rule into the backtest engine."""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import polars as pl
import pytest
import torch
from torch import nn

from kinematic_pipeline.backtest.engine import run_backtest
from kinematic_pipeline.config import TrainConfig
from kinematic_pipeline.folds import Fold
from kinematic_pipeline.models.heads import init_head_at_prior
from kinematic_pipeline.policy import Foundation, Policy
from kinematic_pipeline.tasks.actions import BUY, HOLD
from kinematic_pipeline.tasks.base import DecisionRule, Task
from kinematic_pipeline.tasks.buy_sell_hold import BuySellHold
from kinematic_pipeline.tasks.registry import TASK_FAMILIES, run_tasks
from kinematic_pipeline.training.modules import FinetuneModule

FOLD = Fold("2019", dt.date(2018, 12, 31), dt.date(2018, 12, 28), dt.date(2019, 1, 2), None)


@dataclass(frozen=True)
class LongWhenUp(DecisionRule):
    """Long while the forecast probability of an up session exceeds a bar, else cash."""

    bar: float = 0.5
    name: ClassVar[str] = "long_when_up"

    def actions(self, predictions: pl.DataFrame, validation: pl.DataFrame | None = None) -> np.ndarray:
        return np.where(predictions["p_up"].to_numpy() > self.bar, BUY, HOLD).astype(np.int8)


@dataclass(frozen=True)
class UpDown(Task):
    """Up (1) or down (0) over the next ``h`` sessions; unknown (-1) where the return is not known yet."""

    h: int = 1
    kind: ClassVar[str] = "updown"
    horizon: ClassVar[int] = 1
    outputs: ClassVar[tuple[str, ...]] = ("p_down", "p_up")
    head_width: ClassVar[int] = 2

    @property
    def key(self) -> str:
        return f"updown{self.h}"

    def target(self, forward: np.ndarray) -> np.ndarray:
        r = np.asarray(forward, dtype=np.float64).sum(axis=1)  # the return over its sessions: NaN if one is unknown
        return np.where(np.isnan(r), -1, (r > 0).astype(np.int8)).astype(np.int8)

    def loss(self, logits, target):
        return nn.functional.cross_entropy(logits, target.long(), ignore_index=-1)

    def val_loss(self, logits, target):
        return self.loss(logits, target) * 2.0  # a metric of its own, so the test can tell it from the loss

    def prior(self, summary) -> np.ndarray:
        counts = np.asarray(list(summary.values()), dtype=np.float64)
        return np.log((counts + 1.0) / (counts.sum() + len(counts)))

    @property
    def rules(self) -> tuple[DecisionRule, ...]:
        return (LongWhenUp(),)


def test_a_task_defined_outside_the_package_runs_through_policy_training_and_decisions():
    task = UpDown()
    policy = Foundation("splinegpt", 7, FOLD).on(task)
    assert policy.task is task and policy.key == "2019@7|updown1" and policy.foundation.task is None
    assert policy != Policy("splinegpt", BuySellHold(0.01), 7, FOLD)  # the task is part of the identity

    returns = np.array([0.01, -0.02, 0.0, np.nan, 0.03])
    np.testing.assert_array_equal(task.target(returns[:, None]), [1, 0, 0, -1, 1])

    torch.manual_seed(0)
    classifier = nn.Sequential(nn.Flatten(), nn.Linear(64 * 9, task.head_width))
    init_head_at_prior(
        classifier[1], task.prior(task.summary(np.array([0] * 30 + [1] * 10)))
    )  # the head starts at the task's own prior
    x, y = torch.randn(8, 64, 9), torch.tensor([1, 0, 1, 1, -1, 0, 1, 1])
    torch.testing.assert_close(classifier(x).softmax(-1)[0], torch.tensor([31 / 42, 11 / 42]))
    module = FinetuneModule(classifier, task, TrainConfig(), total_steps=4)
    loss, logits, _ = module.model_step((x, y))
    torch.testing.assert_close(loss, task.loss(classifier(x), y))  # training calls the task
    assert logits.shape == (8, task.head_width)
    logged = {}
    module.log = lambda name, value, **kw: logged.setdefault(name, value)
    module.validation_step((x, y), 0)
    torch.testing.assert_close(logged["val/loss"], task.val_loss(classifier(x), y))  # and validates by its metric

    close = np.array([10.0, 10.5, 10.2, 10.8, 11.0, 10.9])
    predictions = pl.DataFrame({"close": close, "p_up": [0.7, 0.4, 0.9, 0.6, 0.2, 0.5]})
    (rule,) = task.rules
    decided = rule.decide(predictions)
    np.testing.assert_array_equal(decided["action"].to_numpy(), [BUY, HOLD, BUY, BUY, HOLD, HOLD])
    result = run_backtest(close, decided["action"].to_numpy())
    assert result.equity.shape == close.shape and np.isfinite(result.equity).all()


def test_buy_sell_hold_is_a_task_with_its_three_rules():
    task = BuySellHold(0.01, (2.0, 10.0, 1.0))
    assert (task.key, task.horizon, task.head_width, task.outputs) == ("0.01", 1, 3, ("p_buy", "p_sell", "p_hold"))
    assert [r.name for r in task.rules] == ["paper", "calibrated", "margin"]
    assert task.label_column == "label_tau_0p0100"
    np.testing.assert_array_equal(task.target(np.array([[0.02], [-0.02], [0.01], [np.nan]])), [0, 1, 2, -1])
    np.testing.assert_allclose(np.exp(task.prior([10, 10, 10])), np.array([2.0, 10.0, 1.0]) / 3)  # ln(w * pi)


def test_every_head_kind_is_as_wide_as_its_policys_task(tmp_path):
    from kinematic_pipeline.config import load_settings
    from kinematic_pipeline.models import build_model
    from kinematic_pipeline.training.run import build_classifier

    settings = load_settings("ci", warehouse=tmp_path, env={})
    for variant, channels in (("splinegpt", 9), ("patchtst", 2)):
        policy = Foundation(variant, 7, FOLD).on(UpDown())
        torch.manual_seed(0)
        classifier = build_classifier(
            settings, policy, build_model(variant, settings.model), {"p_down": 30, "p_up": 10}
        )
        widths = {m.out_features for name, m in classifier.named_modules() if name.endswith("cls_head")}
        assert widths == {UpDown.head_width}, (variant, widths)
        x = torch.randn(4, 64, channels)
        assert classifier.eval()(x).shape == (4, UpDown.head_width)


@dataclass(frozen=True)
class UpDownNextWeek(UpDown):
    """``UpDown`` over the next five sessions: a target that reads five sessions after its day."""

    h: int = 5
    horizon: ClassVar[int] = 5


@pytest.fixture
def families(monkeypatch):
    """The two test tasks registered as families of their own (``tokenize.tasks`` may then name them), for one test."""
    monkeypatch.setitem(TASK_FAMILIES, "updown", lambda settings: (UpDown(),))
    monkeypatch.setitem(TASK_FAMILIES, "updown_week", lambda settings: (UpDownNextWeek(),))


def test_a_runs_tasks_are_its_registered_families_and_nothing_else(tmp_path, families):
    from kinematic_pipeline.config import load_settings

    settings = load_settings("ci", warehouse=tmp_path, env={})
    bsh = ["0.0025", "0.005", "0.01", "0.02"]
    assert settings.tokenize.tasks == ("bsh",) and [t.key for t in settings.tasks] == bsh
    both = dataclasses.replace(settings, tokenize=dataclasses.replace(settings.tokenize, tasks=("updown", "bsh")))
    assert [t.key for t in both.tasks] == ["updown1", *bsh]
    with pytest.raises(ValueError, match=r"tokenize.tasks=\('vol5',\): expected one or more of bsh, vol, updown"):
        dataclasses.replace(settings.tokenize, tasks=("vol5",))
    twice = dataclasses.replace(settings, tokenize=dataclasses.replace(settings.tokenize, tasks=("updown", "updown")))
    with pytest.raises(ValueError, match="gives one labels column twice"):
        run_tasks(twice)


def test_the_folds_purge_the_longest_horizon_among_the_runs_tasks(tmp_path):
    from types import SimpleNamespace

    from kinematic_pipeline.calendar import trading_days
    from kinematic_pipeline.config import load_settings
    from kinematic_pipeline.folds import walk_forward

    settings = load_settings("ci", warehouse=tmp_path, env={})
    split = dataclasses.replace(settings.split, folds=1)  # a single cut: no embargo, so the purge alone separates
    for tasks, horizon in (((UpDown(),), 1), ((UpDown(), UpDownNextWeek()), 5)):
        (fold,) = walk_forward(SimpleNamespace(split=split, data=settings.data, tasks=tasks))
        read = trading_days(fold.label_end, fold.test_start)  # the last learnable day, the sessions its target reads
        assert len(read) == horizon + 2 and read[horizon] == fold.train_end, (tasks, fold)
    assert max(t.horizon for t in settings.tasks) == 1  # Buy/Sell/Hold reads the next session's close


def test_the_labels_stage_writes_each_of_the_runs_tasks_targets_and_training_reads_its_own(tmp_path, families):
    from kinematic_pipeline.calendar import trading_days
    from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv
    from kinematic_pipeline.stages.labels import materialize_labels
    from kinematic_pipeline.stages.tokenize import materialize_tokens
    from kinematic_pipeline.tokenizations import SPLINE
    from kinematic_pipeline_tests.conftest import CUT, END, START, _bars, _settings

    settings = _settings(tmp_path, "wh", _bars(2), taus=(0.01,), tasks=("bsh", "updown"))  # one defined here
    days = [d for d in trading_days(START, END) if d <= CUT][-6:]  # the window store's cut: days to train on
    materialize_raw_ohlcv(settings, trading_days(START, END), progress=False)
    materialize_tokens(settings, days, (SPLINE,), progress=False)
    materialize_labels(settings, days[:-1], progress=False)
    labels = pl.read_parquet(settings.warehouse.shard("labels", days[-2]))
    assert labels.columns[-2:] == [BuySellHold(0.01).label_column, "label_updown_updown1"]
    r = labels["r_spline" if settings.tokenize.label_source == "spline" else "r_close"].to_numpy()
    np.testing.assert_array_equal(labels["label_updown_updown1"].to_numpy(), UpDown().target(r[:, None]))
    assert labels.schema["label_updown_updown1"] == pl.Int8 and (labels["label_updown_updown1"] >= 0).all()
    from kinematic_pipeline.stages.window_store import materialize_window_store
    from kinematic_pipeline.training.data import store_labels
    from kinematic_pipeline.window_store import open_store

    materialize_window_store(settings, SPLINE, progress=False)  # training reads the task's own column back
    store = open_store(settings, SPLINE)
    drawn, _ = store_labels(settings, store, UpDown())
    every = pl.concat([pl.read_parquet(settings.warehouse.shard("labels", d)) for d in days[:-1]])
    expected = store.rows.join(every, on=["date", "ticker"], how="left", maintain_order="left")
    np.testing.assert_array_equal(drawn, expected["label_updown_updown1"].fill_null(-1).to_numpy())
    assert (drawn >= 0).sum() == every.height


def test_a_task_that_reads_five_sessions_ahead_gets_its_labels_from_them_and_none_past_the_data(tmp_path, families):
    from kinematic_pipeline.calendar import trading_days
    from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv
    from kinematic_pipeline.stages.labels import materialize_labels
    from kinematic_pipeline.stages.tokenize import materialize_tokens
    from kinematic_pipeline.tokenizations import SPLINE
    from kinematic_pipeline_tests.conftest import CUT, END, START, _bars, _settings

    settings = _settings(tmp_path, "wh", _bars(2), label_source="close", taus=(0.01,), tasks=("bsh", "updown_week"))
    assert settings.label_horizon == 5
    days = [d for d in trading_days(START, END) if d <= CUT][-12:]
    materialize_raw_ohlcv(settings, trading_days(START, days[-1]), progress=False)  # no bar after the last day
    materialize_tokens(settings, days, (SPLINE,), progress=False)
    materialize_labels(settings, days, progress=False)
    bars = pl.read_parquet(settings.data.source_path).filter(pl.col("date") <= days[-1])
    column = UpDownNextWeek().label_column
    for k, day in enumerate(days):
        labels = pl.read_parquet(settings.warehouse.shard("labels", day)).sort("ticker")
        if k + 5 >= len(days):  # the fifth session after it is not in the data yet: unknown
            assert (labels[column] == -1).all(), day
            continue
        ahead = bars.filter(pl.col("date").is_in([day, days[k + 5]])).sort("ticker", "date")
        up = ahead.group_by("ticker", maintain_order=True).agg(pl.col("close").last() > pl.col("close").first())
        assert labels[column].to_list() == up["close"].cast(pl.Int8).to_list(), day
        np.testing.assert_array_equal(  # Buy/Sell/Hold still reads the next session alone
            labels[BuySellHold(0.01).label_column].to_numpy(),
            BuySellHold(0.01).target(labels["r_close"].to_numpy()[:, None]),
        )


def test_a_new_session_completes_the_labels_of_as_many_sessions_before_it_as_the_tasks_read(tmp_path, families):
    from kinematic_pipeline.calendar import trading_days
    from kinematic_pipeline.config import load_settings
    from kinematic_pipeline.nightly import plan_sessions

    settings = load_settings("ci", warehouse=tmp_path, env={})
    week = trading_days(dt.date(2022, 3, 1), dt.date(2022, 3, 14))  # ten sessions
    (plan,) = plan_sessions(settings, week[-2:])  # Buy/Sell/Hold: the session before each new one
    assert plan.sessions == tuple(week[-2:]) and plan.label_sessions == tuple(week[-3:-1])
    weekly = dataclasses.replace(settings.tokenize, tasks=("bsh", "updown_week"))
    (plan,) = plan_sessions(dataclasses.replace(settings, tokenize=weekly), week[-2:])  # the five before each new one
    assert plan.label_sessions == tuple(week[-7:-1])


def test_a_tasks_predictions_are_its_own_outputs_and_its_rule_decides_on_them():
    from kinematic_pipeline.predictors.model import predict_outputs

    task = UpDown()
    policy = Foundation("splinegpt", 7, FOLD).on(task)
    torch.manual_seed(0)
    classifier = nn.Sequential(nn.Flatten(), nn.Linear(64 * 9, task.head_width))
    x = np.random.default_rng(0).normal(size=(5, 64, 9)).astype(np.float32)
    outputs = predict_outputs(classifier, x, 2, task)  # in batches of 2: the task's softmax, 2 wide
    torch.testing.assert_close(torch.from_numpy(outputs), classifier(torch.from_numpy(x)).softmax(-1))
    days = [dt.date(2019, 1, d) for d in (2, 3, 4, 7, 8)]
    frame = pl.DataFrame(
        {"ticker": "AAA", "date": days, "close": [10.0, 10.5, 10.2, 10.8, 11.0], task.label_column: [1, 0, 1, 1, -1]}
    ).cast({task.label_column: pl.Int8})
    stored = task.predictions_frame(frame.reverse(), policy, outputs[::-1])  # sorted by ticker and date
    assert stored.columns == ["variant", "task", "seed", "ticker", "date", "close", "p_down", "p_up", "label"]
    assert stored["task"].unique().to_list() == ["updown1"] and stored["date"].to_list() == days
    np.testing.assert_allclose(stored.select("p_down", "p_up").to_numpy(), outputs, rtol=1e-7)
    (rule,) = task.rules
    actions = rule.decide(stored)["action"].to_numpy()
    np.testing.assert_array_equal(actions, np.where(outputs[:, 1] > 0.5, BUY, HOLD))
