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
from kinematic_pipeline.backtest.policy_frames import (
    BEYOND,
    PRIOR,
    PRIOR_DATA_SEEN,
    PRIOR_DISPLAY_NAME,
    FoldRates,
    SkillOptions,
    seed_mean_skill_frame,
    skill_beyond_reference_frame,
)
from kinematic_pipeline.backtest.skill import base_rates
from kinematic_pipeline.backtest.volatility_reference import (
    REFERENCE,
    REFERENCE_DATA_SEEN,
    REFERENCE_DISPLAY_NAME,
    reference_predictions,
)
from kinematic_pipeline.config import load_settings
from kinematic_pipeline.folds import Fold
from kinematic_pipeline.report import evidence_tables as tables
from kinematic_pipeline.stages import evidence as ev
from kinematic_pipeline.stages import reference_rows
from kinematic_pipeline.stages.labels import labels_schema
from kinematic_pipeline.tasks.buy_sell_hold import PREDICTIONS_SCHEMA, BuySellHold, labels_from_returns, tau_column
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
    pl.DataFrame(frame, schema=labels_schema((BuySellHold(TAU),))).write_parquet(path)
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
    return settings, _predictions_frame(rows)


def _predictions_frame(rows) -> pl.DataFrame:
    """PREDICTIONS_SCHEMA rows from (variant, tau, seed, ticker, date, close, p_buy, p_sell, p_hold, action, label)
    tuples, p the stored (de-weighted) probabilities; any softmax column of the schema holds the same numbers."""
    base = dict(list(PREDICTIONS_SCHEMA.items())[:11])
    frame = pl.DataFrame(rows, schema=base, orient="row")
    extra = [pl.col(f"p_{c.rsplit('_', 1)[1]}").alias(c) for c in PREDICTIONS_SCHEMA if c not in base]
    return frame.with_columns(extra).select(list(PREDICTIONS_SCHEMA)).cast(PREDICTIONS_SCHEMA)


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
    want = seed_mean_skill_frame(by_hand, rates[ev.CLOSE], options)
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


# --- the trailing-volatility reference ---------------------------------------------------------------------


def _write_bars(settings, day, tickers, closes):
    frame = pl.DataFrame({"ticker": list(tickers), "date": [day] * len(tickers), "close": list(closes)})
    schema = {"partition_date": pl.Date, "content_hash": pl.String, "quarantine_hash": pl.String}
    settings.warehouse.write_shard(
        "raw_ohlcv", day, frame, {"partition_date": day}, schema, companions={"quarantine": None}
    )


def test_the_reference_reads_the_bars_before_the_first_day_and_no_later_bar_moves_a_forecast(tmp_path):
    settings = _settings(tmp_path)
    days = [dt.date(2023, 1, 2) + dt.timedelta(k) for k in range(45)]
    rng = np.random.default_rng(4)
    closes = 20.0 * np.exp(np.cumsum(rng.normal(0, 0.02, (45, 2)), axis=0))
    for k, day in enumerate(days):
        _write_bars(settings, day, ("A", "B"), closes[k])
    bars = pl.DataFrame(
        {"ticker": ["A", "B"] * 45, "date": [d for d in days for _ in range(2)], "close": closes.ravel()}
    )
    rows = pl.DataFrame({"ticker": ["A", "B"] * 25, "date": [d for d in days[20:] for _ in range(2)], "label": 0})
    got = reference_rows.volatility_reference(settings, pl.concat([rows, rows]), TAU)  # one forecast per ticker-day
    assert got.height == 50 and got["date"].min() == days[20]  # day 20 has its 20 returns: days 0-19 were read
    assert got.equals(reference_predictions(bars, rows, TAU))
    # a later bar changes: the forecasts up to the day before are the same numbers; that day's moves
    _write_bars(settings, days[40], ("A", "B"), closes[40] * 1.5)
    again = reference_rows.volatility_reference(settings, rows, TAU)
    assert again.filter(pl.col("date") < days[40]).equals(got.filter(pl.col("date") < days[40]))
    assert not again.filter(pl.col("date") == days[40])["p_buy"].equals(got.filter(pl.col("date") == days[40])["p_buy"])
    with pytest.raises(ValueError, match="two labels"):
        reference_rows.volatility_reference(settings, pl.concat([rows, rows.with_columns(label=pl.lit(1))]), TAU)


def _reference_rows(predictions: pl.DataFrame, p=(0.2, 0.2, 0.6)) -> pl.DataFrame:
    days = predictions.select("ticker", "date", "label").unique(maintain_order=True).sort("date", "ticker")
    rows = [(REFERENCE, TAU, 0, t, d, 100.0, *p, 2, y) for t, d, y in days.iter_rows()]
    return _predictions_frame(rows)


