"""A foundation and an adapter trained for a few steps on the tokenized warehouse (``tokenized_once``): a byte flipped
with the mtime put back is refused on load in one line naming the file and the fix (a damaged foundation is called
damaged, and its fix is the foundation itself, never re-fine-tuning the adapters on it); the predictions' model pins
are relative to the warehouse, so a copy whose model was replaced is refused while the original still passes, and
pins an older version wrote with absolute paths are read by their part under the warehouse they were written in."""

from __future__ import annotations

import dataclasses
import json
import shutil

import polars as pl
import pytest
from lightning.pytorch.callbacks import Callback

from kinematic_pipeline.model_pins import check_pair, check_predictions_model, model_files, model_files_frame
from kinematic_pipeline.pins import StalePairError
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.tasks.buy_sell_hold import BuySellHold
from kinematic_pipeline.training.run import finetune, load_classifier, load_foundation, pretrain, save_foundation
from kinematic_pipeline.warehouse.layout import PREDICTION_MODEL
from kinematic_pipeline.warehouse.verified import CorruptFileError, without_sidecars, write_model_manifest
from kinematic_pipeline_tests.conftest import TOKENIZED_FOLD, copy_warehouse
from kinematic_pipeline_tests.unit.test_verified_files import flip_keeping_mtime

pytestmark = pytest.mark.slow  # trains two models (seconds each on the tiny budget, but torch and Lightning load)

POLICY = Policy("splinegpt", BuySellHold(0.01), 1234, TOKENIZED_FOLD)


@pytest.fixture(scope="module")
def trained(tokenized_once, tmp_path_factory):
    """A copy of the tokenized warehouse with the foundation and adapter of ``POLICY`` (8 steps each) and the model
    pin its predictions write (``predictions/model/``)."""
    settings = copy_warehouse(tokenized_once, tmp_path_factory.mktemp("pins"))
    train = dataclasses.replace(
        settings.train, pretrain_steps=8, finetune_steps=8, eval_every=4, patience=0, max_windows_per_epoch=256
    )
    settings = dataclasses.replace(settings, train=train)
    pretrain(settings, POLICY, progress=False)
    finetune(settings, POLICY, progress=False)
    wh = settings.warehouse
    wh.write(model_files_frame(settings, POLICY), wh.predictions_extra(PREDICTION_MODEL, POLICY))
    load_classifier(settings, POLICY)
    check_predictions_model(settings, POLICY)
    return settings


def _copy(settings, folder):
    root = shutil.copytree(settings.warehouse.root, folder / "warehouse")  # copytree: copy2, the mtimes kept
    return dataclasses.replace(settings, warehouse=root)


def test_a_foundation_flipped_with_its_mtime_kept_is_called_damaged_and_its_fix_is_the_foundation(trained, tmp_path):
    settings = _copy(trained, tmp_path)
    model = settings.warehouse.foundation_checkpoint(POLICY)
    flip_keeping_mtime(model)
    fix = f"re-materialize splinegpt_foundation partition {POLICY.fit_key}"
    for load in (load_classifier, lambda s, p: check_pair(s.warehouse, p)):
        with pytest.raises(CorruptFileError) as info:
            load(settings, POLICY)
        line = str(info.value)
        assert "\n" not in line and str(model) in line and "damaged" in line and fix in line, line
        assert "was retrained" not in line and "splinegpt_adapter" not in line.split(fix)[0], line


def test_an_adapter_flipped_with_its_mtime_kept_is_refused_naming_the_file_and_the_adapter(trained, tmp_path):
    settings = _copy(trained, tmp_path)
    weights = settings.warehouse.adapter_dir(POLICY) / "adapter" / "adapter_model.safetensors"
    flip_keeping_mtime(weights)
    with pytest.raises(CorruptFileError) as info:
        load_classifier(settings, POLICY)
    line = str(info.value)
    assert "\n" not in line and str(weights) in line and "is not the file its manifest records" in line, line
    assert line.endswith(f"re-materialize splinegpt_adapter partition {POLICY.key}"), line


def test_a_copied_warehouse_checks_its_own_model_files(trained, tmp_path):
    pins = pl.read_parquet(trained.warehouse.predictions_extra(PREDICTION_MODEL, POLICY))
    assert pins.height == len(model_files(trained, POLICY)) and not any(p.startswith("/") for p in pins["path"])
    copy = _copy(trained, tmp_path)
    check_predictions_model(copy, POLICY)  # the copy's files are the same bytes
    weights = copy.warehouse.adapter_dir(POLICY) / "adapter" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[::-1])  # replaced in the copy only
    fix = f"re-materialize splinegpt_predictions partition {POLICY.key}"
    with pytest.raises(StalePairError, match=rf"made by {weights} sha256 .*, it is now .*: {fix}$"):
        check_predictions_model(copy, POLICY)
    check_predictions_model(trained, POLICY)  # the original still passes

    # pins an older version wrote: absolute paths of the warehouse they were written in
    old = pins.with_columns((str(trained.warehouse.root) + "/" + pl.col("path")).alias("path"))
    old.write_parquet(copy.warehouse.predictions_extra(PREDICTION_MODEL, POLICY))
    with pytest.raises(StalePairError, match=rf"made by {weights} sha256"):  # the copy's file, not the original's
        check_predictions_model(copy, POLICY)
    moved = _copy(trained, tmp_path / "moved")
    old.write_parquet(moved.warehouse.predictions_extra(PREDICTION_MODEL, POLICY))
    check_predictions_model(moved, POLICY)  # matched by their part under the old root
    elsewhere = old.with_columns(pl.lit("/elsewhere/model.bin").alias("path"))
    elsewhere.write_parquet(moved.warehouse.predictions_extra(PREDICTION_MODEL, POLICY))
    with pytest.raises(StalePairError, match=r"record /elsewhere/model.bin, outside this warehouse"):
        check_predictions_model(moved, POLICY)


