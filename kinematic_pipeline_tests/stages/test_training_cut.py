"""KP_TRAIN_END moves the training cut with no code change: the test period, the corpus statistics and the
window store all follow it, and a cut that leaves no training or no test day is a clear error."""

from __future__ import annotations

import datetime as dt

import pytest

from kinematic_pipeline.calendar import trading_day_on_or_after
from kinematic_pipeline.config import load_settings
from kinematic_pipeline.folds import evaluation_days
from kinematic_pipeline.stages.corpus import fit_corpus_stats
from kinematic_pipeline.stages.window_store import materialize_window_store
from kinematic_pipeline.tokenizations import SPLINE
from kinematic_pipeline.window_store import open_store
from kinematic_pipeline_tests.conftest import END, START, _bars, _run_all


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    path = tmp_path_factory.mktemp("cut") / "bars.parquet"
    _bars().write_parquet(path)
    return path


def _settings(source, warehouse, cut: str):
    env = {"KP_TRAIN_END": cut, "KP_START_DATE": str(START), "KP_END_DATE": str(END)}
    return load_settings("ci", source="parquet", source_path=str(source), warehouse=warehouse, env=env)


@pytest.mark.slow
@pytest.mark.parametrize("cut", ["2021-05-28", "2021-06-30"])
def test_the_test_period_corpus_statistics_and_training_shards_follow_the_cut(source, tmp_path, cut):
    settings = _settings(source, tmp_path / "wh", cut)
    cut_day = dt.date.fromisoformat(cut)
    assert settings.split.train_end == cut_day
    _run_all(settings)
    test_days = evaluation_days(settings, "spline_tokens")
    assert test_days[0] == trading_day_on_or_after(cut_day + dt.timedelta(days=1)) and test_days[-1] == END
    materialize_window_store(settings, SPLINE, progress=False)
    stats = fit_corpus_stats(settings, SPLINE)
    assert stats["fit_end"].max() == cut_day  # the last session on or before the cut (both cuts are sessions)
    store = open_store(settings, SPLINE)
    assert store.days["date"].max() == cut_day and store.manifest["train_end"] == cut_day and min(test_days) > cut_day


@pytest.mark.parametrize(
    "cut, message",
    [
        ("2020-12-31", "leaves no training day: the history starts 2021-01-04"),
        ("2021-07-30", "leaves no test day: the history ends 2021-07-30"),
        ("2021/06/30", "KP_TRAIN_END='2021/06/30' is not an ISO date"),
    ],
)
def test_a_cut_without_a_training_or_a_test_day_is_an_error_naming_the_dates(source, tmp_path, cut, message):
    with pytest.raises(ValueError, match=message):
        _settings(source, tmp_path / "wh", cut)
