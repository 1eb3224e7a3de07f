"""The evaluate stage: predictions never see a later bar, and the kinematic state read off the tokens."""

from __future__ import annotations

import dataclasses
import datetime as dt

import numpy as np
import polars as pl
import pytest
import torch

from kinematic_pipeline.folds import evaluation_days
from kinematic_pipeline.model_pins import pin_foundation
from kinematic_pipeline.models import PatchTSTClassifier, SequenceClassifier, build_model
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.predictors.base import evaluation_tickers, purge_labels
from kinematic_pipeline.predictors.model import predict
from kinematic_pipeline.tasks.buy_sell_hold import BuySellHold
from kinematic_pipeline.tokenizations.spline import window_end_kinematics
from kinematic_pipeline.warehouse.layout import (
    PREDICTION_CALIBRATION,
    UNIVERSE_PREDICTIONS,
    UNIVERSE_RAW_PREDICTIONS,
    VALIDATION_PREDICTIONS,
)
from kinematic_pipeline.window_store import validation_days
from kinematic_pipeline_tests.conftest import (
    CUT,
    TOKENIZED_FOLD,
    _bars,
    _perturb_after,
    _run_all,
    _settings,
    _training_inputs,
    copy_warehouse,
)

pytestmark = pytest.mark.slow  # the nightly lane: its warehouse and models take a minute of the fast lane's 8

DECISION_DAY = dt.date(2021, 7, 9)  # "day t" of the perturbation: inside the test period (after CUT)


def _classifier(settings, variant: str):
    torch.manual_seed(0)  # an untrained policy is enough: the test is about which bars reach a decision
    backbone = build_model(variant, settings.model)
    model = PatchTSTClassifier(backbone, 3) if variant == "patchtst" else SequenceClassifier(backbone, 3)
    return model.eval()


@pytest.fixture(scope="module")
def warehouses(tokenized_once, tmp_path_factory):
    """A copy of the run's tokenized warehouse, and the same bars perturbed after ``DECISION_DAY`` built alike."""
    tmp = tmp_path_factory.mktemp("evaluate")
    base = copy_warehouse(tokenized_once, tmp / "base")
    other = _settings(tmp, "perturbed", _perturb_after(_bars(), DECISION_DAY), taus=(0.01,))
    _run_all(other)
    _training_inputs(other)
    return base, other


@pytest.mark.parametrize("variant", ["splinegpt", "rawgpt_fd", "patchtst"])
def test_predictions_do_not_change_when_bars_after_the_decision_day_change(warehouses, variant):
    base, other = warehouses
    # corpus_stats come from the training period (<= CUT), identical in both warehouses by construction
    assert pl.read_parquet(base.warehouse / "corpus_stats").equals(pl.read_parquet(other.warehouse / "corpus_stats"))
    a = predict(base, Policy(variant, BuySellHold(0.01), 1234, base.folds[0]), _classifier(base, variant)).frame
    b = predict(other, Policy(variant, BuySellHold(0.01), 1234, other.folds[0]), _classifier(other, variant)).frame
    assert a.height == b.height > 0 and a["date"].min() > CUT
    assert a.select("ticker", "date").equals(b.select("ticker", "date"))
    decided = ["p_buy", "p_sell", "p_hold", "action", "close"]
    past = pl.col("date") <= DECISION_DAY
    assert a.filter(past).select(decided).equals(b.filter(past).select(decided)), "a later bar reached a decision"
    # the realized label of day t needs day t+1: equal only up to t-1, evaluation-only by design
    earlier = pl.col("date") < DECISION_DAY
    assert a.filter(earlier)["label"].equals(b.filter(earlier)["label"])
    later_a, later_b = a.filter(~past), b.filter(~past)
    moved = (later_a["p_buy"] - later_b["p_buy"]).abs() > 0
    assert moved.mean() > 0.9, "the perturbation must reach the decisions after day t"


def test_predictions_cover_every_test_day_and_ticker_with_valid_probabilities(warehouses):
    base, _ = warehouses
    result = predict(base, Policy("splinegpt", BuySellHold(0.01), 1234, base.folds[0]), _classifier(base, "splinegpt"))
    frame, days = result.frame, evaluation_days(base, "spline_tokens")
    assert days[0] > base.split.train_end and frame["date"].unique().sort().to_list() == days
    assert sorted(frame["ticker"].unique().to_list()) == evaluation_tickers(base, "spline_tokens", days)
    probs = frame.select("p_buy", "p_sell", "p_hold").to_numpy()
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    assert (frame["action"].to_numpy() == probs.argmax(axis=1)).all()
    assert set(frame["label"].unique().to_list()) <= {-1, 0, 1, 2}
    assert {s["asset"] for s in result.shards} == {"spline_tokens", "raw_ohlcv"}


