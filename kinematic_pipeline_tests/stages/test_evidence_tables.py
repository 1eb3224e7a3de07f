"""The information table (stages/evidence.py) on a tiny hand-made warehouse: base rates of both outcomes from
training days only, close-to-close labels from r_close, each metric once per outcome, one set when the
trained-on labels are the close-to-close ones, and cells that state the seed mean, its interval and the std."""

from __future__ import annotations

import dataclasses
import datetime as dt

import numpy as np
import polars as pl
import pytest

from kinematic_pipeline.backtest.oracle import ORACLE
from kinematic_pipeline.backtest.policy_frames import SkillOptions, seed_mean_skill_frame
from kinematic_pipeline.backtest.skill import base_rates
from kinematic_pipeline.backtest.sweep import PREDICTIONS_SCHEMA
from kinematic_pipeline.config import load_settings
from kinematic_pipeline.folds import Fold
from kinematic_pipeline.label_rules import labels_from_returns, tau_column
from kinematic_pipeline.report import evidence_tables as tables
from kinematic_pipeline.stages import evidence as ev
from kinematic_pipeline.stages.labels import labels_schema
from kinematic_pipeline.warehouse import LABELS
from kinematic_pipeline_tests.conftest import record_in_manifest, single_cut

TAU = 0.01
TICKERS = ("A", "B", "C", "D")
TRAIN_DAYS = (dt.date(2023, 1, 2), dt.date(2023, 1, 3))
CUT = dt.date(2023, 1, 4)  # the last training day's label (2023-01-03 -> 01-04) is known before the test period
TEST_DAYS = tuple(dt.date(2023, 1, 5) + dt.timedelta(k) for k in range(6))
LABEL = tau_column(TAU)
# training days: (trained-on labels, r_close) per ticker; the two disagree on purpose
TRAIN_ROWS = {
    TRAIN_DAYS[0]: ([0, 0, 2, 2], [-0.02, 0.0, 0.0, 0.03]),  # close-to-close: Sell, Hold, Hold, Buy
    TRAIN_DAYS[1]: ([1, 2, 2, 2], [0.02, None, 0.0, -0.05]),  # Buy, unknown, Hold, Sell
}


def _settings(tmp_path, label_source="spline"):
    settings = single_cut(load_settings("ci", source="parquet", source_path=str(tmp_path / "unused.parquet"), env={}))
    return dataclasses.replace(
        settings,
        warehouse=tmp_path / "wh",
        split=dataclasses.replace(settings.split, train_end=CUT),
        tokenize=dataclasses.replace(settings.tokenize, taus=(TAU,), label_source=label_source),
        evaluate=dataclasses.replace(settings.evaluate, skill_bootstrap_resamples=60, report_tau=TAU),
    )


def _write_labels(settings, day, labels, r_close):
    path = settings.warehouse.shard(LABELS, day)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = {
        "ticker": list(TICKERS),
        "date": [day] * len(TICKERS),
        "r_spline": [0.0] * len(TICKERS),
        "r_close": r_close,
        "label_source": [settings.tokenize.label_source] * len(TICKERS),
        LABEL: labels,
    }
    pl.DataFrame(frame, schema=labels_schema((TAU,))).write_parquet(path)
    record_in_manifest(settings.warehouse, LABELS, day)


@pytest.fixture
def warehouse(tmp_path):
    """Labels shards of two training and six test days (test-day labels all Buy, so that a base rate that
    read them would show it), and the test predictions of two seeds."""
    settings = _settings(tmp_path)
    for day, (labels, r_close) in TRAIN_ROWS.items():
        _write_labels(settings, day, labels, r_close)
    rng = np.random.default_rng(0)
    rows = []
    for day in TEST_DAYS:
        r_close = rng.normal(0, 0.02, len(TICKERS)).tolist()
        _write_labels(settings, day, [0] * len(TICKERS), r_close)
        for seed in (1, 2):
            for ticker in TICKERS:
                q = rng.dirichlet([2, 2, 2])
                rows.append(("splinegpt", TAU, seed, ticker, day, 100.0, *q, int(q.argmax()), 0))
    return settings, pl.DataFrame(rows, schema=PREDICTIONS_SCHEMA, orient="row")