def test_the_information_table_scores_the_reference_and_each_models_skill_beyond_it(warehouse):
    settings, predictions = warehouse
    rates = ev.train_base_rates(settings)
    reference = _reference_rows(predictions)
    skill = ev.information_skill(settings, predictions, rates, TAU, reference)
    names = ev.outcome_names("spline")
    options = ev.skill_options(settings.evaluate)
    assert options.block_days == settings.evaluate.skill_bootstrap_block_days == 50
    trained = skill[names[ev.TRAINED]]
    assert trained["variant"].to_list() == ["splinegpt", REFERENCE]
    # the reference's own row: its p scored as it is stored, the same numbers as its frame alone
    own = seed_mean_skill_frame(reference, rates[ev.TRAINED], options)
    assert trained.filter(variant=REFERENCE).select(own.columns).equals(own)
    # every test label is Buy and the reference says 0.2: its log loss is -ln 0.2, by hand
    assert own["log_loss"].item() == pytest.approx(-np.log(0.2), rel=1e-6)
    # beyond: it covers every row, so the seed mean of the paired differences is the difference of the means
    for outcome in names.values():
        frame = skill[outcome]
        model, ref = (frame.filter(variant=v).row(0, named=True) for v in ("splinegpt", REFERENCE))
        assert model[BEYOND] == pytest.approx(model["log_loss_skill"] - ref["log_loss_skill"], rel=1e-6, abs=1e-9)
        assert model[f"{BEYOND}_ci_low"] <= model[BEYOND] <= model[f"{BEYOND}_ci_high"]
        assert ref[BEYOND] is None and model["paired_rows"] == model["n_rows"]
    direct = skill_beyond_reference_frame(predictions, reference, rates[ev.TRAINED], options)
    assert trained.filter(variant="splinegpt").select(direct.columns).equals(direct)
    # the table: a column for the reference, a row per outcome for the skill beyond it, the intervals stated
    table = tables.information_table(skill, TAU, {"splinegpt": "fit 2023"}, block_days=20)
    assert table.columns == ["Outcome", "Metric", "SplineGPT", REFERENCE_DISPLAY_NAME]
    assert table.height == 2 * (len(tables.INFORMATION_ROWS) + 1) + 2
    beyond = table.filter(pl.col("Metric") == tables.BEYOND_ROW[1])
    assert beyond[REFERENCE_DISPLAY_NAME].to_list() == [tables.IS_REFERENCE] * 2
    row = trained.filter(variant="splinegpt").row(0, named=True)
    low, high, std = (row[f"{BEYOND}{x}"] for x in ("_ci_low", "_ci_high", "_seed_std"))
    assert beyond["SplineGPT"][0] == f"{row[BEYOND]:.3f} [{low:.3f}, {high:.3f}] ± {std:.3f}"
    seen = table.filter(pl.col("Metric") == "Data seen").row(0, named=True)
    assert seen["SplineGPT"] == "fit 2023" and seen[REFERENCE_DISPLAY_NAME] == REFERENCE_DATA_SEEN
    intervals = table.filter(pl.col("Metric") == "Intervals").row(0, named=True)
    want = "95%, 1-day blocks of 6 test days (the 20-day block cut to a quarter of the days)"
    assert intervals["SplineGPT"] == intervals[REFERENCE_DISPLAY_NAME] == want
    assert table["Metric"][-1] == "Data seen"
    # without the reference, the table is as before
    assert ev.information_skill(settings, predictions, rates, TAU)[names[ev.TRAINED]]["variant"].to_list() == [
        "splinegpt"
    ]


def test_the_skill_beyond_the_trivial_probe_leads_the_information_table(warehouse):
    """Science-6 M-D: each model's log-loss skill beyond the trivial probe (LR on ret1 and vol20: the stricter zero),
    paired on the same ticker-days as the skill beyond vol20 is, leads the table; the probe's own cell is the zero."""
    from kinematic_pipeline.backtest.policy_frames import BEYOND_TRIVIAL
    from kinematic_pipeline.variants import TRIVIAL_PROBE

    settings, predictions = warehouse
    rates = ev.train_base_rates(settings)
    trivial = _reference_rows(predictions, p=(0.3, 0.2, 0.5)).with_columns(pl.lit(TRIVIAL_PROBE).alias("variant"))
    both = pl.concat([predictions, trivial])
    skill = ev.information_skill(settings, both, rates, TAU)
    options = ev.skill_options(settings.evaluate)
    trained = skill[ev.outcome_names("spline")[ev.TRAINED]]
    model, zero = (trained.filter(variant=v).row(0, named=True) for v in ("splinegpt", TRIVIAL_PROBE))
    direct = skill_beyond_reference_frame(predictions, trivial, rates[ev.TRAINED], options).row(0, named=True)
    assert model[BEYOND_TRIVIAL] == direct[BEYOND] and model[f"{BEYOND_TRIVIAL}_ci_high"] == direct[f"{BEYOND}_ci_high"]
    assert model[BEYOND_TRIVIAL] == pytest.approx(model["log_loss_skill"] - zero["log_loss_skill"], abs=1e-9)
    assert zero[BEYOND_TRIVIAL] is None
    table = tables.information_table(skill, TAU)
    assert table["Metric"][0] == tables.BEYOND_TRIVIAL_ROW[1]  # it leads
    assert table.row(0, named=True)["Logistic regression (Trivial)"] == tables.IS_REFERENCE
    # without the trivial probe among the models: no such row
    alone = tables.information_table(ev.information_skill(settings, predictions, rates, TAU), TAU)
    assert tables.BEYOND_TRIVIAL_ROW[1] not in alone["Metric"].to_list()


