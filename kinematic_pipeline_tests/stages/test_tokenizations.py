"""A tokenization is an object: a tiny one defined here alone (no package file edited) runs through the stages,
and the run's tokenizations are a setting that refuses a variant reading tokens it does not compute."""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass

import numpy as np
import polars as pl
import pytest

from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.stages.corpus import fit_corpus_stats
from kinematic_pipeline.stages.features import materialize_features
from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv
from kinematic_pipeline.stages.tokenize import materialize_tokens
from kinematic_pipeline.stages.window_store import materialize_window_store
from kinematic_pipeline.tokenizations import (
    FD,
    RAW,
    SPLINE,
    TOKENIZATIONS,
    Channel,
    Tokenization,
    chosen,
    register,
    tokenization,
)
from kinematic_pipeline.variants import VARIANTS
from kinematic_pipeline.warehouse import layout
from kinematic_pipeline.window_store import open_store
from kinematic_pipeline_tests.conftest import END, START, _bars, _settings


@dataclass(frozen=True)
class Levels(Tokenization):
    """Two channels per token: ln close at the token's right knot (anchored) and ln volume (z-scored); no kernel."""

    def tokenize(self, windows, alphas, workspace=None):
        out = self._out(workspace, len(windows.tickers))
        out[:, :, 0] = np.nan_to_num(windows.log_price[:, 1:])
        out[:, :, 1] = np.nan_to_num(windows.log_volume)
        return out, {}


LEVELS = Levels(
    name="levels",
    channels=(Channel("y", "log close", "anchor"), Channel("v", "log volume")),
    description="ln close and ln volume, as they are",
    called="levels",
)


@pytest.fixture
def levels(monkeypatch):
    """LEVELS registered for one test; its token asset a day unit of the warehouse, as the package's are when the
    layout is imported (``warehouse.layout.DAY_UNITS``)."""
    tok = register(LEVELS)
    monkeypatch.setitem(
        layout.DAY_UNITS, tok.tokens_asset, {tok.tokens_asset: "tokens.parquet", "manifest": "manifest.parquet"}
    )
    monkeypatch.setitem(layout.UNIT_OF, tok.tokens_asset, tok.tokens_asset)
    yield tok
    del TOKENIZATIONS[tok.name]


def _settings_with(tmp_path, toks: tuple[str, ...]):
    """The ci settings over ``_bars(2)``, computing ``toks``, evaluating only SplineGPT (it reads spline tokens)."""
    settings = _settings(tmp_path, "wh", _bars(2))
    return dataclasses.replace(
        settings,
        tokenize=dataclasses.replace(settings.tokenize, tokenizations=toks),
        train=dataclasses.replace(settings.train, variants=("splinegpt",)),
        evaluate=dataclasses.replace(settings.evaluate, baselines=()),
    )


def test_a_tokenization_defined_in_a_test_runs_through_the_stages(tmp_path, levels):
    settings = _settings_with(tmp_path, ("spline", "levels"))
    assert chosen(settings.tokenize.tokenizations) == (SPLINE, levels)
    days = trading_days(START, END)
    materialize_raw_ohlcv(settings, days, progress=False)
    summaries = materialize_tokens(settings, days, (levels,), progress=False)
    assert set(summaries) == {"levels_tokens"} and summaries["levels_tokens"].manifest["alpha_price"][0] == ""
    shard = pl.read_parquet(settings.warehouse.shard("levels_tokens", days[-1]))
    assert shard.schema["tokens"] == pl.Array(pl.Float32, (64, 2)) and "end_position" not in shard.columns

    materialize_window_store(settings, levels, progress=False)
    store = open_store(settings, levels)
    tokens = store.read(np.arange(store.rows.height))  # the training period's windows [n, 64, 2]
    assert tokens.shape[1:] == (64, 2) and store.window_bytes == 64 * 2 * 4
    stats = fit_corpus_stats(settings, levels)  # one row per fold: the one z-scored channel
    assert stats["tokenization"].to_list() == ["levels"] and stats["channel_name"].to_list() == ["v"]
    assert stats["mean"][0] == pytest.approx(tokens[:, :, 1].astype(np.float64).mean(), rel=1e-9)

    normalized = levels.normalize(tokens, stats)
    np.testing.assert_array_equal(normalized[:, :, 0], tokens[:, :, 0] - tokens[:, :1, 0])  # anchored
    np.testing.assert_allclose(normalized[:, :, 1].mean(), 0.0, atol=1e-4)  # z-scored on these very windows
    assert levels.normalizer(None, channels=(1,))(tokens).shape == (len(tokens), 64, 1)
    with pytest.raises(ValueError, match="levels_corpus_stats"):
        levels.normalizer(None)

    features = levels.features(tokens)
    assert tuple(features) == levels.token_features == levels.feature_sets["levels"]
    assert len(features) == 5 * 2 + 2 and features["t63_c0"][0] == tokens[0, 63, 0] - tokens[0, 0, 0]
    summary = materialize_features(settings, levels, progress=False)
    training = pl.read_parquet(summary.path)
    assert summary.tokenization == "levels" and set(levels.token_features) <= set(training.columns)


