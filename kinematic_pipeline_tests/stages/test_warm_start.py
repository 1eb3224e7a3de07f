"""Rolling warm starts: a walk-forward fold's foundation continues from the previous fold's, records that parent
(``parent.json``: its path relative to the warehouse and its sha256), is refused once the parent changes, and never
sees a day after its own cut: perturbing the bars after fold k's cut leaves fold k's weights as they were, while
fold k+1's (which trains on those days) move."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import shutil

import dagster as dg
import numpy as np
import polars as pl
import pytest
import torch

from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.config import SyntheticConfig, load_settings
from kinematic_pipeline.folds import walk_forward
from kinematic_pipeline.model_pins import PARENT_FILE, parent_foundation
from kinematic_pipeline.pins import StalePairError
from kinematic_pipeline.policy import Foundation, Policy
from kinematic_pipeline.sources.synthetic import SyntheticSource
from kinematic_pipeline.stages.corpus import materialize_corpus_stats
from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv
from kinematic_pipeline.stages.labels import materialize_labels
from kinematic_pipeline.stages.tokenize import materialize_tokens
from kinematic_pipeline.stages.window_store import materialize_window_store
from kinematic_pipeline.tasks.buy_sell_hold import BuySellHold
from kinematic_pipeline.tokenizations import SPLINE
from kinematic_pipeline.warehouse.atomic import file_sha256
from kinematic_pipeline_tests.conftest import copy_warehouse

START, END = dt.date(2020, 6, 1), dt.date(2021, 12, 31)
CUT = dt.date(2021, 6, 30)  # folds 2021H2 (train <= 2021-03-31) and 2022H1 (train <= 2021-09-30)
SEED = 1234
VARIANT = "splinegpt"


def _bars() -> pl.DataFrame:
    source = SyntheticSource(SyntheticConfig(n_tickers=4, late_listing_fraction=0.0, zero_volume_prob=0.0), START, END)
    return source.read(START, END).select("ticker", "date", "open", "high", "low", "close", "volume")


def _perturb_after(bars: pl.DataFrame, day: dt.date) -> pl.DataFrame:
    rng = np.random.default_rng(11)
    factor = pl.Series(np.exp(rng.normal(0, 0.05, bars.height)))
    later = pl.col("date") > day
    return bars.with_columns(
        *[
            pl.when(later).then(pl.col(c) * factor).otherwise(pl.col(c)).alias(c)
            for c in ("open", "high", "low", "close")
        ],
        pl.when(later).then(pl.col("volume") * 3).otherwise(pl.col("volume")).alias("volume"),
    )


def _warehouse(folder, name: str, bars: pl.DataFrame):
    """The ci profile's two half-year folds on ``bars``, tokenized, with the spline window store and the corpus
    statistics; a tiny pretraining budget (8 steps from scratch, 4 warm-started), one seed, SplineGPT."""
    path = folder / f"{name}.parquet"
    bars.write_parquet(path)
    env = {"KP_START_DATE": str(START), "KP_END_DATE": str(END), "KP_TRAIN_END": str(CUT), "KP_FOLDS": "2"}
    settings = load_settings("ci", source="parquet", source_path=str(path), warehouse=folder / name, env=env)
    train = dataclasses.replace(
        settings.train,
        pretrain_steps=8,
        warm_start_steps=4,
        eval_every=4,
        patience=0,
        batch_size=32,
        max_windows_per_epoch=128,
        max_val_windows=128,
        seeds=(SEED,),
        variants=(VARIANT,),
    )
    settings = dataclasses.replace(
        settings,
        split=dataclasses.replace(settings.split, fold_period="half"),
        tokenize=dataclasses.replace(settings.tokenize, taus=(0.01,)),
        train=train,
    )
    days = trading_days(START, END)
    materialize_raw_ohlcv(settings, days, progress=False)
    materialize_tokens(settings, days, progress=False)
    token_days = [d for d in days if settings.warehouse.shard("spline_tokens", d).exists()]
    materialize_labels(settings, token_days, progress=False)
    materialize_window_store(settings, SPLINE, progress=False)
    materialize_corpus_stats(settings, (SPLINE,))
    return settings


def _train_folds(settings) -> list:
    from kinematic_pipeline.training.run import pretrain

    return [pretrain(settings, Foundation(VARIANT, SEED, f), progress=False) for f in walk_forward(settings)]


def class_weight_vector(result) -> dict[str, torch.Tensor]:
    return torch.load(result.checkpoint_path, weights_only=True)["state_dict"]


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The base warehouse with both folds' foundations (the second warm-started from the first)."""
    settings = _warehouse(tmp_path_factory.mktemp("warm"), "base", _bars())
    return settings, _train_folds(settings)