def test_base_rates_of_both_outcomes_come_from_training_days_only(warehouse):
    settings, _ = warehouse
    rates = ev.train_base_rates(settings)
    (trained,), (close,) = rates[ev.TRAINED][TAU].rates, rates[ev.CLOSE][TAU].rates  # one fold: the single cut
    np.testing.assert_allclose(trained, [2 / 8, 1 / 8, 5 / 8])
    np.testing.assert_allclose(close, [2 / 7, 2 / 7, 3 / 7])  # r_close labels; one unknown
    assert rates[ev.TRAINED][TAU].starts == (TEST_DAYS[0],)


def _two_folds(monkeypatch, settings):
    """``settings`` with two folds (its cached ``folds``): fold A learns the labels of TRAIN_DAYS[0] and tests
    TEST_DAYS[:3]; fold B learns both training days and tests the rest."""
    folds = (
        Fold("A", TRAIN_DAYS[0], TRAIN_DAYS[0], TEST_DAYS[0], TEST_DAYS[2]),
        Fold("B", TRAIN_DAYS[1], TRAIN_DAYS[1], TEST_DAYS[3], None),
    )
    monkeypatch.setitem(settings.__dict__, "folds", folds)


def test_each_fold_has_the_base_rates_of_its_own_training_labels_and_ignores_later_days(warehouse, monkeypatch):
    settings, _ = warehouse
    _two_folds(monkeypatch, settings)
    rates = ev.train_base_rates(settings)
    np.testing.assert_allclose(np.stack(rates[ev.TRAINED][TAU].rates), [[2 / 4, 0, 2 / 4], [2 / 8, 1 / 8, 5 / 8]])
    np.testing.assert_allclose(np.stack(rates[ev.CLOSE][TAU].rates), [[1 / 4, 1 / 4, 2 / 4], [2 / 7, 2 / 7, 3 / 7]])
    # fold A does not move when the day after its label_end changes; fold B does
    _write_labels(settings, TRAIN_DAYS[1], [1, 1, 1, 1], [-0.05] * 4)
    again = ev.train_base_rates(settings)
    assert np.array_equal(again[ev.TRAINED][TAU].rates[0], rates[ev.TRAINED][TAU].rates[0])
    assert np.array_equal(again[ev.CLOSE][TAU].rates[0], rates[ev.CLOSE][TAU].rates[0])
    assert not np.array_equal(again[ev.TRAINED][TAU].rates[1], rates[ev.TRAINED][TAU].rates[1])


def test_each_test_day_is_scored_against_its_own_folds_base_rates(warehouse, monkeypatch):
    settings, predictions = warehouse
    _two_folds(monkeypatch, settings)
    rates = ev.train_base_rates(settings)
    skill = ev.information_skill(settings, predictions, rates, TAU)[ev.outcome_names("spline")[ev.TRAINED]]
    # every test label is Buy: a row's reference Brier is (r_buy - 1)^2 + r_sell^2 + r_hold^2 of its fold's rates
    per_fold = [(r[0] - 1) ** 2 + r[1] ** 2 + r[2] ** 2 for r in rates[ev.TRAINED][TAU].rates]
    assert skill["brier_reference"].item() == pytest.approx(sum(per_fold) / 2, rel=1e-12)  # 3 test days each
    assert per_fold[0] != pytest.approx(per_fold[1])
    fold_of_rows = rates[ev.TRAINED][TAU].rows(pl.Series(TEST_DAYS))
    assert np.array_equal(fold_of_rows, np.stack([rates[ev.TRAINED][TAU].rates[k] for k in (0, 0, 0, 1, 1, 1)]))
    pooled = rates[ev.TRAINED][TAU].pooled(pl.Series(TEST_DAYS[:4]))  # 3 rows of fold A, 1 of fold B
    np.testing.assert_allclose(pooled, 0.75 * rates[ev.TRAINED][TAU].rates[0] + 0.25 * rates[ev.TRAINED][TAU].rates[1])
    with pytest.raises(ValueError, match="2023-01-03 is before the first fold's test period"):
        rates[ev.TRAINED][TAU].rows(pl.Series([TRAIN_DAYS[1], TEST_DAYS[0]]))


