"""Walk-forward folds: the fold calendar (periods, embargo, purge), and no fold's training-derived quantity moves
when anything in its test period or later changes (corpus statistics, probe fit, margin threshold, weights)."""

from __future__ import annotations

import dataclasses
import datetime as dt

import numpy as np
import polars as pl
import pytest
import torch

from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.config import SyntheticConfig, TrainConfig, load_settings
from kinematic_pipeline.folds import evaluation_days, fold_named, store_cut, walk_forward
from kinematic_pipeline.pins import fold_stats
from kinematic_pipeline.policy import Foundation, Policy
from kinematic_pipeline.sources.synthetic import SyntheticSource
from kinematic_pipeline.stages.baselines import materialize_probe
from kinematic_pipeline.stages.corpus import materialize_corpus_stats
from kinematic_pipeline.stages.features import materialize_features, read_features
from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv
from kinematic_pipeline.stages.labels import materialize_labels
from kinematic_pipeline.stages.tokenize import materialize_tokens
from kinematic_pipeline.stages.window_store import materialize_window_store
from kinematic_pipeline.tasks.actions import SOFTMAX_COLUMNS, unweighted_probabilities
from kinematic_pipeline.tasks.buy_sell_hold import BuySellHold, tau_column
from kinematic_pipeline.tasks.rules import choose_margin
from kinematic_pipeline.tokenizations import SPLINE, TOKENIZATIONS
from kinematic_pipeline.windows import N_KNOTS
from kinematic_pipeline_tests.helpers.predictions import baseline_predictions

START, END = dt.date(2020, 6, 1), dt.date(2021, 12, 31)
CUT = dt.date(2021, 6, 30)  # folds: 2021H2 (train <= 2021-03-31) and 2022H1 (train <= 2021-09-30)
TAU = 0.01


def _env(**extra) -> dict[str, str]:
    return {"KP_START_DATE": str(START), "KP_END_DATE": str(END), **extra}


@pytest.mark.parametrize(
    "profile, env, expected",
    [
        ("ci", {}, [("2022H1", "2022-01-03", "2022-06-30"), ("2022H2", "2022-07-01", None)]),
        ("real", {"KP_SOURCE_PATH": "x"}, [(str(y), None, None) for y in (2019, 2020, 2021, 2022)]),
        ("ci", {"KP_TRAIN_END": "2021-06-30"}, [(None, "2021-07-01", None)]),
        ("ci", {"KP_TRAIN_END": "2021-06-30", "KP_FOLDS": "3"}, [("2021H2", None, None), ("2022H1", None, None)]),
    ],
)
def test_the_fold_calendar_embargo_and_purge(profile, env, expected):
    settings = load_settings(profile, env=env)
    folds = walk_forward(settings)
    for fold, (name, start, end) in zip(folds, expected):
        assert fold.name == name
        assert start is None or fold.test_start == dt.date.fromisoformat(start)
        assert end is None or fold.test_end == dt.date.fromisoformat(end)
    assert folds[-1].test_end is None and store_cut(settings) == folds[-1].train_end
    for fold, after in zip(folds, folds[1:]):  # consecutive test periods, expanding training windows
        assert trading_days(fold.test_end + dt.timedelta(1), after.test_start) == [after.test_start]
        assert after.train_end > fold.train_end
    for fold in folds:
        gap = trading_days(fold.train_end, fold.test_start)[1:-1]  # sessions strictly between train and test
        embargo = 0 if len(folds) == 1 else settings.split.embargo_sessions
        assert len(gap) == embargo and (len(folds) == 1 or embargo >= N_KNOTS)  # at least a window's length
        # the purge: the last learnable label's horizon (1 session) ends before the test period starts
        horizon_end = trading_days(fold.label_end, fold.test_start)[max(t.horizon for t in settings.tasks)]
        assert horizon_end < fold.test_start and fold.label_end <= fold.train_end


def test_kp_folds_must_be_a_positive_integer():
    with pytest.raises(ValueError, match="KP_FOLDS='two'"):
        load_settings("ci", env={"KP_FOLDS": "two"})
    with pytest.raises(ValueError, match="fold '2030' is not one of this run's folds"):
        fold_named(load_settings("ci", env={}).folds, "2030")


def _bars() -> pl.DataFrame:
    source = SyntheticSource(SyntheticConfig(n_tickers=6, late_listing_fraction=0.0, zero_volume_prob=0.0), START, END)
    return source.read(START, END).select("ticker", "date", "open", "high", "low", "close", "volume")


def _perturb_from(bars: pl.DataFrame, day: dt.date) -> pl.DataFrame:
    rng = np.random.default_rng(3)
    factor = pl.Series(np.exp(rng.normal(0, 0.05, bars.height)))
    later = pl.col("date") >= day
    return bars.with_columns(
        *[
            pl.when(later).then(pl.col(c) * factor).otherwise(pl.col(c)).alias(c)
            for c in ("open", "high", "low", "close")
        ],
        pl.when(later).then(pl.col("volume") * 3).otherwise(pl.col("volume")).alias("volume"),
    )