def test_predictions_under_other_class_weights_than_the_adapters_are_refused_naming_both(trained, tmp_path):
    from kinematic_pipeline.stages.predict import materialize_predictions
    from kinematic_pipeline.warehouse import PREDICTIONS

    settings = _copy(trained, tmp_path)
    other = dataclasses.replace(settings, train=dataclasses.replace(settings.train, class_weights=(1.0, 1.0, 1.0)))
    with pytest.raises(StalePairError) as info:
        materialize_predictions(other, POLICY)
    line = str(info.value)
    assert "fine-tuned with class weights [2, 10, 1]" in line and "is now [1, 1, 1]" in line, line
    assert line.endswith("(or restore train.class_weights)") and "splinegpt_adapter partition" in line, line
    assert not settings.warehouse.evaluation_file(PREDICTIONS, POLICY).exists()  # refused before a row is written


class _RetrainFoundationMidway(Callback):
    """Another run's retraining, played at the first training batch's end: the foundation the adapter is being
    fine-tuned from is replaced (new weights, a files.json that vouches for them)."""

    def __init__(self, settings):
        self.settings, self.done = settings, False

    def on_train_batch_end(self, *args, **kwargs):
        if self.done:
            return
        self.done = True
        path = self.settings.warehouse.foundation_checkpoint(POLICY)
        state = {k: v + 0.01 for k, v in load_foundation(self.settings, POLICY, path).state_dict().items()}
        save_foundation(self.settings, POLICY.foundation, state, path)
        write_model_manifest(path.parent, [path])


def test_an_adapter_whose_foundation_was_replaced_while_it_trained_is_refused_not_pinned_to_the_new_one(
    trained, tmp_path
):
    settings = _copy(trained, tmp_path)
    foundation = settings.warehouse.foundation_checkpoint(POLICY)
    pin = settings.warehouse.adapter_dir(POLICY) / "foundation.json"
    pinned = pin.read_bytes()
    with pytest.raises(StalePairError, match=r"model\.pt changed while splinegpt_adapter partition .* retry"):
        finetune(settings, POLICY, progress=False, callbacks=[_RetrainFoundationMidway(settings)])
    assert pin.read_bytes() == pinned  # the earlier, true pin stands; nothing vouches for the new pair
    with pytest.raises(StalePairError):
        check_pair(settings.warehouse, POLICY)  # the old adapter and the new foundation: refused as before
    assert foundation.exists()


def test_predictions_whose_model_files_changed_while_they_were_made_are_refused_and_nothing_is_written(
    trained, tmp_path, monkeypatch
):
    from kinematic_pipeline.stages import predict

    settings = _copy(trained, tmp_path)
    pin = settings.warehouse.predictions_extra(PREDICTION_MODEL, POLICY)
    pinned = pin.read_bytes()
    adapter = next(p for p in model_files(settings, POLICY) if "adapter" in str(p.relative_to(settings.warehouse.root)))

    class RetrainedMeanwhile:  # a predictor during whose work another run replaces the adapter
        def predictions(self, *args):
            flip_keeping_mtime(adapter)
            return None, None, None, None

    monkeypatch.setattr(predict, "predictor", lambda variant: RetrainedMeanwhile())
    monkeypatch.setattr(predict, "_check_test_period", lambda *args: [])
    with pytest.raises(StalePairError, match=r"changed while its predictions were made: retry"):
        predict.materialize_predictions(settings, POLICY)
    assert pin.read_bytes() == pinned  # the last pin stands: no record vouches for predictions never written


@pytest.mark.parametrize("alpha", [1e6, float("nan")])
def test_an_adapter_recording_an_absurd_lora_alpha_is_refused_naming_the_file_and_the_value(trained, tmp_path, alpha):
    settings = _copy(trained, tmp_path)
    adapter = settings.warehouse.adapter_dir(POLICY)
    config = adapter / "adapter" / "adapter_config.json"
    record = json.loads(config.read_text())
    config.write_text(json.dumps({**record, "lora_alpha": alpha}))
    write_model_manifest(adapter, without_sidecars(POLICY.variant.head.files(adapter)))  # its record agrees: only
    with pytest.raises(ValueError, match=rf"adapter_config\.json records lora_alpha={alpha!r} \(the settings' 8\)"):
        load_classifier(settings, POLICY)  # the value itself can refuse it