@pytest.mark.slow
def test_a_fold_after_the_first_continues_from_its_parent_and_pins_it(trained, tmp_path):
    from kinematic_pipeline.training.run import load_foundation, pretrain

    settings, (first, second) = trained
    folds = walk_forward(settings)
    assert [f.name for f in folds] == ["2021H2", "2022H1"]
    assert (
        parent_foundation(settings, first.policy) is None and parent_foundation(settings, second.policy) == first.policy
    )
    # the first fold trained from scratch for pretrain_steps, the second for warm_start_steps from the first's state
    assert (first.budget_steps, second.budget_steps) == (8, 4) and [r["step"] for r in second.curves] == [0, 4]
    assert not (first.out_dir / PARENT_FILE).exists()
    pin = json.loads((second.out_dir / PARENT_FILE).read_text())
    relative = first.checkpoint_path.relative_to(settings.warehouse.root).as_posix()
    assert pin == {"parent": relative, "parent_sha256": file_sha256(first.checkpoint_path)}
    meta = second.metadata(settings)
    assert (
        meta["warm_started"] and meta["parent_foundation"] == relative and meta["parent_sha256"] == pin["parent_sha256"]
    )
    assert not first.metadata(settings)["warm_started"]
    # its initial state is the parent's: step 0's validation loss is not a fresh initialization's
    scratch = dataclasses.replace(settings, train=dataclasses.replace(settings.train, warm_start=False))
    cold = pretrain(scratch, second.policy, tmp_path / "cold", progress=False)
    assert cold.budget_steps == 8 and not (tmp_path / "cold" / PARENT_FILE).exists()
    assert second.curves[0]["val_loss"] != cold.curves[0]["val_loss"]
    assert not _same(class_weight_vector(second), class_weight_vector(cold))
    load_foundation(settings, second.policy)  # the pair holds: it loads


@pytest.mark.slow
def test_no_fold_sees_a_day_after_its_cut_even_warm_started(trained, tmp_path):
    """Bars after fold 1's cut change: fold 1's foundation is the same tensors, fold 2's (trained on those days,
    from fold 1's) is not; bars after fold 2's cut change: neither moves."""
    settings, base = trained
    first, second = walk_forward(settings)
    for day, moves in ((first.train_end, [False, True]), (second.train_end, [False, False])):
        moved = _train_folds(_warehouse(tmp_path, f"after{day}", _perturb_after(_bars(), day)))
        assert [not _same(class_weight_vector(a), class_weight_vector(b)) for a, b in zip(base, moved)] == moves, day
        served = [(f, r) for f, m in zip((first, second), moved) for r in m.shards_used if r["split"] != "store"]
        assert served and all(r["date"] <= f.train_end.isoformat() for f, r in served)


@pytest.mark.slow
def test_a_warm_started_foundation_is_refused_once_its_parent_changes(trained, tmp_path):
    from kinematic_pipeline.training.run import finetune, load_foundation, pretrain

    settings = copy_warehouse(trained[0], tmp_path / "copy")
    first, second = (Foundation(VARIANT, SEED, f) for f in walk_forward(settings))
    child, parent = settings.warehouse.foundation_checkpoint(second), settings.warehouse.foundation_checkpoint(first)
    load_foundation(settings, second)  # the copy holds its pins (recorded relative to the warehouse root)
    pinned = file_sha256(parent)

    # the parent retrained (another budget: other bytes, its own valid files.json)
    longer = dataclasses.replace(settings, train=dataclasses.replace(settings.train, pretrain_steps=12))
    pretrain(longer, first, progress=False)
    now = file_sha256(parent)
    assert now != pinned
    fix = f"re-materialize {VARIANT}_foundation partition {second.fit_key}"
    for load in (
        lambda: load_foundation(settings, second),
        lambda: finetune(
            settings,
            Policy(VARIANT, BuySellHold(0.01), SEED, second.fold),
            tmp_path / "adapter",
            progress=False,
        ),
    ):
        with pytest.raises(StalePairError) as refused:
            load()
        message = str(refused.value)
        assert str(child) in message and str(parent) in message and fix in message
        assert pinned[:16] in message and now[:16] in message
    # the fix: re-materialize the child partition; it pins the new parent and loads
    pretrain(settings, second, progress=False)
    load_foundation(settings, second)
    assert json.loads((child.parent / PARENT_FILE).read_text())["parent_sha256"] == now

    # a record that disagrees with the settings is refused too: warm starts turned off, or a parent gone
    off = dataclasses.replace(settings, train=dataclasses.replace(settings.train, warm_start=False))
    with pytest.raises(StalePairError, match=f"from scratch .*{fix}"):
        load_foundation(off, second)
    shutil.rmtree(parent.parent)
    with pytest.raises(StalePairError, match=f"missing now: re-materialize {VARIANT}_foundation partition "):
        load_foundation(settings, second)
    with pytest.raises(FileNotFoundError, match=f"materialize {VARIANT}_foundation partition {first.fit_key} first"):
        pretrain(settings, second, progress=False)