def _warehouse(tmp_path, name: str, bars: pl.DataFrame):
    path = tmp_path / f"{name}.parquet"
    bars.write_parquet(path)
    env = _env(KP_TRAIN_END=str(CUT), KP_FOLDS="2")
    settings = load_settings("ci", source="parquet", source_path=str(path), warehouse=tmp_path / name, env=env)
    settings = dataclasses.replace(
        settings,
        split=dataclasses.replace(settings.split, fold_period="half"),
        train=TrainConfig(
            pretrain_steps=4,
            eval_every=2,
            batch_size=32,
            max_windows_per_epoch=128,
            seeds=(7,),
            variants=("splinegpt",),
        ),
    )
    days = trading_days(START, END)
    materialize_raw_ohlcv(settings, days, progress=False)
    materialize_tokens(settings, days, progress=False)
    token_days = [d for d in days if settings.warehouse.shard("spline_tokens", d).exists()]
    materialize_labels(settings, token_days, progress=False)
    for tok in TOKENIZATIONS.values():
        materialize_window_store(settings, tok, progress=False)
    materialize_corpus_stats(settings)
    materialize_features(settings, SPLINE, progress=False)
    return settings


@pytest.mark.slow
def test_a_folds_statistics_thresholds_and_weights_ignore_its_test_period_and_later(tmp_path):
    from kinematic_pipeline.training.data import WindowDataModule
    from kinematic_pipeline.training.run import pretrain

    bars = _bars()
    base = _warehouse(tmp_path, "base", bars)
    first, last = walk_forward(base)
    assert (first.name, last.name) == ("2021H2", "2022H1") and first.test_start <= last.train_end
    moved = _warehouse(tmp_path, "moved", _perturb_from(bars, first.test_start))  # fold 1's test period on
    # the fold's corpus statistics: the same numbers; the last fold's (it trains on the moved days) differ
    for fold, same in ((first, True), (last, False)):
        a, b = (fold_stats(s, SPLINE, fold).drop("shards_digest") for s in (base, moved))
        assert a.equals(b) is same, fold
    # the fold's training rows, labels (the purge included) and validation split
    modules = [WindowDataModule(s, Policy("splinegpt", BuySellHold(TAU), 7, first)) for s in (base, moved)]
    for m in modules:
        m.setup()
        days = m.store.days["date"].to_numpy()[m.store.day_of_row[m._train.rows]]
        assert days.max() <= np.datetime64(first.label_end) and m.val_days[-1] <= first.train_end
    assert np.array_equal(modules[0]._train.rows, modules[1]._train.rows)
    assert np.array_equal(modules[0]._train.labels, modules[1]._train.labels)
    # a probe's fit, its validation predictions and the margin rule's threshold chosen on them
    policy = Policy("lr_spline", BuySellHold(TAU), 0, first)
    fits = [materialize_probe(s, policy).fit for s in (base, moved)]
    drop = ("fit_seconds", "features_sha256")
    assert {k: v for k, v in fits[0].items() if k not in drop} == {k: v for k, v in fits[1].items() if k not in drop}
    margins = []
    for s in (base, moved):
        val = baseline_predictions(s, policy, "validation", None).filter(pl.col("label") >= 0)
        p = val.select("p_buy", "p_sell", "p_hold").to_numpy()  # the stored p: the softmax de-weighted
        np.testing.assert_array_equal(
            p, unweighted_probabilities(val.select(SOFTMAX_COLUMNS).to_numpy(), s.train.class_weights)
        )
        margins.append(choose_margin(p, val["label"].to_numpy()))
    assert margins[0] == margins[1]
    train_rows = read_features(base, "lr_spline", first, ("train", "validation"), (tau_column(TAU),))
    assert train_rows["date"].max() <= first.train_end
    late = train_rows.filter(pl.col("date") > first.label_end)[tau_column(TAU)]
    assert late.is_null().all()  # purged labels
    # the fold's foundation weights: byte-identical tensors
    weights = []
    for s in (base, moved):
        pretrain(s, Foundation("splinegpt", 7, first))
        state = torch.load(s.warehouse.foundation_checkpoint(Foundation("splinegpt", 7, first)), weights_only=False)
        weights.append(state["state_dict"] if "state_dict" in state else state)
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    # the test period itself is the fold's: its predictions read only days inside it
    days = evaluation_days(base, "spline_tokens", first)
    assert days[0] == first.test_start and days[-1] <= first.test_end


@pytest.mark.slow
def test_the_purge_keeps_the_label_that_reads_the_first_test_bar_out_of_a_single_cuts_training(tmp_path):
    """With one cut (no embargo) the last training day's label needs the first test day's close: it changes when
    that bar does, and the fine-tuning rows never hold it."""
    from kinematic_pipeline.training.data import WindowDataModule
    from kinematic_pipeline_tests.conftest import CUT as SINGLE_CUT
    from kinematic_pipeline_tests.conftest import _bars as short_bars
    from kinematic_pipeline_tests.conftest import _run_all, _settings, _training_inputs

    bars = short_bars()
    (fold,) = walk_forward(_settings(tmp_path, "probe", bars))
    assert fold.train_end == SINGLE_CUT and fold.label_end < fold.train_end
    modules, labels = [], []
    for name, frame in (("base", bars), ("moved", _perturb_from(bars, fold.test_start))):
        settings = _settings(tmp_path, name, frame)
        _run_all(settings)
        _training_inputs(settings)
        labels.append(pl.read_parquet(settings.warehouse.shard("labels", fold.train_end))[tau_column(TAU)])
        module = WindowDataModule(settings, Policy("splinegpt", BuySellHold(TAU), 7, settings.folds[0]))
        module.setup()
        modules.append(module)
    assert not labels[0].equals(labels[1])  # the cut day's label reads the first test bar ...
    for split in ("_train", "_val"):  # ... and no fine-tuning row holds it: the same rows, the same labels
        a, b = (getattr(m, split) for m in modules)
        assert np.array_equal(a.rows, b.rows) and np.array_equal(a.labels, b.labels)
    served = modules[0].store.rows["date"].to_numpy()[modules[0]._val.rows]
    assert served.max() <= np.datetime64(fold.label_end)