def test_close_to_close_labels_follow_r_close_at_each_rows_tau_and_are_unknown_without_a_return():
    predictions = pl.DataFrame(
        {"ticker": ["A", "A", "B", "C"], "date": [TEST_DAYS[0]] * 4, "tau": [0.01, 0.03, 0.01, 0.01]}
    )
    returns = pl.DataFrame({"ticker": ["A", "B"], "date": [TEST_DAYS[0]] * 2, "r_close": [0.02, None]})
    out = ev.with_close_labels(predictions, returns)
    assert out[ev.CLOSE_LABEL].to_list() == [0, 2, -1, -1]  # Buy at 1%, Hold at 3%; no return; no row
    assert out.columns == [*predictions.columns, ev.CLOSE_LABEL]


def test_the_close_to_close_rows_score_r_close_labels_against_their_own_base_rates(warehouse):
    settings, predictions = warehouse
    rates = ev.train_base_rates(settings)
    skill = ev.information_skill(settings, predictions, rates, TAU)
    names = ev.outcome_names("spline")
    assert list(skill) == [names[ev.TRAINED], names[ev.CLOSE]]
    returns = pl.concat([pl.read_parquet(settings.warehouse.shard(LABELS, d)) for d in TEST_DAYS])
    # the labels by hand: each prediction row's own r_close through the tau rule
    joined = predictions.join(returns.select("ticker", "date", "r_close"), on=["ticker", "date"], how="left")
    by_hand = joined.with_columns(label_close=pl.Series(labels_from_returns(joined["r_close"].to_numpy(), TAU)))
    options = SkillOptions(n_boot=60, boot_seed=settings.evaluate.backtest.bootstrap_seed, label_column="label_close")
    want = seed_mean_skill_frame(by_hand, rates[ev.CLOSE], settings.train.class_weights, options)
    got = skill[names[ev.CLOSE]]
    assert got.select(want.columns).equals(want)
    trained = skill[names[ev.TRAINED]]  # every trained-on test label is Buy: a different outcome, other numbers
    assert trained["brier"].item() != got["brier"].item() and trained["n_rows"].item() == predictions.height
    assert base_rates(by_hand["label_close"].to_numpy()).max() < 1  # the close labels are not all Buy


def test_the_table_shows_every_metric_once_per_outcome_with_the_seed_mean_interval_and_std(warehouse):
    settings, predictions = warehouse
    skill = ev.information_skill(settings, predictions, ev.train_base_rates(settings), TAU)
    table = tables.information_table(skill, TAU)
    assert table.columns == ["Outcome", "Metric", "SplineGPT"]
    assert table.height == 2 * len(tables.INFORMATION_ROWS)
    assert table["Outcome"].unique(maintain_order=True).to_list() == list(ev.outcome_names("spline").values())
    assert "Balanced accuracy (policy's actions)" in table["Metric"].to_list()
    row = skill[ev.outcome_names("spline")[ev.CLOSE]].row(0, named=True)
    cell = table.filter(pl.col("Outcome").str.starts_with("close"), pl.col("Metric").str.starts_with("Brier"))
    assert cell["SplineGPT"].item() == (
        f"{row['brier_skill']:.3f} [{row['brier_skill_ci_low']:.3f}, {row['brier_skill_ci_high']:.3f}] "
        f"± {row['brier_skill_seed_std']:.3f}"
    )


def test_with_close_to_close_training_labels_the_table_shows_one_set_and_says_so(warehouse):
    settings, predictions = warehouse
    settings = dataclasses.replace(settings, tokenize=dataclasses.replace(settings.tokenize, label_source="close"))
    skill = ev.information_skill(settings, predictions.filter(seed=1), ev.train_base_rates(settings), TAU)
    table = tables.information_table(skill, TAU)
    assert table.height == len(tables.INFORMATION_ROWS)
    assert table["Outcome"].unique().to_list() == ["close-to-close (trained on and traded: one set, the two coincide)"]
    assert not any("±" in c for c in table["SplineGPT"].to_list())  # one seed: no spread to state