def test_each_fold_continues_from_the_previous_one_and_materialize_runs_the_parents_first(tmp_path):
    from kinematic_pipeline.definitions import build_definitions
    from kinematic_pipeline.orchestration.partitions import fit_partitions, warm_start_parents
    from kinematic_pipeline.orchestration.plan import plan_runs

    settings = load_settings("ci", warehouse=tmp_path / "wh", env={})
    assert settings.train.warm_start and settings.train.warm_start_steps is None  # on by default, the same budget
    parents = warm_start_parents(settings, VARIANT)
    assert parents == {"2022H2@1234": "2022H1@1234", "2022H2@1235": "2022H1@1235"}
    keys = fit_partitions(settings, VARIANT).get_partition_keys()  # the order `materialize` runs them in
    assert all(keys.index(parent) < keys.index(child) for child, parent in parents.items())
    # the whole DAG: every foundation in one run per fit partition, before the adapters that read them
    defs = build_definitions(settings)
    runs = [[k.to_user_string() for k in run] for run in plan_runs(defs, None)]
    (foundations,) = [run for run in runs if f"{VARIANT}_foundation" in run]
    (adapters,) = [run for run in runs if f"{VARIANT}_adapter" in run]
    assert runs.index(foundations) < runs.index(adapters)
    assert all(name.endswith("_foundation") for name in foundations)
    description = defs.resolve_asset_graph().get(dg.AssetKey(f"{VARIANT}_foundation")).description
    assert "2022H2@1234 <- 2022H1@1234" in description
    # a single cut, or warm starts turned off: every foundation from scratch
    assert warm_start_parents(load_settings("ci", env={"KP_WARM_START": "0"}), VARIANT) == {}
    assert warm_start_parents(load_settings("ci", env={"KP_TRAIN_END": "2021-12-31"}), VARIANT) == {}


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"KP_WARM_START": "0"}, (False, None)),
        ({"KP_WARM_START": "1", "KP_WARM_START_STEPS": "50"}, (True, 50)),
        ({"KP_WARM_START": "yes"}, "KP_WARM_START='yes': expected 1"),
        ({"KP_WARM_START_STEPS": "0"}, "KP_WARM_START_STEPS='0': expected a positive number"),
    ],
)
def test_warm_starts_are_settings_of_the_environment(env, expected):
    if isinstance(expected, str):
        with pytest.raises(ValueError, match=expected):
            load_settings("ci", env=env)
        return
    train = load_settings("ci", env=env).train
    assert (train.warm_start, train.warm_start_steps) == expected


def test_the_warm_start_budget(tmp_path):
    from kinematic_pipeline.training.run import pretrain_budget

    settings = load_settings("ci", warehouse=tmp_path, env={"KP_WARM_START_STEPS": "60"})
    first, second = (Foundation(VARIANT, SEED, f) for f in settings.folds)
    assert (pretrain_budget(settings, first), pretrain_budget(settings, second)) == (300, 60)
    same = load_settings("ci", warehouse=tmp_path, env={})
    assert pretrain_budget(same, second) == same.train.pretrain_steps == 300


