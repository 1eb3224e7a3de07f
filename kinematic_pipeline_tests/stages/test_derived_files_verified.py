"""Derived files are read with their hash: the features files and the corpus statistics each have the sha256 of the
bytes written beside them (``<file>.sha256``), and one bit flipped with the mtime put back is refused at the next
read, naming the file and the asset to re-materialize (it used to change predictions silently)."""

from __future__ import annotations

import dataclasses

import pytest

from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.pins import fold_stats
from kinematic_pipeline.stages.corpus import materialize_corpus_stats
from kinematic_pipeline.stages.features import materialize_features, read_features
from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv
from kinematic_pipeline.stages.labels import materialize_labels
from kinematic_pipeline.stages.tokenize import materialize_tokens
from kinematic_pipeline.stages.window_store import materialize_window_store
from kinematic_pipeline.tokenizations import SPLINE
from kinematic_pipeline.warehouse.verified import CorruptFileError
from kinematic_pipeline_tests.conftest import END, START, _bars, _settings
from kinematic_pipeline_tests.unit.test_verified_files import flip_keeping_mtime


def test_a_flipped_byte_in_the_features_or_the_corpus_statistics_is_refused_naming_the_file(tmp_path):
    settings = _settings(tmp_path, "wh", _bars(2))
    settings = dataclasses.replace(
        settings,
        tokenize=dataclasses.replace(settings.tokenize, tokenizations=("spline",)),
        train=dataclasses.replace(settings.train, variants=("splinegpt",)),
        evaluate=dataclasses.replace(settings.evaluate, baselines=("lr_spline",)),
    )
    days = trading_days(START, END)
    materialize_raw_ohlcv(settings, days, progress=False)
    materialize_tokens(settings, days, (SPLINE,), progress=False)
    materialize_labels(settings, days, progress=False)
    materialize_window_store(settings, SPLINE, progress=False)
    materialize_corpus_stats(settings, (SPLINE,))
    materialize_features(settings, SPLINE, progress=False)
    fold = settings.folds[0]
    read_features(settings, "lr_spline", fold, ("train",))  # as written: read
    fold_stats(settings, SPLINE, fold)

    wh = settings.warehouse
    features, stats = wh.features_file("spline", "training"), wh.corpus_stats_file("spline")
    flip_keeping_mtime(features)
    with pytest.raises(CorruptFileError, match=rf"{features}.*re-materialize spline_features"):
        read_features(settings, "lr_spline", fold, ("train",))
    flip_keeping_mtime(stats)
    with pytest.raises(CorruptFileError, match=rf"{stats}.*spline_corpus_stats"):
        fold_stats(settings, SPLINE, fold)