class _Recorder(torch.nn.Module):
    """A classifier that remembers the batches it was shown."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.batches = inner, []

    def forward(self, x):
        self.batches.append(x.clone())
        return self.inner(x)


def test_the_model_sees_the_same_batches_on_every_call(warehouses):
    """The float32 probabilities of a window depend in their last bits on the batch it shares; the test windows
    come from joins whose row order varies from call to call, so predict feeds them in (ticker, date) order."""
    base, _ = warehouses
    settings = dataclasses.replace(base, evaluate=dataclasses.replace(base.evaluate, predict_batch_size=7))
    runs = []
    for _ in range(4):
        recorder = _Recorder(_classifier(settings, "patchtst"))
        frame = predict(settings, Policy("patchtst", BuySellHold(0.01), 1234, settings.folds[0]), recorder).frame
        runs.append((recorder.batches, frame))
    first, frame = runs[0]
    assert len(first) > 1 and first[0].shape[0] == 7
    for batches, other in runs[1:]:
        assert len(batches) == len(first) and all(torch.equal(a, b) for a, b in zip(first, batches))
        assert other.equals(frame)


def test_configured_test_tickers_missing_from_the_data_are_reported(warehouses):
    base, _ = warehouses
    settings = dataclasses.replace(base, evaluate=dataclasses.replace(base.evaluate, test_tickers=("SYN001", "NVDA")))
    result = predict(
        settings,
        Policy("splinegpt", BuySellHold(0.01), 1234, settings.folds[0]),
        _classifier(settings, "splinegpt"),
    )
    assert result.frame["ticker"].unique().to_list() == ["SYN001"]
    assert result.missing_tickers == ["NVDA"]


def test_window_kinematics_are_the_last_token_because_the_end_knot_has_zero_acceleration(warehouses):
    base, _ = warehouses
    day = evaluation_days(base, "spline_tokens")[-1]
    tokens = pl.read_parquet(base.warehouse.shard("spline_tokens", day))["tokens"].to_numpy()
    state = window_end_kinematics(tokens)
    np.testing.assert_array_equal(state, tokens[:, 63, :])
    # the natural spline's acceleration carried to the end knot, c2 + c3 * h, vanishes: why token 63 is used
    np.testing.assert_allclose(tokens[:, 63, 2] + tokens[:, 63, 3], 0.0, atol=1e-5)
    assert np.abs(state[:, 2]).max() > 1e-4
    with pytest.raises(ValueError, match=r"\[n, 64, 9\]"):
        window_end_kinematics(tokens[:, :10])


def test_an_empty_test_period_fails_with_a_message_that_names_the_cut(warehouses, tmp_path):
    from kinematic_pipeline.stages.predict import materialize_predictions

    base, _ = warehouses
    late = dataclasses.replace(base, split=dataclasses.replace(base.split, train_end=dt.date(2021, 12, 31)))
    wh, policy = late.warehouse, Policy("splinegpt", BuySellHold(0.01), 1234, late.folds[0])
    adapter = wh.adapter_dir(policy) / "adapter" / "adapter_config.json"
    foundation = wh.foundation_checkpoint(policy)
    for path in (adapter, foundation):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    pin = pin_foundation(
        wh, wh.adapter_dir(policy), foundation, "0" * 64, {"class_weights": list(late.train.class_weights)}
    )
    try:
        with pytest.raises(ValueError, match=r"in the test period of fold all \(train <= 2021-12-31 .*\): it is empty"):
            materialize_predictions(late, policy)
    finally:
        for path in (adapter, foundation, pin):
            path.unlink()


def test_written_predictions_are_calibrated_on_validation_days_only(warehouses, monkeypatch):
    """materialize_predictions fits the calibration on the validation-day predictions, applies it to the test, validation
    and universe frames' softmax, stores it de-weighted (actions re-taken as the argmax of the calibrated softmax), and
    keeps the raw universe (its softmax de-weighted) beside them."""
    from kinematic_pipeline.backtest.calibration import CALIBRATION_SCHEMA, fit_calibration
    from kinematic_pipeline.stages import predict as stage
    from kinematic_pipeline.tasks.actions import PROB_COLUMNS, SOFTMAX_COLUMNS, unweighted_probabilities
    from kinematic_pipeline.training import run

    base, _ = warehouses
    policy = Policy("splinegpt", BuySellHold(0.01), 1234, TOKENIZED_FOLD)  # at the report's tau: the universe files too
    monkeypatch.setattr(run, "load_classifier", lambda settings, p: _classifier(settings, p.variant.name))
    from kinematic_pipeline import model_pins

    monkeypatch.setattr(model_pins, "model_files", lambda settings, p: [])  # no adapter on disk to hash
    from kinematic_pipeline.predictors import model as model_predictor

    monkeypatch.setattr(
        model_predictor, "check_class_weights", lambda settings, p: settings.train.class_weights
    )  # nor pin
    result = stage.materialize_predictions(base, policy)
    path = result.path

    wh, fold, w = base.warehouse, policy.fold, base.train.class_weights
    raw_test = predict(base, policy, _classifier(base, "splinegpt"), class_weights=w).frame
    tickers = sorted(raw_test["ticker"].unique().to_list())
    days = validation_days(base, "spline_tokens", fold)
    raw_val = predict(base, policy, _classifier(base, "splinegpt"), days, tickers, w).frame
    assert raw_val.height > 0 and raw_val["date"].max() <= CUT < raw_test["date"].min()
    # the universe is the test tickers here: the fitting set is their validation rows, less the labels that read a
    # close after the purge (a single cut: the last validation day's label reads the first test close)
    late = raw_val.filter((pl.col("date") > fold.label_end) & (pl.col("label") >= 0))
    assert late.height > 0 and fold.label_end < CUT
    fitting = purge_labels(raw_val, policy)
    expected = fit_calibration(fitting.select(SOFTMAX_COLUMNS).to_numpy(), fitting["label"].to_numpy(), w)
    assert result.calibration == expected and expected.fitted
    assert result.calibration.n_rows == raw_val.filter(pl.col("label") >= 0).height - late.height
    row = pl.read_parquet(wh.predictions_extra(PREDICTION_CALIBRATION, policy))
    assert row.schema == pl.Schema(CALIBRATION_SCHEMA) and row.height == 1
    assert row.row(0, named=True)["temperature"] == expected.temperature and row["fold"][0] == fold.label

    def probs(frame: pl.DataFrame) -> np.ndarray:
        return frame.select(PROB_COLUMNS).to_numpy()

    def softmax(frame: pl.DataFrame) -> np.ndarray:
        return frame.select(SOFTMAX_COLUMNS).to_numpy()

    def calibrated(raw: pl.DataFrame) -> np.ndarray:
        """The stored p of ``raw``'s rows: its softmax calibrated (float32), de-weighted."""
        return unweighted_probabilities(expected.apply(softmax(raw).astype(np.float64)), w)

    np.testing.assert_array_equal(probs(raw_test), unweighted_probabilities(softmax(raw_test), w))  # p, raw
    written = pl.read_parquet(path)
    np.testing.assert_array_equal(probs(written), calibrated(raw_test))
    actions = expected.apply(softmax(raw_test).astype(np.float64)).argmax(axis=1)
    np.testing.assert_array_equal(written["action"].to_numpy(), actions)
    np.testing.assert_array_equal(written["action"].to_numpy(), (probs(written) * np.asarray(w)).argmax(axis=1))
    assert written.drop(*PROB_COLUMNS, "action").equals(
        raw_test.drop(*PROB_COLUMNS, "action").with_columns(pl.lit(fold.label).alias("fold"))
    )
    validation = pl.read_parquet(wh.predictions_extra(VALIDATION_PREDICTIONS, policy))
    np.testing.assert_array_equal(probs(validation), calibrated(raw_val))
    # what the margin rule's m is chosen on: no label after the purge
    assert (validation.filter(pl.col("date") > fold.label_end)["label"] == -1).all()
    universe = pl.read_parquet(wh.predictions_extra(UNIVERSE_PREDICTIONS, policy))
    universe_raw = pl.read_parquet(wh.predictions_extra(UNIVERSE_RAW_PREDICTIONS, policy))
    assert universe_raw.schema == universe.schema and universe_raw.height == universe.height
    assert sorted(universe["ticker"].unique().to_list()) == tickers  # so the fitting set was raw_val
    np.testing.assert_array_equal(probs(universe), calibrated(universe_raw))
    np.testing.assert_array_equal(probs(universe_raw), unweighted_probabilities(softmax(universe_raw), w))
    # the model's own softmax is kept beside the calibrated probabilities, on every file
    for frame, raw in ((written, raw_test), (validation, raw_val), (universe, universe_raw)):
        np.testing.assert_array_equal(softmax(frame), softmax(raw))
    assert "calibration_temperature" in result.metadata()
    # the predictions view reads the policy's shard only, not the subfolders
    assert wh.query("SELECT count(*) AS n FROM predictions")["n"][0] == written.height
