"""The data-scaling curves (issues 28 and 39): one row per (variant, learner, n), and the largest n at twice the step
cap; each transformer learns from exactly n distinct windows under one step cap; the matched logistic regression at the largest n equals a direct fit of the same seeded sample, scored by
hand (a slow twin); the asset stays out of the whole-DAG materialize unless told; the report shows the section only
when the table exists.

The warehouse is built here (six synthetic tickers, 2021-01 .. 2021-07, cut 2021-06-15: tokens, labels, window
stores, corpus statistics, features and two small foundations), not read from a materialized ci warehouse.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import polars as pl
import pytest
from scipy.stats import spearmanr

from kinematic_pipeline.backtest.calibration import fit_calibration
from kinematic_pipeline.config import TrainConfig
from kinematic_pipeline.folds import walk_forward
from kinematic_pipeline.policy import Foundation
from kinematic_pipeline.sampling import distinct_served
from kinematic_pipeline.stages.features import materialize_features
from kinematic_pipeline.stages.scaling import (
    LR_ALL,
    LR_MATCHED,
    SCALING_SCHEMA,
    TRANSFORMER,
    TRANSFORMER_LONG,
    VOL_REFERENCE,
    materialize_scaling_curves,
    scaling_budget,
    scaling_policy,
    scratch_dir,
)
from kinematic_pipeline.stages.scaling_scores import BEYOND_VOL20
from kinematic_pipeline.tasks.buy_sell_hold import tau_column
from kinematic_pipeline.tokenizations import FD, SPLINE
from kinematic_pipeline.training.curves import budget_steps
from kinematic_pipeline.training.data import distinct_sample
from kinematic_pipeline.variants import variant as lookup_variant
from kinematic_pipeline.window_store import validation_days
from kinematic_pipeline_tests.conftest import _bars, _run_all, _settings, _training_inputs
from kinematic_pipeline_tests.helpers import benchmark

# slow: the module fine-tunes both transformers at several n and fits the probes (about a minute of the fast lane);
# the nightly lane runs it
pytestmark = pytest.mark.slow

VARIANTS = ("splinegpt", "rawgpt_fd")
SIZES = (64, 192)  # the fold has ~240 labelled training rows, so 192 is a sample


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A six-ticker warehouse (daily rank ICs need five names a day) with the two foundations, and the curves."""
    from kinematic_pipeline.training.run import pretrain

    settings = _settings(tmp_path_factory.mktemp("scaling"), "w", _bars(6))
    settings = dataclasses.replace(
        settings,
        train=dataclasses.replace(
            settings.train, variants=VARIANTS, pretrain_steps=20, finetune_steps=20, eval_every=10
        ),
        evaluate=dataclasses.replace(settings.evaluate, scaling_windows=SIZES, skill_bootstrap_resamples=50),
    )
    _run_all(settings)
    _training_inputs(settings)
    for tok in (SPLINE, FD):
        materialize_features(settings, tok, progress=False)
    for variant in VARIANTS:
        pretrain(settings, Foundation(variant, settings.train.seeds[0], settings.folds[0]), progress=False)
    return settings, materialize_scaling_curves(settings)


