"""Training: the date split, uniform epoch samples from the window store, the Lightning modules and the
entry points."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import shutil
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
import torch
import torch.nn.functional as F

from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.config import load_settings
from kinematic_pipeline.folds import split_days
from kinematic_pipeline.models import build_model
from kinematic_pipeline.policy import Foundation, Policy
from kinematic_pipeline.sampling import expected_distinct_days
from kinematic_pipeline.stages.window_store import materialize_window_store
from kinematic_pipeline.tasks.buy_sell_hold import BuySellHold, tau_column
from kinematic_pipeline.tokenizations import FD, RAW, SPLINE
from kinematic_pipeline.training import data as data_mod
from kinematic_pipeline.training.curves import read_curves
from kinematic_pipeline.training.data import WindowDataModule
from kinematic_pipeline.training.modules import FinetuneModule, PretrainModule, adamw_with_cosine
from kinematic_pipeline.training.run import build_classifier, finetune, load_classifier, load_foundation, pretrain
from kinematic_pipeline.warehouse.atomic import file_sha256
from kinematic_pipeline.warehouse.verified import MODEL_MANIFEST
from kinematic_pipeline_tests.conftest import copy_warehouse, single_cut
from kinematic_pipeline_tests.helpers import benchmark

# slow: the module builds the ci history and trains foundations and adapters on it (about a minute of the fast
# lane); the nightly lane runs it, and the DAG lane trains every ci model
pytestmark = pytest.mark.slow

TAU = 0.01
SEED = 1234  # the ci profile's first seed


@pytest.fixture(scope="session")
def ci_warehouse(tmp_path_factory):
    """The full ci history (2021-2022, training through 2021-12-31): bars, tokens, labels, corpus_stats."""
    from kinematic_pipeline.stages.corpus import materialize_corpus_stats
    from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv
    from kinematic_pipeline.stages.labels import materialize_labels
    from kinematic_pipeline.stages.tokenize import materialize_tokens

    settings = single_cut(load_settings("ci", warehouse=tmp_path_factory.mktemp("train") / "warehouse", env={}))
    days = trading_days(settings.data.start_date, settings.data.end_date)
    materialize_raw_ohlcv(settings, days, progress=False)
    materialize_tokens(settings, days, progress=False)
    materialize_labels(settings, days, progress=False)
    for tok in (SPLINE, FD, RAW):
        materialize_window_store(settings, tok, progress=False)
    materialize_corpus_stats(settings)
    return settings


@pytest.fixture(scope="session")
def tiny(ci_warehouse):
    """ci settings with a 256-window epoch and 8-step budgets (validated every 4): an end-to-end run in seconds."""
    train = dataclasses.replace(
        ci_warehouse.train, pretrain_steps=8, finetune_steps=8, eval_every=4, patience=0, max_windows_per_epoch=256
    )
    return dataclasses.replace(ci_warehouse, train=train)


@pytest.fixture(scope="session")
def foundations(tiny):
    return {v: pretrain(tiny, Foundation(v, SEED, tiny.folds[0]), progress=False) for v in ("splinegpt", "patchtst")}


def _windows(loader) -> list:
    return [b if isinstance(b, torch.Tensor) else b[0] for b in loader]


def test_split_by_date_puts_the_last_days_in_validation():
    days = trading_days(dt.date(2021, 1, 4), dt.date(2021, 3, 31))
    train, val = split_days(days, 0.1)
    assert train + val == days and len(val) == math.ceil(0.1 * len(days))
    assert max(train) < min(val)


def test_validation_days_are_the_last_days_of_the_training_period(ci_warehouse):
    dm = WindowDataModule(ci_warehouse, Foundation("splinegpt", SEED, ci_warehouse.folds[0]))
    dm.setup()
    train_days, val_days = dm.train_days, dm.val_days
    assert max(train_days) < min(val_days)
    assert (
        max(val_days)
        == max(ci_warehouse.warehouse.shard_days("spline_tokens", until=ci_warehouse.split.train_end))
        <= ci_warehouse.split.train_end
    )
    assert len(val_days) == math.ceil(ci_warehouse.train.val_fraction * (len(train_days) + len(val_days)))
    used = dm.shards_used(steps=dm.steps_per_epoch(), evaluations=1)
    assert {r["split"] for r in used} == {"train", "val", "store"}
    assert all(r["date"] <= ci_warehouse.split.train_end.isoformat() and len(r["content_hash"]) == 64 for r in used)
    # every window of the store is accounted for; the store's row says how many were served in all
    days = [r for r in used if r["split"] != "store"]
    (store,) = [r for r in used if r["split"] == "store"]
    assert sum(r["windows"] for r in days) == store["windows"] and sum(r["served"] for r in days) == store["served"]


def test_no_shard_after_train_end_is_ever_opened(ci_warehouse, tmp_path):
    wh = tmp_path / "warehouse"
    shutil.copytree(ci_warehouse.warehouse, wh)
    settings = dataclasses.replace(ci_warehouse, warehouse=wh)
    corrupted = 0
    for path in wh.rglob("*.parquet"):  # a day's shard or manifest, flat (<day>.parquet) or in its unit (<day>/)
        day = path.stem if path.stem[:4].isdigit() else path.parent.name
        if day[:4].isdigit() and day > settings.split.train_end.isoformat():
            path.write_bytes(b"not parquet: reading this shard is a look-ahead bug")
            corrupted += 1
    assert corrupted > 0
    shutil.rmtree(wh / "window_store")  # rebuilt from the shards: it must not open a day after the cut
    for tok in (SPLINE, RAW):
        materialize_window_store(settings, tok, progress=False)
    for variant in ("splinegpt", "patchtst"):
        dm = WindowDataModule(settings, Policy(variant, BuySellHold(TAU), SEED, settings.folds[0]))
        dm.setup()
        assert sum(len(b) for b in _windows(dm.train_dataloader())) > 0
        assert sum(len(b) for b in _windows(dm.val_dataloader())) > 0
        assert dm.target_summary()["hold"] > 0


def _module(settings, cap=None, tau=None, seed=None, trace=None):
    train = dataclasses.replace(settings.train, max_windows_per_epoch=cap, shard_trace=trace)
    settings = dataclasses.replace(settings, train=train)
    seed = SEED if seed is None else seed
    fit = Foundation("splinegpt", seed, settings.folds[0])  # no tau: the pretraining windows
    dm = WindowDataModule(settings, fit if tau is None else fit.on(BuySellHold(tau)))
    dm.setup()
    return dm


def _epoch(dm, epoch=0) -> torch.Tensor:
    dm.set_epoch(epoch)
    return torch.cat(_windows(dm.train_dataloader()))


def test_an_epoch_is_deterministic_for_a_seed_and_epoch_and_differs_between_epochs(ci_warehouse):
    dm = _module(ci_warehouse)
    first, again, other_epoch = _epoch(dm, 0), _epoch(dm, 0), _epoch(dm, 1)
    assert torch.equal(first, again)
    assert not torch.equal(first, other_epoch)
    key = lambda x: np.sort(x.double().sum(dim=(1, 2)).numpy())  # noqa: E731  # the same windows, reordered
    np.testing.assert_allclose(key(first), key(other_epoch), rtol=1e-6)  # no cap: every window once per epoch
    assert len(first) == dm.train_windows() == len(dm._train.rows)
    assert first.dtype == torch.float32 and first.shape[1:] == (64, 9)
    other_seed = _module(ci_warehouse, seed=ci_warehouse.train.seeds[1])
    assert not torch.equal(first, _epoch(other_seed, 0))


def test_a_capped_epoch_covers_the_days_a_uniform_sample_covers(ci_warehouse):
    """20 epochs of 128 windows drawn from the ~1,200 training windows of ~170 days: the distinct days each
    epoch serves average the number expected of a uniform sample (within 3%), and every day's share of all
    served windows is its share of the windows (chi-square); the old stream served a few consecutive days."""
    cap = 128
    dm = _module(ci_warehouse, cap=cap)
    day_of_row = dm.store.day_of_row
    n_days = dm.store.days.height
    per_day = np.bincount(day_of_row[dm._train.rows], minlength=n_days)
    expected = expected_distinct_days(per_day[per_day > 0], cap)
    distinct, served = [], np.zeros(n_days)
    for epoch in range(20):
        rows = dm._train.served_rows(epoch)
        assert len(rows) == cap and len(np.unique(rows)) == cap
        distinct.append(len(np.unique(day_of_row[rows])))
        served += np.bincount(day_of_row[rows], minlength=n_days)
    assert abs(np.mean(distinct) / expected - 1) < 0.03, (np.mean(distinct), expected)
    from scipy.stats import chisquare

    used = per_day > 0
    assert chisquare(served[used], per_day[used] / per_day.sum() * served.sum()).pvalue > 0.001


def test_parts_serve_disjoint_equal_shares_of_the_epoch(ci_warehouse, monkeypatch):
    dm = _module(ci_warehouse, cap=500)
    whole = _epoch(dm)
    assert len(whole) == 500
    parts = []
    for worker in range(2):
        monkeypatch.setattr(data_mod, "get_worker_info", lambda w=worker: SimpleNamespace(id=w, num_workers=2))
        parts.append(_epoch(dm))
    assert len(parts[0]) == len(parts[1]) == 250
    windows = lambda x: {w.numpy().tobytes() for w in x}  # noqa: E731
    assert not windows(parts[0]) & windows(parts[1])
    assert windows(parts[0]) | windows(parts[1]) == windows(whole)


def test_the_trace_records_each_day_served_and_no_day_after_the_cut(ci_warehouse, tmp_path):
    dm = _module(ci_warehouse, cap=300, tau=TAU, trace=str(tmp_path / "trace"))
    served = sum(len(y) for _, y in dm.train_dataloader()) + sum(len(y) for _, y in dm.val_dataloader())
    trace = pl.read_csv(
        tmp_path / "trace" / "rank0.tsv",
        separator="\t",
        has_header=False,
        new_columns=["epoch", "split", "rank", "day", "windows"],
        schema_overrides={"day": pl.Date},
    )
    assert trace["windows"].sum() == served and set(trace["split"]) == {"train", "val"}
    assert trace["day"].max() <= ci_warehouse.split.train_end
    day_of_row = dm.store.day_of_row
    days = dm.store.days["date"]
    for split, stream in (("train", dm._train), ("val", dm._val)):
        counts = np.bincount(day_of_row[stream.served_rows(0)], minlength=days.len())
        expected = {days[int(d)]: int(counts[d]) for d in np.flatnonzero(counts)}
        got = trace.filter(pl.col("split") == split)
        assert dict(zip(got["day"].to_list(), got["windows"].to_list())) == expected


def test_labels_are_those_of_the_served_windows_and_unknown_labels_are_never_drawn(ci_warehouse):
    dm = WindowDataModule(ci_warehouse, Policy("splinegpt", BuySellHold(TAU), SEED, ci_warehouse.folds[0]))
    dm.setup()
    got = torch.cat([y for _, y in dm.val_dataloader()]).numpy()
    col = tau_column(TAU)
    wh = ci_warehouse.warehouse
    keys = dm.store.rows[dm._val.served_rows(0)].select("date", "ticker")
    expected = []  # the slow way: each served window's own labels shard, looked up by ticker
    for day, ticker in keys.iter_rows():
        labels = pl.read_parquet(wh.shard("labels", day), columns=["ticker", col])
        expected.append(labels.filter(pl.col("ticker") == ticker)[col].item())
    np.testing.assert_array_equal(got, np.array(expected))
    assert set(np.unique(got)) <= {0, 1, 2}


def test_pretrain_module_loss_equals_the_plain_torch_loss(ci_warehouse):
    torch.manual_seed(0)
    x = torch.randn(8, 64, 9)
    gpt = build_model("splinegpt", ci_warehouse.model).eval()
    module = PretrainModule(gpt, ci_warehouse.train, total_steps=10)
    torch.testing.assert_close(module.model_step(x), F.mse_loss(gpt(x)[:, :-1], x[:, 1:]), rtol=0, atol=0)
    patch = build_model("patchtst", ci_warehouse.model).eval()
    module = PretrainModule(patch, ci_warehouse.train, total_steps=10)
    xp = x[:, :, :2]
    got = module.model_step(xp, torch.Generator().manual_seed(3))
    torch.testing.assert_close(got, patch.pretrain_loss(xp, generator=torch.Generator().manual_seed(3)))


def test_finetune_module_loss_is_the_weighted_cross_entropy(ci_warehouse):
    torch.manual_seed(0)
    policy = Policy("splinegpt", BuySellHold(TAU), SEED, ci_warehouse.folds[0])
    classifier = build_classifier(ci_warehouse, policy, build_model("splinegpt", ci_warehouse.model)).eval()
    module = FinetuneModule(classifier, policy.task, ci_warehouse.train, total_steps=10)
    x, y = torch.randn(16, 64, 9), torch.randint(0, 3, (16,))
    loss, logits, _ = module.model_step((x, y))
    weight = torch.tensor(ci_warehouse.train.class_weights)
    torch.testing.assert_close(loss, F.cross_entropy(classifier(x), y, weight=weight))
    torch.testing.assert_close(logits, classifier(x))


def test_cosine_schedule_decays_to_zero_and_decay_skips_vectors():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    optimizer, schedule = adamw_with_cosine(list(model.named_parameters()), 1e-3, 0.1, total_steps=10)
    decayed = {id(p) for g in optimizer.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    assert decayed == {id(model[0].weight)}
    lrs = []
    for _ in range(10):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    assert lrs[0] == pytest.approx(1e-3) and np.all(np.diff(lrs) < 0)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("variant", ["splinegpt", "patchtst"])
def test_pretrain_writes_a_checkpoint_whose_hash_matches(foundations, tiny, variant):
    result = foundations[variant]
    assert result.checkpoint_path.exists() and file_sha256(result.checkpoint_path) == result.files_sha256["model.pt"]
    assert result.windows_seen == tiny.train.pretrain_steps * tiny.train.batch_size  # two 4-batch epochs of 256
    assert result.train_loss_curve and result.val_loss_curve and result.metrics_csv.exists()
    assert [r["step"] for r in result.curves] == [0, 4, 8] and result.steps == result.budget_steps == 8
    assert all(np.isfinite(v) for _, v in result.train_loss_curve + result.val_loss_curve)
    assert result.params_trainable == result.params_total > 0
    assert all(r["date"] <= tiny.split.train_end.isoformat() for r in result.shards_used)
    saved = torch.load(result.checkpoint_path, weights_only=True)
    reloaded = load_foundation(tiny, result.policy, result.checkpoint_path)
    for name, value in reloaded.state_dict().items():
        assert torch.equal(value, saved["state_dict"][name])
    assert (result.checkpoint_path.parent / "checkpoints" / "last.ckpt").exists()


@pytest.mark.parametrize("variant", ["splinegpt", "patchtst"])
def test_finetune_saves_an_adapter_that_reloads_to_identical_predictions(foundations, tiny, tmp_path, variant):
    foundation = foundations[variant].checkpoint_path
    policy = Policy(variant, BuySellHold(TAU), SEED, tiny.folds[0])
    result = finetune(tiny, policy, tmp_path / "ft", progress=False)
    for name, digest in result.files_sha256.items():
        assert file_sha256(tmp_path / "ft" / name) == digest
    if variant == "splinegpt":
        assert {"adapter/adapter_config.json", "adapter/adapter_model.safetensors"} <= set(result.files_sha256)
        # PEFT writes target_modules in set (hash) order; sorted, the same run gives the same bytes in any process
        targets = json.loads((tmp_path / "ft" / "adapter" / "adapter_config.json").read_text())["target_modules"]
        assert targets == sorted(targets) and len(targets) == 12
    assert 0 < result.params_trainable < result.params_total
    assert sum(result.target_summary.values()) > 0 and result.windows_seen > 0

    # The saved state is the best validation step's: reloaded, its de-weighted log loss on the validation windows
    # (recomputed here the slow way) is the best one on the curve, and Lightning's last checkpoint holds it when
    # the last step was the best.
    in_place = dataclasses.replace(tiny, warehouse=tmp_path / "wh")  # the adapter where the warehouse keeps it
    shutil.copytree(tmp_path / "ft", in_place.warehouse.adapter_dir(policy))
    in_place.warehouse.foundation_dir(policy).mkdir(parents=True)
    shutil.copy(foundation, in_place.warehouse.foundation_checkpoint(policy))
    shutil.copy(foundation.parent / MODEL_MANIFEST, in_place.warehouse.foundation_dir(policy))  # what a load checks
    reloaded = load_classifier(in_place, policy)
    dm = WindowDataModule(tiny, policy)
    dm.setup()
    nll, n = 0.0, 0
    w = torch.tensor(tiny.train.class_weights)
    with torch.no_grad():
        for x, y in dm.val_dataloader():
            q = torch.softmax(reloaded(x), dim=-1)
            p = (q / w) / (q / w).sum(dim=-1, keepdim=True)
            nll -= float(torch.log(p[torch.arange(len(y)), y]).sum())
            n += len(y)
    best = [r for r in result.curves if r["best"]]
    assert len(best) == 1 and best[0]["step"] == result.best_step
    assert nll / n == pytest.approx(result.best_val_loss, rel=1e-5) == min(r["val_loss"] for r in result.curves)
    untrained = build_classifier(tiny, policy, load_foundation(tiny, policy, foundation)).eval()
    x = torch.randn(32, 64, 9 if variant != "patchtst" else 2)
    if result.best_step == result.steps:
        ckpt = torch.load(tmp_path / "ft" / "checkpoints" / "last.ckpt", weights_only=False)
        trained = FinetuneModule(untrained, policy.task, tiny.train, 1)
        trained.load_state_dict(ckpt["state_dict"])
        with torch.no_grad():
            torch.testing.assert_close(reloaded(x), trained.eval()(x), rtol=0, atol=0)
    if result.best_step > 0:
        with torch.no_grad():
            assert not torch.allclose(
                reloaded(x), build_classifier(tiny, policy, load_foundation(tiny, policy, foundation)).eval()(x)
            )
    assert not reloaded.training


def test_warmup_then_cosine_and_the_head_has_its_own_rate():
    model = torch.nn.ModuleDict({"body": torch.nn.Linear(4, 4), "cls_head": torch.nn.Linear(4, 3)})
    optimizer, schedule = adamw_with_cosine(
        list(model.named_parameters()), 1e-3, 0.1, total_steps=20, warmup_steps=4, group_lr={"cls_head": 1e-2}
    )
    rates = {id(p): g["lr"] for g in optimizer.param_groups for p in g["params"]}
    assert rates[id(model["cls_head"].weight)] == rates[id(model["cls_head"].bias)] == pytest.approx(1e-2 / 5)
    assert rates[id(model["body"].weight)] == pytest.approx(1e-3 / 5)
    body = []
    for _ in range(20):
        body.append(
            next(g["lr"] for g in optimizer.param_groups if any(p is model["body"].weight for p in g["params"]))
        )
        optimizer.step()
        schedule.step()
    assert np.all(np.diff(body[:5]) > 0) and body[4] == pytest.approx(1e-3) and np.all(np.diff(body[4:]) < 0)


def test_a_head_at_the_prior_predicts_the_training_base_rates_whatever_its_input(ci_warehouse):
    """Zero weights and bias ln(w * pi): the de-weighted p is pi on every window, so a model that learns nothing
    scores a log-loss skill of exactly 0 against the base rates (a default-initialised head does not)."""
    counts = {"buy": 300, "sell": 120, "hold": 580}
    pi = (np.array([300, 120, 580]) + 1) / 1003
    w = np.asarray(ci_warehouse.train.class_weights)
    x = torch.randn(64, 64, 9)
    for variant in ("splinegpt", "patchtst"):
        torch.manual_seed(0)
        backbone = build_model(variant, ci_warehouse.model)
        policy = Policy(variant, BuySellHold(TAU), SEED, ci_warehouse.folds[0])
        xv = x if variant != "patchtst" else x[:, :, :2]
        with torch.no_grad():
            q = torch.softmax(build_classifier(ci_warehouse, policy, backbone, counts).eval()(xv), -1).double().numpy()
            torch.manual_seed(0)
            fresh = build_model(variant, ci_warehouse.model)  # PEFT wraps a backbone in place: a new one
            q_random = torch.softmax(build_classifier(ci_warehouse, policy, fresh).eval()(xv), -1).numpy()
        p = (q / w) / (q / w).sum(axis=1, keepdims=True)
        np.testing.assert_allclose(p, np.broadcast_to(pi, p.shape), rtol=1e-6)
        p_random = (q_random / w) / (q_random / w).sum(axis=1, keepdims=True)
        assert np.abs(p_random - pi).max() > 0.02


def test_on_labels_without_information_the_saved_adapter_scores_no_worse_than_the_base_rates(
    foundations, tiny, tmp_path, monkeypatch
):
    """Labels drawn at random (rates 0.25 / 0.2 / 0.55) whatever the window: the run starts at the prior, so its
    first validation is the base rates' log loss, and the state it keeps is at least as good on validation."""
    real = data_mod.store_labels

    def noise(settings, store, tau, until=None):  # the same draws on every call
        labels, hashes = real(settings, store, tau, until)
        known = labels >= 0
        labels[known] = np.random.default_rng(0).choice(3, size=int(known.sum()), p=[0.25, 0.2, 0.55])
        return labels, hashes

    monkeypatch.setattr(data_mod, "store_labels", noise)
    policy = Policy("splinegpt", BuySellHold(TAU), SEED, tiny.folds[0])
    settings = dataclasses.replace(tiny, train=dataclasses.replace(tiny.train, finetune_steps=24, patience=0))
    result = finetune(settings, policy, tmp_path / "ft", foundations["splinegpt"].checkpoint_path, progress=False)
    dm = WindowDataModule(settings, policy)
    dm.setup()
    counts = np.array(list(dm.target_summary().values()))
    pi = (counts + 1) / (counts.sum() + 3)
    prior_nll = -np.mean(np.log(pi[dm._val.labels[dm._val.positions(0)]]))
    assert result.curves[0]["step"] == 0
    assert result.curves[0]["val_loss"] == pytest.approx(prior_nll, rel=1e-5)
    assert result.best_val_loss <= result.curves[0]["val_loss"]