def test_the_informed_ceiling_reads_na_on_the_outcome_it_was_not_scored_on():
    columns = {"tau": TAU, "n_seeds": 1, "variant": ["splinegpt", ORACLE]}
    metrics = {f"{k}{x}": 0.5 for k, _ in tables.INFORMATION_ROWS for x in ("", "_ci_low", "_ci_high", "_seed_std")}
    both = pl.DataFrame(columns | metrics)
    skill = {"trained": both, "close": both.filter(pl.col("variant") != ORACLE)}
    table = tables.information_table(skill, TAU)
    oracle = table["Informed (latent drift)"].to_list()
    assert oracle[:2] == ["N/A (one-hot)"] * 2 and oracle[2] == "0.500 [0.500, 0.500]"  # scores, then decisions
    assert oracle[len(tables.INFORMATION_ROWS) :] == [tables.ORACLE_ELSEWHERE] * len(tables.INFORMATION_ROWS)
    assert table["SplineGPT"][0] == "0.500 [0.500, 0.500]"


# --- the universe tables ----------------------------------------------------------------------------------


def _stats_rows() -> pl.DataFrame:
    rows = []
    for outcome, shift in (("trained-on labels (spline)", 0.05), ("close-to-close (what the backtest trades)", 0.0)):
        for variant, seeds in (("splinegpt", (1, 2)), ("lr_trivial", (0,)), ("always_hold", (0,))):
            for seed in seeds:
                constant = variant == "always_hold"
                rows.append(
                    {
                        "outcome": outcome,
                        "variant": variant,
                        "seed": seed,
                        "ticker_days": 1000,
                        "tickers": 10,
                        "days": 0 if constant else 100,
                        "rank_ic": float("nan") if constant else 0.01 * seed + shift,
                        "rank_icir": float("nan") if constant else 0.1,
                        "rank_ic_t_nw": float("nan") if constant else 2.0,
                        "rank_ic_positive": float("nan") if constant else 0.55,
                        "ic": float("nan") if constant else 0.02,
                        "ic_t_nw": float("nan") if constant else 1.5,
                        "auc_direction": float("nan") if constant else 0.5 + shift + 0.01 * seed,
                    }
                )
    return pl.DataFrame(rows)


def test_the_signal_table_shows_the_seed_mean_and_spread_and_what_each_variant_saw():
    from kinematic_pipeline.report.evidence_tables import signal_table

    seen = {"splinegpt": "fit 2000 .. 2016", "lr_trivial": "fit 2000 .. 2016", "always_hold": "nothing"}
    table = signal_table(_stats_rows(), seen, "every ticker")
    spline = table.filter((pl.col("Model") == "SplineGPT") & pl.col("Outcome").str.starts_with("close"))
    assert spline["Rank IC (mean)"][0] == "+0.0150 ± 0.0071"  # seeds 1 and 2: 0.01 and 0.02
    assert spline["Seeds"][0] == "2" and spline["Data seen"][0] == "fit 2000 .. 2016"
    hold = table.filter(pl.col("Model") == "Always Hold (cash)")
    assert hold["Rank IC (mean)"].to_list() == ["N/A", "N/A"]  # a constant score has no IC
    assert table["Model"][-1] == "every ticker"


def test_the_label_artefact_table_is_the_gap_between_the_two_outcomes():
    from kinematic_pipeline.report.evidence_tables import label_artefact_table

    table = label_artefact_table(_stats_rows(), "spline")
    row = table.filter(pl.col("Model") == "Logistic regression (Trivial)").row(0, named=True)
    assert row["AUC dir, spline labels"] == "0.550" and row["AUC dir, close-to-close"] == "0.500"
    assert row["AUC on spline - AUC on close labels"] == "+0.050"
    residual = _stats_rows().filter(pl.col("variant") == "lr_trivial").with_columns(variant=pl.lit("e_t"))
    first = label_artefact_table(_stats_rows(), "spline", residual).row(0, named=True)
    assert (
        first["Model"].startswith("e_t: the causal fit's residual today") and first["AUC dir, spline labels"] == "0.550"
    )
    close_only = label_artefact_table(_stats_rows().filter(pl.col("outcome").str.starts_with("close")), "close")
    assert "no artefact" in close_only["Model"][0]
