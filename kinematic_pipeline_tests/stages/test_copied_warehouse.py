"""A copied or moved warehouse traces its own files (issue 40, item 2): the features' ``inputs.parquet``, the
predictions' ``inputs``, a training run's ``shards_used.parquet`` and the provenance record every path relative to
the warehouse root, and each reader resolves them against the current one: lineage in a copy hashes the copy's
files, so a shard changed in the copy is noticed while the original is untouched. Records an older version wrote
with absolute paths are read by their part under the warehouse they were written in, as the model pins are.

On the tokenized warehouse of ``conftest`` (single cut, tau 1%) with a momentum rule: its features, predictions and
backtests, no training.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

from kinematic_pipeline.lineage import trace
from kinematic_pipeline.model_pins import recorded_file
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.stages.backtests import EVALUATION_SCHEMAS, materialize_backtests
from kinematic_pipeline.stages.features import materialize_features
from kinematic_pipeline.stages.predict import materialize_predictions
from kinematic_pipeline.tasks.buy_sell_hold import BuySellHold
from kinematic_pipeline.tokenizations import RAW
from kinematic_pipeline.warehouse import PROVENANCE, RAW_OHLCV
from kinematic_pipeline.warehouse.atomic import file_sha256
from kinematic_pipeline.warehouse.catalog import query
from kinematic_pipeline.warehouse.layout import PREDICTION_INPUTS
from kinematic_pipeline_tests.conftest import TOKENIZED_FOLD, copy_warehouse

pytestmark = pytest.mark.slow  # ~40 s (a rule evaluated, copied and moved four times): the nightly lane

RULE = Policy("momentum_1d", BuySellHold(0.01), 0, TOKENIZED_FOLD)
CODE = {"kinematic_pipeline": "test"}


@pytest.fixture(scope="module")
def evaluated(tokenized_once, tmp_path_factory):
    """A copy of the tokenized warehouse with the rule's features, predictions and backtests."""
    settings = copy_warehouse(tokenized_once, tmp_path_factory.mktemp("copied"))
    materialize_features(settings, RAW, progress=False)
    materialize_predictions(settings, RULE)
    materialize_backtests(settings, RULE, CODE)
    return settings


def _records(settings) -> list[Path]:
    """The files that record paths: the features' inputs, the predictions' inputs, the provenance."""
    wh = settings.warehouse
    return [
        wh.features_inputs_file("raw"),
        wh.predictions_extra(PREDICTION_INPUTS, RULE),
        wh.evaluation_file(PROVENANCE, RULE),
    ]


def _absolute(path: Path, root: Path, rows: pl.Expr | None = None) -> None:
    """Rewrite the record ``path`` (its ``rows``, default all) as an older version wrote it: absolute paths of the
    warehouse at ``root``."""
    frame = pl.read_parquet(path)
    named = (pl.col("path") != "") & (pl.lit(True) if rows is None else rows)  # a provenance's code rows name no file
    prefixed = pl.when(named).then(pl.lit(f"{root}/") + pl.col("path")).otherwise(pl.col("path"))
    frame.with_columns(prefixed.alias("path")).write_parquet(path)


def _ticker(settings) -> str:
    return query(settings.warehouse, "SELECT min(ticker) AS t FROM backtests")["t"][0]


def _change_a_raw_day(settings) -> Path:
    """Rewrite, in ``settings``' warehouse only, the last raw_ohlcv day the rule's predictions read."""
    inputs = pl.read_parquet(settings.warehouse.predictions_extra(PREDICTION_INPUTS, RULE)).filter(
        pl.col("asset") == RAW_OHLCV
    )
    path = settings.warehouse.shard(RAW_OHLCV, inputs["date"][-1])  # by its day: the record may be an old one
    pl.read_parquet(path).head(1).write_parquet(path)
    return path


def _notices(settings, path: Path) -> bool:
    report = trace(settings, RULE, _ticker(settings))
    return not report.ok and any(f"hash mismatch: {path} " in p for p in report.problems)