def test_split_keeps_at_least_one_training_day():
    days = [dt.date(2021, 1, 4), dt.date(2021, 1, 5)]
    assert split_days(days[:1], 0.1) == (days[:1], [])
    assert split_days(days, 0.9) == (days[:1], days[1:])
    assert split_days(days, 0.0) == (days, [])


def test_the_same_seed_gives_the_same_weights_and_another_seed_other_weights(foundations, tiny, tmp_path):
    first, second = tiny.train.seeds[:2]
    again = pretrain(tiny, Foundation("splinegpt", first, tiny.folds[0]), tmp_path / "again", progress=False)
    other = pretrain(tiny, Foundation("splinegpt", second, tiny.folds[0]), tmp_path / "other", progress=False)
    base = torch.load(foundations["splinegpt"].checkpoint_path, weights_only=True)["state_dict"]
    same = torch.load(again.checkpoint_path, weights_only=True)["state_dict"]
    different = torch.load(other.checkpoint_path, weights_only=True)["state_dict"]
    assert all(torch.equal(base[k], same[k]) for k in base)
    assert not all(torch.equal(base[k], different[k]) for k in base)
    assert again.train_loss_curve == foundations["splinegpt"].train_loss_curve != other.train_loss_curve


def test_the_budget_test_fails_a_deliberately_short_budget(tiny, tmp_path):
    """Issue 54: two seeds of SplineGPT's pretraining at 8 steps against 16, both annealed to 0 (wsd, no patience): the
    short budget's best validation loss drops beyond the seeds' spread at twice it, so the two-sided test fails it."""
    from kinematic_pipeline.training.budget import budget_verdict

    losses = {}
    for factor in (1, 2):
        train = dataclasses.replace(tiny.train, schedule="wsd", pretrain_steps=8 * factor, patience=0)
        settings = dataclasses.replace(tiny, train=train)
        for seed in (SEED, SEED + 1):
            out = tmp_path / f"x{factor}_{seed}"
            result = pretrain(settings, Foundation("splinegpt", seed, tiny.folds[0]), out_dir=out, progress=False)
            curves = read_curves(out)
            assert result.steps == 8 * factor and curves[-1]["lr_fraction"] == 0.0  # annealed to its end
            losses.setdefault(factor, []).append(result.best_val_loss)
    verdict = budget_verdict(losses[1], losses[2])
    print(f"1x {losses[1]}, 2x {losses[2]}: {verdict.reason}")
    assert not verdict.passes and verdict.difference < -verdict.spread
    assert verdict.reason.startswith("fails: twice the budget ends lower")


