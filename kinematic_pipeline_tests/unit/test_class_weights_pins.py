"""The class weights travel with the model: an adapter records those it was fine-tuned with (a probe its fit), the
predictions carry them, and evaluation reads them from there. A model trained under one set of weights and evaluated
under another is refused in one line naming both; predictions whose weights are not their model's are refused."""

from __future__ import annotations

import dataclasses
import json

import polars as pl
import pytest

from kinematic_pipeline.config import load_settings
from kinematic_pipeline.model_pins import (
    WEIGHT_COLUMNS,
    check_class_weights,
    predictions_class_weights,
    run_class_weights,
    trained_class_weights,
)
from kinematic_pipeline.pins import StalePairError
from kinematic_pipeline.run_keys import run_policies
from kinematic_pipeline.variants import models, trained
from kinematic_pipeline.warehouse.layout import PIN_FILE, PREDICTION_CLASS_WEIGHTS

PAPER = (2.0, 10.0, 1.0)


@pytest.fixture
def settings(tmp_path):
    return load_settings("ci", warehouse=tmp_path / "warehouse", env={})


def _models(settings):
    return [p for p in run_policies(settings) if models([p.variant.name])]


def _fine_tuned(settings, policy, weights=PAPER):
    """An adapter folder whose pin records ``weights`` (None: a pin written before the weights were recorded)."""
    folder = settings.warehouse.adapter_dir(policy)
    folder.mkdir(parents=True, exist_ok=True)
    record = {"foundation": "models/x/model.pt", "foundation_sha256": "0" * 64}
    (folder / PIN_FILE).write_text(json.dumps(record | ({} if weights is None else {"class_weights": list(weights)})))


def _carried(settings, policy, weights):
    path = settings.warehouse.predictions_extra(PREDICTION_CLASS_WEIGHTS, policy)
    path.parent.mkdir(parents=True, exist_ok=True)
    pl.DataFrame([dict(zip(WEIGHT_COLUMNS, weights))]).write_parquet(path)


def test_a_model_fine_tuned_under_one_set_of_weights_is_refused_under_another_naming_both(settings):
    policy = _models(settings)[0]
    _fine_tuned(settings, policy)
    assert check_class_weights(settings, policy) == PAPER  # the settings' own: read
    other = dataclasses.replace(settings, train=dataclasses.replace(settings.train, class_weights=(1.0, 1.0, 1.0)))
    with pytest.raises(StalePairError) as info:
        check_class_weights(other, policy)
    line = str(info.value)
    assert "\n" not in line and "fine-tuned with class weights [2, 10, 1]" in line, line
    assert "train.class_weights is now [1, 1, 1]" in line, line
    assert f"re-materialize {policy.variant.name}_adapter partition {policy.key}" in line, line


def test_an_adapter_that_records_no_weights_is_refused_and_a_rule_has_none(settings):
    policy = _models(settings)[0]
    _fine_tuned(settings, policy, weights=None)
    with pytest.raises(StalePairError, match="records no class weights"):
        trained_class_weights(settings, policy)
    rule = next(p for p in run_policies(settings) if not trained([p.variant.name]))
    assert trained_class_weights(settings, rule) is None and predictions_class_weights(settings, rule) is None


def test_predictions_carry_their_models_weights_and_are_checked_on_read(settings):
    policy = _models(settings)[0]
    _fine_tuned(settings, policy)
    with pytest.raises(StalePairError, match="record no class weights"):
        predictions_class_weights(settings, policy)  # predictions of an older version
    _carried(settings, policy, PAPER)
    assert predictions_class_weights(settings, policy) == PAPER
    _fine_tuned(settings, policy, (1.0, 5.0, 1.0))  # the adapter re-fine-tuned under other weights since
    with pytest.raises(StalePairError) as info:
        predictions_class_weights(settings, policy)
    assert "carry class weights [2, 10, 1], its model was trained with [1, 5, 1]" in str(info.value)


def test_the_runs_weights_are_the_one_vector_its_predictions_carry(settings):
    first, second = _models(settings)[:2]
    assert run_class_weights(settings) == PAPER  # nothing predicted yet: the settings'
    weights = (1.0, 4.0, 1.0)
    for policy in (first, second):
        _fine_tuned(settings, policy, weights)
        _carried(settings, policy, weights)
    assert run_class_weights(settings) == weights  # the predictions', not the settings' (2, 10, 1)
    _fine_tuned(settings, second, PAPER)
    _carried(settings, second, PAPER)
    with pytest.raises(ValueError, match="more than one set of class weights"):
        run_class_weights(settings)