def test_every_recorded_path_is_relative_and_a_copy_traces_its_own_files(evaluated, tmp_path):
    for record in _records(evaluated):
        paths = [p for p in pl.read_parquet(record)["path"] if p]
        assert paths and not any(Path(p).is_absolute() for p in paths), record
    copy = copy_warehouse(evaluated, tmp_path)
    assert trace(copy, RULE, _ticker(copy)).ok
    changed = _change_a_raw_day(copy)
    assert _notices(copy, changed)  # the copy's file is hashed, not the original's
    assert trace(evaluated, RULE, _ticker(evaluated)).ok  # and the original is untouched


def test_features_inputs_an_older_version_wrote_absolute_are_recorded_relative_to_the_copy(evaluated, tmp_path):
    copy = copy_warehouse(evaluated, tmp_path)
    _absolute(copy.warehouse.features_inputs_file("raw"), evaluated.warehouse.root)  # written in the original
    materialize_predictions(copy, RULE)  # the rule's predictions and backtests re-made in the copy
    materialize_backtests(copy, RULE, CODE)
    for record in _records(copy)[1:]:
        assert not any(Path(p).is_absolute() for p in pl.read_parquet(record)["path"] if p), record
    assert trace(copy, RULE, _ticker(copy)).ok
    changed = _change_a_raw_day(copy)
    assert _notices(copy, changed)
    assert trace(evaluated, RULE, _ticker(evaluated)).ok


def test_predictions_inputs_and_provenance_an_older_version_wrote_absolute_resolve_into_the_copy(evaluated, tmp_path):
    copy = copy_warehouse(evaluated, tmp_path / "copy")
    wh = copy.warehouse
    _absolute(wh.predictions_extra(PREDICTION_INPUTS, RULE), evaluated.warehouse.root)
    materialize_backtests(copy, RULE, CODE)  # the provenance, from the predictions' old record
    assert not any(Path(p).is_absolute() for p in pl.read_parquet(wh.evaluation_file(PROVENANCE, RULE))["path"] if p)
    # a provenance an older version wrote in the copy: the inputs the predictions recorded absolute, as they were
    inputs = pl.col("link").is_in(["features", "window_store", "test_shard", "raw_ohlcv"])
    _absolute(wh.evaluation_file(PROVENANCE, RULE), evaluated.warehouse.root, inputs)
    wh.refresh_view(PROVENANCE, EVALUATION_SCHEMAS[PROVENANCE])
    assert trace(copy, RULE, _ticker(copy)).ok
    moved = copy_warehouse(copy, tmp_path / "moved")  # records of a warehouse whose original is gone
    shutil.rmtree(wh.root)
    assert trace(moved, RULE, _ticker(moved)).ok
    changed = _change_a_raw_day(moved)
    assert _notices(moved, changed)
    assert trace(evaluated, RULE, _ticker(evaluated)).ok


def test_what_a_training_run_was_served_is_recorded_relative_and_resolves_in_a_moved_warehouse(evaluated, tmp_path):
    from kinematic_pipeline.training.data import WindowDataModule, write_shards_used

    copy = copy_warehouse(evaluated, tmp_path / "copy")
    policy = Policy("splinegpt", BuySellHold(0.01), 1234, TOKENIZED_FOLD)
    served = WindowDataModule(copy, policy).shards_used(steps=1, evaluations=1)
    path = write_shards_used(copy, copy.warehouse.adapter_dir(policy), served)
    used = pl.read_parquet(path)
    assert set(used["asset"]) == {"spline_window_store", "spline_tokens", "labels"}
    assert not any(Path(p).is_absolute() for p in used["path"])
    for absolute in (False, True):  # as written now, and as an older version wrote it in the copy
        if absolute:
            _absolute(path, copy.warehouse.root)
        moved = copy_warehouse(copy, tmp_path / f"moved{absolute}")
        rows = pl.read_parquet(moved.warehouse.shards_used(moved.warehouse.adapter_dir(policy)))
        for row in rows.iter_rows(named=True):
            file = recorded_file(moved.warehouse, row["asset"], row["date"], row["path"])
            assert file.is_relative_to(moved.warehouse.root), row
            assert file_sha256(file) == row["content_hash"], row