def test_the_budget_benchmark_reads_the_dags_own_1x_runs_as_the_runs_it_would_train(foundations, tiny, tmp_path):
    """``bench_budget --reuse-warehouse`` (issue 54's table on a ``real`` fold without training its 1x runs again): the
    warehouse's foundation and adapter, read from their curves, are the rows the benchmark's own 1x runs train (the
    same steps, best step, loss and rate left at the stop); a stage the warehouse's model is not (a first fold's
    foundation as a warm start), a model trained under another budget and a model the warehouse does not hold are
    trained instead (None)."""
    bench = benchmark("bench_budget")
    settings = copy_warehouse(tiny, tmp_path / "copy")
    foundation = Foundation("splinegpt", SEED, tiny.folds[0])
    adapter = foundation.on(BuySellHold(TAU))
    finetune(settings, adapter, progress=False)  # into the copy's adapter folder, as the DAG's adapter asset does
    keys = ("budget", "steps", "best_step", "best_val_loss", "lr_fraction")
    for policy, stage in ((foundation, "pretrain"), (adapter, "finetune")):
        kept = bench.from_warehouse(settings, policy, stage)
        trained = bench.run(settings, policy, stage, 1, tmp_path / f"{stage}_1x")
        assert {k: kept[k] for k in keys} == {k: trained[k] for k in keys}, stage
        assert kept["steps"] == 8 and kept["lr_fraction"] == trained["lr_fraction"] == 0.0
    wh = settings.warehouse
    assert kept["source"] == str(wh.adapter_dir(adapter).relative_to(wh.root))
    assert bench.from_warehouse(settings, foundation, "warm_start") is None  # trained from scratch, not continued
    for stage, policy in (("pretrain", foundation), ("finetune", adapter)):  # KP_*_STEPS at twice the budget
        assert bench.from_warehouse(bench.scaled(settings, 2, stage), policy, stage) is None, stage
    assert bench.from_warehouse(settings, Foundation("rawgpt", SEED, tiny.folds[0]), "pretrain") is None