def test_the_three_tokenizations_own_their_names_and_channels():
    assert tuple(TOKENIZATIONS) == ("spline", "fd", "raw") and tokenization("fd") is FD
    for tok in (SPLINE, FD, RAW):
        assert (tok.tokens_asset, tok.corpus_stats_asset) == (f"{tok.name}_tokens", f"{tok.name}_corpus_stats")
        assert (tok.window_store_asset, tok.features_asset) == (f"{tok.name}_window_store", f"{tok.name}_features")
        assert tok.anchored == (0, 4) and tok.zscored == (1, 2, 3, 5, 6, 7, 8)
    assert tuple(RAW.features(np.zeros((1, 64, 9), np.float32)))[-3:] == ("ret1", "vol20", "ret20")
    assert RAW.feature_sets["trivial"] == ("ret1", "vol20") and "end_position" in SPLINE.shard_schema
    assert {v.tokenization for v in VARIANTS.values()} == {SPLINE, FD, RAW}


def test_an_unknown_or_taken_name_and_a_variant_reading_tokens_not_computed_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown tokenization 'haar': expected one of spline, fd, raw"):
        tokenization("haar")
    with pytest.raises(ValueError, match="'spline' is registered already"):
        register(SPLINE)
    settings = _settings_with(tmp_path, ("spline",))
    with pytest.raises(ValueError, match="must hold 'spline'"):
        dataclasses.replace(settings.tokenize, tokenizations=("fd", "raw"))
    with pytest.raises(
        ValueError, match=r"variant rawgpt_fd reads the fd tokens, which tokenize.tokenizations=\('spline',\)"
    ):
        dataclasses.replace(settings, train=dataclasses.replace(settings.train, variants=("splinegpt", "rawgpt_fd")))


def test_every_profile_computes_the_three_tokenizations_in_the_papers_order():
    from kinematic_pipeline.config import load_settings

    for profile in ("ci", "demo"):
        settings = load_settings(profile, env={}, start_date=dt.date(2021, 1, 4), end_date=dt.date(2021, 7, 30))
        assert chosen(settings.tokenize.tokenizations) == (SPLINE, FD, RAW)


def test_the_baselines_by_default_are_those_of_the_tokenizations_the_run_computes(tmp_path):
    from kinematic_pipeline.config import load_settings
    from kinematic_pipeline.variants import BASELINE_NAMES

    settings = _settings_with(tmp_path, ("spline", "raw"))
    default = dataclasses.replace(settings, evaluate=dataclasses.replace(settings.evaluate, baselines=None))
    no_fd = [n for n in BASELINE_NAMES if not n.endswith("_fd")]  # a tokenization not computed adds no probe
    assert list(default.evaluate.baselines) == no_fd and len(no_fd) == len(BASELINE_NAMES) - 2
    assert load_settings("ci", warehouse=tmp_path / "ci", env={}).evaluate.baselines == BASELINE_NAMES