def test_a_variant_of_its_own_budget_trains_at_it_and_warm_starts_as_the_others(tmp_path):
    """``train.steps_of`` (the demo's PatchTST: its masked patches need more steps than the GPTs' next token):
    that variant's first fold pretrains at its own budget, every other at ``pretrain_steps``; a warm start keeps
    ``warm_start_steps``; its fine-tuning budget is its own too; the budget benchmark doubles the stage it tests and
    the scaling curves' cap starts from the variant's; a bad entry names the field."""
    from kinematic_pipeline.stages.scaling import scaling_budget
    from kinematic_pipeline.training.run import pretrain_budget
    from kinematic_pipeline.variants import variant
    from kinematic_pipeline_tests.helpers import benchmark

    settings = load_settings("ci", warehouse=tmp_path, env={"KP_WARM_START_STEPS": "60"})
    own = (("patchtst", "pretrain", 900), ("patchtst", "finetune", 250))
    settings = dataclasses.replace(settings, train=dataclasses.replace(settings.train, steps_of=own))
    patch = [Foundation(variant("patchtst"), SEED, f) for f in settings.folds]
    other = Foundation(VARIANT, SEED, settings.folds[0])
    assert [pretrain_budget(settings, f) for f in (*patch, other)] == [900, 60, 300]
    train = settings.train
    assert (train.steps_for("patchtst", "finetune"), train.steps_for(VARIANT, "finetune")) == (250, 200)
    doubled = benchmark("bench_budget").scaled(settings, 2, "pretrain")
    assert (pretrain_budget(doubled, patch[0]), pretrain_budget(doubled, other)) == (1800, 600)
    assert doubled.train.steps_for("patchtst", "finetune") == 250  # only the stage tested is doubled
    tuned = benchmark("bench_budget").scaled(settings, 2, "finetune").train
    assert (tuned.steps_for("patchtst", "finetune"), tuned.steps_for(VARIANT, "finetune")) == (500, 400)
    capped = scaling_budget(train, 64, variant="patchtst")
    assert capped.steps_for("patchtst", "finetune") == capped.finetune_steps == 250
    assert scaling_budget(train, 64, variant=VARIANT).steps_for("patchtst", "finetune") == 200  # one cap for all n
    demo = load_settings("demo", env={}).train
    assert (demo.steps_for("patchtst", "pretrain"), demo.steps_for("splinegpt", "pretrain")) == (2400, 600)
    bad_entries = (
        (("patchtst", "pretrain", 0), "patchtst pretrain 0: expected a positive"),
        (("lstm", "pretrain", 9), "'lstm'"),
        (("patchtst", "warm", 9), "'warm'"),
    )
    for bad, message in bad_entries:
        with pytest.raises(ValueError, match=f"train.steps_of.*{message}"):
            dataclasses.replace(train, steps_of=(bad,))


@pytest.mark.slow
def test_a_warm_start_continues_its_parents_adamw_state_at_a_fifth_of_the_rate(trained, tmp_path):
    """Issue 54 (science-6 L-G): fold k's first optimizer step runs at ``train.warm_start_rate`` of the peak, not a
    fresh warmup to it, from the moments and step counts its parent's AdamW reached at the parent's kept step."""
    from kinematic_pipeline.models import build_model
    from kinematic_pipeline.training.modules import PretrainModule

    base, _ = trained
    settings = copy_warehouse(base, tmp_path)
    train = dataclasses.replace(settings.train, warm_start_rate=0.2, schedule="wsd", warm_start_steps=8)
    settings = dataclasses.replace(settings, train=train)
    first, second = _train_folds(settings)
    parent = torch.load(first.checkpoint_path, weights_only=True)
    assert set(parent) == {"variant", "model_config", "state_dict", "optimizer"}
    moments = parent["optimizer"]["state"]
    assert moments and all(float(s["step"]) == first.best_step for s in moments.values())  # at its kept step
    # the child's module, as pretrain builds it: its optimizer continues the parent's, at 0.2 of the rate, no warmup
    child = PretrainModule(build_model(VARIANT, settings.model), settings.train, 8, SEED, parent["optimizer"])
    optimizer = child.configure_optimizers()["optimizer"]
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([0.2 * settings.train.lr] * 2)
    (index, state), *_ = optimizer.state_dict()["state"].items()
    assert torch.equal(state["exp_avg"], moments[index]["exp_avg"]) and float(state["step"]) == first.best_step
    curves = second.curves
    assert curves[1]["lr_fraction"] <= 0.2 and curves[-1]["lr_fraction"] == 0.0  # from a fifth down to 0
    # without the setting (the ci profile's): a fresh optimizer warmed up to the peak, nothing continued
    fresh = PretrainModule(build_model(VARIANT, base.model), base.train, 8, SEED, parent["optimizer"])
    optimizer = fresh.configure_optimizers()["optimizer"]
    assert not optimizer.state_dict()["state"] and fresh.lr_schedule.peak == 1.0
    assert optimizer.param_groups[0]["lr"] == pytest.approx(base.train.lr * fresh.lr_schedule(0))