def test_the_budget_benchmark_judges_a_pretraining_budget_by_the_adapters_its_foundations_give(
    foundations, tiny, tmp_path, monkeypatch
):
    """``bench_budget --downstream``: each seed's adapter fine-tuned from its 1x foundation (the warehouse's) and from
    its 2x foundation, which is kept beside the rows; the 2x adapter is pinned to the 2x foundation's very bytes, the
    family judged by the two-sided test over its seeds, and a second invocation trains nothing again."""
    from kinematic_pipeline.run_keys import run_task
    from kinematic_pipeline.training.budget import budget_verdict
    from kinematic_pipeline.warehouse.layout import PIN_FILE

    bench = benchmark("bench_budget")
    settings = copy_warehouse(tiny, tmp_path / "copy")
    fold, seeds = tiny.folds[0], [SEED, SEED + 1]
    pretrain(settings, Foundation("splinegpt", seeds[1], fold), progress=False)  # the second seed's 1x foundation
    args = SimpleNamespace(task=run_task(settings, TAU), tag="", reuse_warehouse=True)
    kept = tmp_path / "runs" / "foundations"

    def judged():
        runs = bench.Runs(tmp_path / "runs")
        return runs, bench.downstream(settings, "splinegpt", fold.name, seeds, runs, tmp_path / "tmp", kept, args)

    runs, rows = judged()
    assert [(r["stage"], r["seed"]) for r in rows] == [("pretrain_downstream", s) for s in seeds]
    verdict = budget_verdict([r["1x"]["best_val_loss"] for r in rows], [r["2x"]["best_val_loss"] for r in rows])
    assert [r["passes"] for r in rows] == [verdict.passes] * 2
    for row in rows:
        doubled = kept / f"splinegpt_pretrain_{fold.name}_{row['seed']}_2x"
        assert read_curves(doubled)[-1]["step"] == 2 * tiny.train.pretrain_steps  # pretrained at twice the budget
        adapter = tmp_path / "tmp" / f"splinegpt_pretrain_{fold.name}_{row['seed']}_2x_adapter"
        pin = json.loads((adapter / PIN_FILE).read_text())
        assert pin["foundation_sha256"] == file_sha256(doubled / "model.pt")
        assert row["2x"]["budget"] == row["1x"]["budget"] == tiny.train.finetune_steps  # both adapters at 1x
    policy = Foundation("splinegpt", SEED, fold).on(BuySellHold(TAU))
    own = bench.run(settings, policy, "finetune", 1, tmp_path / "from_the_warehouse_foundation")
    assert own["best_val_loss"] == rows[0]["1x"]["best_val_loss"]  # the 1x adapter: from the warehouse's foundation

    def trains(*_args, **_kwargs):
        raise AssertionError("a kept run was trained again")

    monkeypatch.setattr(bench, "run", trains)
    runs, again = judged()
    assert runs.reused == 4 and [r["2x"] for r in again] == [r["2x"] for r in rows]


def test_a_pretraining_compiled_by_regions_trains_the_eager_models_weights(tiny, tmp_path, monkeypatch):
    """train.compile "regional": each GPT block compiled in place; the same steps from the same seed end at the eager
    run's weights (to float rounding), saved under the eager model's names, with Inductor's cache in the warehouse."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "restored after the test")  # then unset: the warehouse's is used
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    foundation = Foundation("splinegpt", SEED, tiny.folds[0])
    eager = pretrain(tiny, foundation, out_dir=tmp_path / "eager", progress=False)
    compiled_settings = dataclasses.replace(
        tiny, train=dataclasses.replace(tiny.train, compile="regional", compile_min_steps=8)
    )
    compiled = pretrain(compiled_settings, foundation, out_dir=tmp_path / "compiled", progress=False)
    assert (tiny.warehouse.root / ".inductor").is_dir()  # the run's processes share it
    a, b = (torch.load(r.checkpoint_path, weights_only=False)["state_dict"] for r in (eager, compiled))
    assert list(a) == list(b)
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-5)
    assert compiled.best_val_loss == pytest.approx(eager.best_val_loss, rel=1e-5)