def test_the_information_table_prints_the_calibrated_priors_row_scored_by_hand(warehouse):
    """The calibrated prior (each fold's validation-day base rates, what a model that learned nothing is calibrated
    to) is its own column of the information table, on both outcomes: every trained-on test label is Buy, so its log
    loss is -ln of its Buy rate, by hand, and its log-loss skill against the training base rates is not 0."""
    settings, predictions = warehouse
    rates = ev.train_base_rates(settings)
    validation = {ev.TRAINED: np.array([0.4, 0.1, 0.5]), ev.CLOSE: np.array([0.3, 0.3, 0.4])}
    prior = {o: {TAU: FoldRates((TEST_DAYS[0],), (p,))} for o, p in validation.items()}
    skill = ev.information_skill(settings, predictions, rates, TAU, prior=prior)
    names = ev.outcome_names("spline")
    for outcome in names.values():
        assert sorted(skill[outcome]["variant"].to_list()) == sorted(["splinegpt", PRIOR]), outcome
    own = skill[names[ev.TRAINED]].filter(variant=PRIOR).row(0, named=True)
    assert own["log_loss"] == pytest.approx(-np.log(0.4), rel=1e-5)
    train_buy = rates[ev.TRAINED][TAU].rates[0][0]
    assert own["log_loss_skill"] == pytest.approx(1 - np.log(0.4) / np.log(train_buy), rel=1e-5)
    assert abs(own["log_loss_skill"]) > 0.1
    table = tables.information_table(skill, TAU, {"splinegpt": "fit 2023"})
    assert table.columns == ["Outcome", "Metric", "SplineGPT", PRIOR_DISPLAY_NAME]
    first = table.row(0, named=True)
    assert first[PRIOR_DISPLAY_NAME].startswith(f"{own['log_loss_skill']:.3f}")
    assert table.filter(pl.col("Metric") == "Data seen")[PRIOR_DISPLAY_NAME].item() == PRIOR_DATA_SEEN
    # without the validation rates, no such column
    assert (
        PRIOR_DISPLAY_NAME
        not in tables.information_table(ev.information_skill(settings, predictions, rates, TAU), TAU).columns
    )


def test_the_reference_has_a_constant_score_and_so_no_ic_in_the_signal_table(warehouse):
    settings, _ = warehouse
    rng = np.random.default_rng(1)
    tickers, days = [f"T{k}" for k in range(6)], TEST_DAYS
    keys = [(t, d) for d in days for t in tickers]
    universe = pl.DataFrame(
        {
            "variant": "splinegpt",
            "seed": 1,
            "ticker": [t for t, _ in keys],
            "date": [d for _, d in keys],
            "score": rng.normal(size=len(keys)),
            "r_close": rng.normal(0, 0.02, len(keys)),
            "r_spline": rng.normal(0, 0.02, len(keys)),
            "label": pl.Series(rng.integers(0, 3, len(keys)), dtype=pl.Int8),
        }
    )
    vol = rng.uniform(0.005, 0.05, len(keys))
    from kinematic_pipeline.backtest.volatility_reference import normal_class_probabilities

    p = normal_class_probabilities(vol, TAU)
    reference = _predictions_frame(
        [(REFERENCE, TAU, 0, t, d, 1.0, *p[i], int(p[i].argmax()), 0) for i, (t, d) in enumerate(keys)]
    )
    scored = reference_rows.with_reference_scores(universe, reference)
    assert (scored.filter(variant=REFERENCE)["score"] == 0.0).all()  # exactly 0: p_buy and p_sell are one number
    stats = ev.signal_statistics(settings, scored)
    ref = stats.filter(variant=REFERENCE)
    assert ref.height == 2 and ref["rank_ic"].is_nan().all() and (ref["days"] == 0).all()
    assert stats.filter(variant="splinegpt")["rank_ic"].is_finite().all()
    table = tables.signal_table(stats, {"splinegpt": "fit"}, "every ticker")
    row = table.filter(pl.col("Model") == REFERENCE_DISPLAY_NAME).row(0, named=True)
    assert row["Rank IC (mean)"] == row["Newey-West t"] == row["AUC dir (Buy vs Sell)"] == tables.CONSTANT_SCORE
    assert ref["auc_direction"][1] == 0.5  # what a constant score's AUC computes to (close labels): ties only
    assert row["Data seen"] == REFERENCE_DATA_SEEN