def test_one_row_per_variant_learner_and_n_and_the_budgets_serve_n_windows(built):
    settings, summary = built
    frame = summary.frame
    assert frame.schema == pl.Schema(SCALING_SCHEMA)
    every_row = {
        v: frame.filter((pl.col("variant") == v) & (pl.col("learner") == LR_ALL))["n_windows"] for v in VARIANTS
    }
    expected = {(v, learner, n) for v in VARIANTS for learner in (TRANSFORMER, LR_MATCHED) for n in SIZES}
    expected |= {(v, TRANSFORMER_LONG, SIZES[-1]) for v in VARIANTS}  # the largest n at twice the step cap
    expected |= {(v, LR_ALL, int(every_row[v].item())) for v in VARIANTS}
    expected |= {(v, VOL_REFERENCE, None) for v in VARIANTS}  # the trailing-volatility reference: nothing fitted
    keys = list(frame.select("variant", "learner", "n_windows").iter_rows())
    assert len(keys) == len(set(keys)) and set(keys) == expected
    assert set(frame.filter(pl.col("learner").is_in([LR_MATCHED, LR_ALL]))["model"]) == {"lr_spline", "lr_fd"}
    reference = frame.filter(pl.col("learner") == VOL_REFERENCE)
    assert set(reference["model"]) == {"trailing_vol20"} and reference["rank_ic"].is_nan().all()  # a score of 0
    cap, batch = settings.train.finetune_steps, settings.train.batch_size
    models = frame.filter(pl.col("learner").is_in([TRANSFORMER, TRANSFORMER_LONG]))
    for row in models.iter_rows(named=True):
        long = row["learner"] == TRANSFORMER_LONG
        budget = scaling_budget(settings.train, row["n_windows"], long).finetune_steps
        assert budget == max(cap, -(-row["n_windows"] // batch)) * (2 if long else 1)  # the cap, or one pass over n
        assert row["steps"] <= budget_steps(settings.train, budget)
        assert row["train_rows"] == row["n_windows"]  # exactly n distinct windows (the fold holds more)
        assert 0 <= row["best_step"] <= row["steps"]
        assert row["windows_seen"] <= row["best_step"] * batch  # served up to the kept state, not after it
        assert row["distinct_windows"] <= min(row["windows_seen"], row["train_rows"])  # the figure's x
        window_cap = settings.train.finetune_max_windows_per_epoch or settings.train.max_windows_per_epoch
        seed = settings.train.seeds[0]
        assert row["distinct_windows"] == distinct_served(row["train_rows"], window_cap, seed, row["windows_seen"])
        folder = scratch_dir(settings, row["variant"], row["n_windows"])
        assert (folder / "2x_steps" if long else folder).joinpath("curves.csv").exists()
        assert not settings.warehouse.adapter_dir(scaling_policy(settings, row["variant"])).exists()  # never over
    probes = frame.filter(pl.col("learner") == LR_MATCHED)
    assert (
        probes["windows_seen"].to_numpy() == np.minimum(probes["n_windows"].to_numpy(), probes["train_rows"].to_numpy())
    ).all()
    assert (frame.filter(pl.col("learner").is_in([LR_MATCHED, LR_ALL]))["rank_ic"].is_finite()).all()
    assert (frame["logloss_skill_ci_low"] <= frame["logloss_skill"]).all()
    assert (frame["logloss_skill"] <= frame["logloss_skill_ci_high"]).all()
    assert frame["test_rows"].n_unique() == 1 and frame["test_rows"][0] > 100  # every learner on the same rows
    assert (reference["logloss_skill"].is_finite()).all()
    # each learner's skill beyond the reference, paired on its own rows (here every one of them has a vol20), is its
    # skill minus the reference row's (on the same rows); the reference has none beyond itself
    assert reference[BEYOND_VOL20].is_null().all() and reference["beyond_vol20_rows"].is_null().all()
    assert (frame["ci_block_days"] == settings.evaluate.skill_bootstrap_block_days).all()
    for row in frame.filter(pl.col("learner") != VOL_REFERENCE).iter_rows(named=True):
        own = reference.filter(pl.col("variant") == row["variant"]).row(0, named=True)
        assert row["beyond_vol20_rows"] == row["test_rows"] == own["test_rows"]
        expected = row["logloss_skill"] - own["logloss_skill"]
        assert row[BEYOND_VOL20] == pytest.approx(expected, rel=1e-6, abs=1e-9)
        assert row[f"{BEYOND_VOL20}_ci_low"] <= row[BEYOND_VOL20] <= row[f"{BEYOND_VOL20}_ci_high"]
    assert pl.read_parquet(summary.table_path).equals(frame)
    assert summary.figure_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    meta = summary.metadata()
    assert meta["rows"] == frame.height and "| variant |" in meta["table"] and "data:image/png" in meta["plot"]


def _close_class(r: float | None, tau: float) -> int:
    if r is None or not math.isfinite(r):
        return -1
    return 0 if r > tau else (1 if r < -tau else 2)


def test_the_matched_probe_at_the_largest_n_equals_a_direct_fit_of_the_same_rows(built):
    """The slow twin: the same seeded sample of training rows, a logistic regression fitted here, calibrated on the
    validation rows, and the rank IC and skill computed day by day from the labels shards."""
    from sklearn.linear_model import LogisticRegression

    settings, summary = built
    n, tau, seed = max(SIZES), settings.evaluate.report_tau, settings.train.seeds[0]
    weights = np.asarray(settings.train.class_weights)
    fold = walk_forward(settings)[0]
    wh = settings.warehouse
    for variant, probe in (("splinegpt", "lr_spline"), ("rawgpt_fd", "lr_fd")):
        spec = lookup_variant(probe)
        columns, label = list(spec.feature_columns), tau_column(tau)
        training = pl.read_parquet(wh.features_file(spec.feature_set, "training")).filter(
            pl.col("date") <= fold.label_end
        )
        validation_set = set(validation_days(settings, spec.token_asset, fold))
        labelled = training.filter(pl.col(label).is_not_null() & (pl.col(label) >= 0))
        train = labelled.filter(~pl.col("date").is_in(validation_set))
        assert train.height > n  # a sample, not every row
        train = train.sample(n=n, seed=seed).sort("ticker", "date")
        x = train.select(columns).to_numpy().astype(np.float64)
        mean, std = np.nanmean(x, axis=0), np.nanstd(x, axis=0)
        std = np.where(std > 0, std, 1.0)

        def z(frame: pl.DataFrame, columns=columns, mean=mean, std=std) -> np.ndarray:
            v = (frame.select(columns).to_numpy().astype(np.float64) - mean) / std
            return np.clip(np.nan_to_num(v, nan=0.0, posinf=10.0, neginf=-10.0), -10.0, 10.0)

        model = LogisticRegression(
            C=1.0, max_iter=settings.evaluate.probe_lr_max_iter, class_weight=dict(enumerate(weights))
        ).fit(z(train), train[label].to_numpy())
        assert list(model.classes_) == [0, 1, 2]

        def q(frame: pl.DataFrame, model=model) -> np.ndarray:  # stored as float32, as the predictions are
            return model.predict_proba(z(frame)).astype(np.float32).astype(np.float64)

        # the calibration: fitted on every ticker's labelled validation rows (unpurged: the fold's own split)
        all_rows = pl.read_parquet(wh.features_file(spec.feature_set, "training")).filter(
            pl.col("date") <= fold.train_end
        )
        val = all_rows.filter(pl.col("date").is_in(validation_set)).sort("ticker", "date")
        val_labels = val[label].fill_null(-1).to_numpy()
        val_labels = np.where(val["date"].to_numpy() > np.datetime64(fold.label_end), -1, val_labels)
        calibration = fit_calibration(q(val), val_labels, weights)
        test = pl.read_parquet(wh.features_file(spec.feature_set, "test")).filter(pl.col("date") >= fold.test_start)
        test = test.sort("ticker", "date")
        qc = calibration.apply(q(test)).astype(np.float64)
        p = (qc / weights) / (qc / weights).sum(axis=1, keepdims=True)
        labels = pl.concat([pl.read_parquet(wh.shard("labels", d)) for d in wh.shard_days("labels")])
        r_close = dict(zip(labels.select("ticker", "date").iter_rows(), labels["r_close"].to_list()))
        r = np.array([r_close.get(key, None) for key in test.select("ticker", "date").iter_rows()], dtype=np.float64)
        # rank IC, day by day
        score, days = p[:, 0] - p[:, 1], test["date"].to_numpy()
        ics = []
        for day in np.unique(days):
            on = (days == day) & np.isfinite(r)
            if on.sum() >= 5 and np.ptp(score[on]) > 0 and np.ptp(r[on]) > 0:
                ics.append(spearmanr(score[on], r[on]).statistic)
        # log-loss skill on close-to-close labels against the fold's training base rates of the same labels
        seen = labels.filter(pl.col("date") <= fold.label_end)["r_close"].to_list()
        counts = np.bincount([c for c in (_close_class(v, tau) for v in seen) if c >= 0], minlength=3)
        rates = counts / counts.sum()
        y = np.array([_close_class(v, tau) for v in r])
        known = y >= 0
        loss = -np.log(np.clip(p[known, y[known]], 1e-15, 1)).mean()
        reference = -np.log(rates[y[known]]).mean()

        row = summary.frame.filter(
            (pl.col("variant") == variant) & (pl.col("learner") == LR_MATCHED) & (pl.col("n_windows") == n)
        ).row(0, named=True)
        assert row["train_rows"] == row["windows_seen"] == n and row["steps"] == int(np.max(model.n_iter_))
        assert row["test_rows"] == int(known.sum())
        assert row["rank_ic"] == pytest.approx(np.mean(ics), rel=1e-9, abs=1e-12)
        assert row["logloss_skill"] == pytest.approx(1 - loss / reference, rel=1e-9, abs=1e-12)


def test_a_scaling_budget_fixes_n_distinct_windows_under_the_profiles_step_cap():
    cfg = TrainConfig(batch_size=64, eval_every=25, patience=3, finetune_steps=150)
    for n in (256, 4096):
        scaled = scaling_budget(cfg, n)
        assert (scaled.finetune_windows, scaled.finetune_steps, scaled.patience) == (n, 150, 3)
    assert scaling_budget(cfg, 4096, long=True).finetune_steps == 300
    # science-6 L-A: 65,536 windows at the cap of 150 steps of 64 would be served 9,600 windows: one pass at least
    assert scaling_budget(cfg, 65536).finetune_steps == 1024
    assert scaling_budget(cfg, 65536, long=True).finetune_steps == 2048


def test_the_distinct_sample_is_n_rows_of_the_split_fixed_by_seed_and_n():
    rows = np.arange(1000, 3000, 2)
    a, b = distinct_sample(rows, 100, 1234), distinct_sample(rows, 100, 1234)
    assert np.array_equal(a, b) and len(np.unique(a)) == 100 and np.isin(a, rows).all() and (np.diff(a) > 0).all()
    assert not np.array_equal(a, distinct_sample(rows, 100, 1235))
    assert np.array_equal(distinct_sample(rows, 5000, 1234), rows)  # no more rows than n: every one


def test_the_whole_dag_leaves_the_scaling_curves_out_unless_told(ci_settings):
    import dagster as dg

    from kinematic_pipeline.definitions import build_definitions
    from kinematic_pipeline.orchestration.assets_scaling import off_dag_groups
    from kinematic_pipeline.orchestration.plan import normalize_selection, plan_runs

    def planned(settings, selection=None) -> list[str]:
        defs = build_definitions(settings)
        text = normalize_selection(selection) if selection else None
        return [k.to_user_string() for run in plan_runs(defs, text, selection, off_dag_groups(settings)) for k in run]

    everything = planned(ci_settings)
    assert "report" in everything and "scaling_curves" not in everything
    assert planned(ci_settings, "scaling_curves") == ["scaling_curves"]
    on = dataclasses.replace(ci_settings, evaluate=dataclasses.replace(ci_settings.evaluate, scaling_in_dag=True))
    everything = planned(on)
    assert everything.index("scaling_curves") < everything.index("report")  # the report waits for its section
    graph = build_definitions(on).resolve_asset_graph()
    node = graph.get(dg.AssetKey("scaling_curves"))
    assert node.group_name == "scaling"
    parents = {k.to_user_string() for k in node.parent_keys}
    assert {"splinegpt_foundation", "rawgpt_fd_foundation", "spline_features", "fd_features", "labels"} <= parents


def test_the_report_shows_the_section_only_when_the_table_exists(tmp_path, monkeypatch):
    from kinematic_pipeline.config import load_settings
    from kinematic_pipeline.pins import evaluation_digest, pin_evaluation
    from kinematic_pipeline.run_keys import run_keys_digest
    from kinematic_pipeline.stages import report
    from kinematic_pipeline.stages.report import CONTEXT_FILE, materialize_report
    from kinematic_pipeline.stages.report_titles import ALL_TITLES, OPTIONAL_TABLES, all_titles
    from kinematic_pipeline.warehouse.layout import TABLES_PIN_FILE

    settings = load_settings("ci", warehouse=tmp_path / "wh", env={})
    wh = settings.warehouse
    tables = wh.report_tables_dir
    tables.mkdir(parents=True)
    for name in ALL_TITLES:
        if name not in OPTIONAL_TABLES:
            pl.DataFrame({"x": [1]}).write_parquet(tables / f"{name}.parquet")
    (tables / CONTEXT_FILE).write_text(json.dumps({"profile": "ci"}))
    pin_evaluation(wh, tables / TABLES_PIN_FILE, evaluation_digest(wh), run_keys_digest(settings))  # paper_tables'
    monkeypatch.setattr(report, "check_inputs_current", lambda settings: None)  # no predictions, no models to check
    title = all_titles(settings)["scaling_curves"]
    assert title.startswith("Would more data help? Test skill and rank IC against the windows seen")
    assert title not in materialize_report(settings).read_text()
    pl.DataFrame(schema=SCALING_SCHEMA).write_parquet(tables / "scaling_curves.parquet")
    assert title in materialize_report(settings).read_text()


def test_the_reference_row_is_the_trailing_volatility_forecast_of_the_learners_rows_scored_by_hand(built):
    """The reference line by hand: vol20 of each ticker's last 20 close-to-close log returns up to the day (from the
    raw bars), p from N(0, vol20^2) at tau, the log loss of close-to-close labels against the fold's training base
    rates, on the probe's test rows (here every learner scored the same ones)."""
    settings, summary = built
    tau = settings.evaluate.report_tau
    fold = walk_forward(settings)[0]
    wh = settings.warehouse
    bars = pl.concat([pl.read_parquet(wh.shard("raw_ohlcv", d)) for d in wh.shard_days("raw_ohlcv")])
    closes: dict[str, list] = {}
    for ticker, day, close in bars.select("ticker", "date", "close").sort("ticker", "date").iter_rows():
        closes.setdefault(ticker, []).append((day, close))
    labels = pl.concat([pl.read_parquet(wh.shard("labels", d)) for d in wh.shard_days("labels")])
    r_close = dict(zip(labels.select("ticker", "date").iter_rows(), labels["r_close"].to_list()))
    seen = labels.filter(pl.col("date") <= fold.label_end)["r_close"].to_list()
    counts = np.bincount([c for c in (_close_class(v, tau) for v in seen) if c >= 0], minlength=3)
    rates = counts / counts.sum()
    spec = lookup_variant("lr_spline")
    test = pl.read_parquet(wh.features_file(spec.feature_set, "test")).filter(pl.col("date") >= fold.test_start)
    loss, reference, n = 0.0, 0.0, 0
    for ticker, day in test.select("ticker", "date").unique().iter_rows():
        mine = closes[ticker]
        i = [d for d, _ in mine].index(day)
        window = [c for _, c in mine[i - 20 : i + 1]]
        vol = float(np.std(np.diff(np.log(window)), ddof=1))
        up = 0.5 * math.erfc(tau / vol / math.sqrt(2))
        y = _close_class(r_close.get((ticker, day)), tau)
        if y < 0:
            continue
        loss -= math.log([up, up, 1 - 2 * up][y])
        reference -= math.log(rates[y])
        n += 1
    row = summary.frame.filter((pl.col("variant") == "splinegpt") & (pl.col("learner") == VOL_REFERENCE)).row(
        0, named=True
    )
    assert row["test_rows"] == n
    assert row["logloss_skill"] == pytest.approx(1 - loss / reference, rel=1e-5)


def test_the_variants_side_by_side_give_the_rows_of_one_process(built, tmp_path):
    """With ``train.side_by_side`` > 1 each variant's rows come from its own process: the same rows (at the same
    torch threads), only the seconds differ."""
    import shutil

    from kinematic_pipeline.training.trainer import training_threads

    settings, summary = built
    shutil.copytree(settings.warehouse.root, tmp_path / "wh")
    train = dataclasses.replace(settings.train, side_by_side=2, threads=training_threads(settings.train))
    two = dataclasses.replace(settings, warehouse=tmp_path / "wh", train=train)
    frame = materialize_scaling_curves(two).frame
    assert frame.drop("seconds").equals(summary.frame.drop("seconds"))


def test_learnability_on_test_days_scores_every_validated_state_and_the_kept_one_is_the_adapter(built, tmp_path):
    """``benchmarks/bench_learnability.py`` (issue 39, item 5): one fine-tuning, a row per validated state in the
    curve's order; the states differ; the kept state's test scores are the saved adapter's scored directly; its tokens'
    probe beside it; the report table and figure read the rows."""
    from kinematic_pipeline.folds import evaluation_days
    from kinematic_pipeline.models import HEADS
    from kinematic_pipeline.predictors.families import predictor
    from kinematic_pipeline.stages.base_rates import CLOSE, train_base_rates
    from kinematic_pipeline.stages.scaling_scores import score_universe
    from kinematic_pipeline.stages.training_table import (
        LEARNABILITY_TEST_SCHEMA,
        learnability_test_png,
        learnability_test_table,
    )
    from kinematic_pipeline.training.curves import read_curves
    from kinematic_pipeline.training.run import load_foundation

    bench = benchmark("bench_learnability")
    settings, _ = built
    fold, policy = settings.folds[0], scaling_policy(settings, "splinegpt")
    days, rates = evaluation_days(settings, "spline_tokens", fold), train_base_rates(settings)[CLOSE]
    out = tmp_path / "adapter"
    rows = bench.transformer_rows(settings, policy, fold, days, rates, out, "abc1234")
    curves = read_curves(out)
    assert [r["step"] for r in rows] == [c["step"] for c in curves] and rows[0]["step"] == 0 and len(rows) > 2
    assert [r["kept"] for r in rows] == [bool(c["best"]) for c in curves] and sum(r["kept"] for r in rows) == 1
    assert rows[0]["val_skill"] == 0.0 and rows[0]["windows"] == 0
    assert len({round(r["logloss_skill"], 9) for r in rows}) > 1  # each state is scored, not one model again

    saved = HEADS[policy.variant.head.kind].load(load_foundation(settings, policy), out, policy.task.head_width).eval()
    fitted = saved, settings.train.class_weights
    _, _, universe, _ = predictor(policy.variant).predictions(settings, policy, days, True, fitted)
    direct, kept = score_universe(settings, universe, rates), next(r for r in rows if r["kept"])
    assert kept["logloss_skill"] == pytest.approx(direct["logloss_skill"], abs=1e-9)
    assert kept["rank_ic"] == pytest.approx(direct["rank_ic"], abs=1e-9, nan_ok=True)

    probe = bench.probe_row(settings, policy, fold, days, rates, "abc1234")
    assert probe["learner"] == "lr_spline" and probe["windows"] > 0
    frame = pl.DataFrame([*rows, probe], schema=LEARNABILITY_TEST_SCHEMA)
    settings.warehouse.learnability_test_file.parent.mkdir(parents=True, exist_ok=True)
    frame.write_parquet(settings.warehouse.learnability_test_file)
    table = learnability_test_table(settings)
    assert table.height == len(rows) + 1 and table["Kept"].to_list().count("yes") == 1
    assert table["Step (budget)"][0] == f"0 ({rows[0]['budget']})" and table["Step (budget)"][-1] == "fitted"
    assert learnability_test_png(frame, tmp_path / "learnability_test.png").stat().st_size > 0


def test_the_distinct_windows_served_are_counted_as_a_loop_over_the_served_windows_counts_them():
    """``distinct_served`` against its slow twin: the served windows one by one, epoch after epoch, into a set."""
    from kinematic_pipeline.sampling import epoch_sample

    def twin(n, cap, seed, served):
        seen, epoch = set(), 0
        while served > 0 and n > 0 and len(seen) < n:
            for position in epoch_sample(n, cap, seed, epoch, "train").tolist():
                if served == 0:
                    break
                seen.add(position)
                served -= 1
            epoch += 1
        return len(seen)

    for n, cap, served in ((100, None, 50), (100, None, 250), (1000, 64, 640), (1000, 64, 5000), (7, 3, 100)):
        assert distinct_served(n, cap, 1234, served) == twin(n, cap, 1234, served)
    assert distinct_served(1000, 64, 1234, 64) == 64  # within the first epoch: every window served is new
    assert distinct_served(1000, 64, 1234, 640) < 640  # epochs drawn independently repeat windows
    assert distinct_served(100, None, 1234, 100) == 100  # no cap: one epoch is a permutation of every window
    assert distinct_served(0, None, 1234, 10) == 0
