"""The baselines beside the models: decision-time features (against a loop twin), the rules by hand, and the
probes on a universe with a strong latent drift, between the base rates and the informed ceiling; a probe's fit
does not move when bars after the cut change, and the same inputs give the same fit."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math

import numpy as np
import polars as pl
import pytest
from scipy.stats import norm

from kinematic_pipeline.backtest.skill import base_rates
from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.config import load_settings
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.stages.baselines import materialize_probe
from kinematic_pipeline.stages.features import materialize_features
from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv
from kinematic_pipeline.stages.labels import materialize_labels
from kinematic_pipeline.stages.tokenize import materialize_tokens
from kinematic_pipeline.stages.window_store import materialize_window_store
from kinematic_pipeline.tasks.actions import BUY, HOLD, SELL, SOFTMAX_COLUMNS, unweighted_probabilities
from kinematic_pipeline.tasks.buy_sell_hold import BuySellHold, tau_column
from kinematic_pipeline.tokenizations import SPLINE, TOKENIZATIONS
from kinematic_pipeline.tokenizations.base import N_LAST
from kinematic_pipeline.tokenizations.raw import raw_extras
from kinematic_pipeline.variants import variant as lookup_variant
from kinematic_pipeline.warehouse.atomic import file_sha256
from kinematic_pipeline_tests.helpers.predictions import baseline_predictions

# --- the features, against loops -------------------------------------------------------------------------


def slow_token_features(window: np.ndarray) -> list[float]:
    """One window [64, 9] the obvious way: the last five tokens, c0 and c~0 minus the first token's, then the
    population std of each channel over the 64 tokens."""
    out = []
    for k in range(64 - N_LAST, 64):
        for c in range(9):
            value = float(window[k, c])
            if c in (0, 4):
                value -= float(window[0, c])
            out.append(value)
    for c in range(9):
        column = [float(window[k, c]) for k in range(64)]
        mean = sum(column) / 64
        out.append(math.sqrt(sum((x - mean) ** 2 for x in column) / 64))
    return out


def test_token_features_equal_the_loop_twin():
    rng = np.random.default_rng(3)
    tokens = rng.normal(size=(7, 64, 9)).astype(np.float32) + np.arange(9, dtype=np.float32)
    columns = SPLINE.features(tokens)
    fast = np.stack(list(columns.values()), axis=1)
    assert tuple(columns) == SPLINE.token_features and fast.shape == (7, 54) and fast.dtype == np.float32
    for i in range(7):
        np.testing.assert_allclose(fast[i], slow_token_features(tokens[i]), rtol=1e-5, atol=1e-5)


def test_raw_extras_are_the_last_return_20_day_volatility_and_20_day_return():
    rng = np.random.default_rng(4)
    log_close = np.cumsum(rng.normal(0, 0.02, size=(3, 65)), axis=1)
    tokens = np.zeros((3, 64, 9))
    tokens[:, :, 0] = log_close[:, 1:]  # raw token k: the knot at its right end and its first difference
    tokens[:, :, 1] = np.diff(log_close, axis=1)
    extras = raw_extras(tokens)
    for i in range(3):
        returns = [log_close[i, k] - log_close[i, k - 1] for k in range(45, 65)]
        mean = sum(returns) / 20
        assert extras[i, 0] == pytest.approx(log_close[i, 64] - log_close[i, 63])
        assert extras[i, 1] == pytest.approx(math.sqrt(sum((r - mean) ** 2 for r in returns) / 19))
        assert extras[i, 2] == pytest.approx(log_close[i, 64] - log_close[i, 44])


def test_momentum_rules_and_always_hold_by_hand():
    frame = pl.DataFrame({"ret1": [0.02, -0.02, 0.005, None], "ret20": [-0.5, 0.5, 0.0, 0.011]})
    assert lookup_variant("momentum_1d").actions(frame, 0.01).tolist() == [BUY, SELL, HOLD, HOLD]
    assert lookup_variant("momentum_20d").actions(frame, 0.01).tolist() == [SELL, BUY, HOLD, BUY]
    assert lookup_variant("always_hold").actions(frame, 0.01).tolist() == [HOLD] * 4
    assert not hasattr(lookup_variant("lr_trivial"), "actions")  # a probe states probabilities; only a rule acts


# --- probes on a universe with a strong latent drift ------------------------------------------------------

START, END = dt.date(2019, 1, 2), dt.date(2020, 6, 30)
CUT = dt.date(2020, 1, 31)
TAU, NOISE = 0.01, 0.01  # the next-day return is drift + N(0, NOISE^2): the drift is known to the ceiling
N_TICKERS = 24


def drift_universe(seed: int = 0) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Bars whose next-day log return is a persistent drift v_t (AR(1), phi 0.97, sd 1.5%) plus noise, and the
    drift itself (ticker, date, drift): the informed policy's knowledge."""
    rng = np.random.default_rng(seed)
    days = trading_days(START, END)
    bars, truth = [], []
    for i in range(N_TICKERS):
        v = np.zeros(len(days))
        for t in range(1, len(days)):
            v[t] = 0.97 * v[t - 1] + rng.normal(0, 0.015 * math.sqrt(1 - 0.97**2))
        log_close = np.log(50.0) + np.concatenate([[0.0], np.cumsum(v[:-1] + rng.normal(0, NOISE, len(days) - 1))])
        close = np.exp(log_close)
        ticker = f"T{i:02d}"
        bars.append(
            pl.DataFrame(
                {
                    "ticker": ticker,
                    "date": days,
                    "open": close,
                    "high": close * 1.01,
                    "low": close * 0.99,
                    "close": close,
                    "volume": rng.integers(100_000, 200_000, len(days)).astype(np.float64),
                }
            )
        )
        truth.append(pl.DataFrame({"ticker": ticker, "date": days, "drift": v}))
    return pl.concat(bars), pl.concat(truth)


def _warehouse(tmp_path, name: str, bars: pl.DataFrame):
    path = tmp_path / f"{name}.parquet"
    bars.write_parquet(path)
    settings = load_settings(
        "ci", source="parquet", source_path=str(path), warehouse=tmp_path / name, start_date=START, end_date=END, env={}
    )
    settings = dataclasses.replace(
        settings,
        split=dataclasses.replace(
            settings.split, train_end=CUT, folds=1
        ),  # the single cut (fold None): one store prefix
        tokenize=dataclasses.replace(settings.tokenize, label_source="close"),
    )
    days = trading_days(START, END)
    materialize_raw_ohlcv(settings, days, progress=False)
    materialize_tokens(settings, days, progress=False)
    materialize_labels(
        settings, [d for d in days if settings.warehouse.shard("spline_tokens", d).exists()], progress=False
    )
    for tok in TOKENIZATIONS.values():
        materialize_window_store(settings, tok, progress=False)
        materialize_features(settings, tok, progress=False)
    return settings


@pytest.fixture(scope="module")
def drift_warehouse(tmp_path_factory):
    bars, truth = drift_universe()
    return _warehouse(tmp_path_factory.mktemp("drift"), "w", bars), truth


def _log_loss(p: np.ndarray, y: np.ndarray) -> float:
    return float(-np.mean(np.log(np.clip(p[np.arange(y.size), y], 1e-12, 1.0))))


@pytest.mark.slow
def test_every_probe_lies_between_the_base_rates_and_the_informed_ceiling(drift_warehouse):
    settings, truth = drift_warehouse
    weights = settings.train.class_weights
    test = baseline_predictions(
        settings, Policy("always_hold", BuySellHold(TAU), 0, settings.folds[0]), "test", None
    ).filter(pl.col("label") >= 0)
    y = test["label"].to_numpy()
    train_labels = pl.read_parquet(settings.warehouse.features_file("raw", "training"))
    reference = base_rates(train_labels[tau_column(TAU)].drop_nulls().to_numpy())
    base_loss = _log_loss(np.tile(reference, (y.size, 1)), y)
    # the informed ceiling: the true next-day return is drift + N(0, NOISE^2), so its class probabilities are exact
    drift = test.join(truth, on=["ticker", "date"], how="left")["drift"].to_numpy()
    p_buy, p_sell = norm.sf((TAU - drift) / NOISE), norm.cdf((-TAU - drift) / NOISE)
    ceiling = 1 - _log_loss(np.stack([p_buy, p_sell, 1 - p_buy - p_sell], axis=1), y) / base_loss
    assert ceiling > 0.15  # the universe is strongly predictable
    for variant in ("lr_spline", "lr_fd", "lr_raw", "lr_trivial", "lightgbm_spline", "lightgbm_trivial"):
        policy = Policy(variant, BuySellHold(TAU), 0, settings.folds[0])
        materialize_probe(settings, policy)
        rows = baseline_predictions(settings, policy, "test", None).filter(pl.col("label") >= 0)
        assert rows.select("ticker", "date").equals(test.select("ticker", "date"))
        p = rows.select("p_buy", "p_sell", "p_hold").to_numpy()  # stored de-weighted
        np.testing.assert_array_equal(p, unweighted_probabilities(rows.select(SOFTMAX_COLUMNS).to_numpy(), weights))
        skill = 1 - _log_loss(p, y) / base_loss
        assert 0.02 < skill < ceiling, (variant, skill, ceiling)


@pytest.mark.slow
def test_a_probe_fit_ignores_bars_after_the_cut_and_is_deterministic(drift_warehouse, tmp_path):
    settings, _ = drift_warehouse
    bars, _ = drift_universe()
    later = pl.col("date") > CUT + dt.timedelta(days=7)  # the last training labels read the first bars after the cut
    moved = bars.with_columns(
        *[pl.when(later).then(pl.col(c) * 1.3).otherwise(pl.col(c)).alias(c) for c in ("open", "high", "low", "close")]
    )
    other = _warehouse(tmp_path, "moved", moved)
    # the training rows' features are the same bytes; the test rows' are not (so a probe pins only the former)
    for part, same in (("training", True), ("test", False)):
        hashes = {file_sha256(s.warehouse.features_file("spline", part)) for s in (settings, other)}
        assert (len(hashes) == 1) is same, part
    for variant in ("lr_trivial", "lightgbm_spline"):
        policy = Policy(variant, BuySellHold(TAU), 0, settings.folds[0])
        fits = [materialize_probe(s, policy).fit for s in (settings, other, settings)]
        same = [{k: v for k, v in f.items() if k != "features_sha256"} for f in fits]  # no wall time to drop
        assert same[0] == same[1] == same[2]
        a, b = (json.loads(s.warehouse.probe_dir(policy).joinpath("fit.json").read_text()) for s in (settings, other))
        assert a["mean"] == b["mean"] and a["train_days"] == b["train_days"]
        val = [baseline_predictions(s, policy, "validation", None) for s in (settings, other)]
        assert val[0].equals(val[1])


@pytest.mark.slow
def test_an_unchanged_probe_refit_writes_the_same_bytes(drift_warehouse):
    """A refit on unchanged inputs leaves the pinned record and the model byte for byte as they were (what the
    predictions pin: nothing downstream is stale); its wall time lives in an unpinned sidecar beside them."""
    settings, _ = drift_warehouse
    for variant in ("lr_trivial", "lightgbm_spline"):
        policy = Policy(variant, BuySellHold(TAU), 0, settings.folds[0])
        fit = materialize_probe(settings, policy)
        pinned = settings.warehouse.probe_files(policy)  # what the predictions pin (model_pins.model_files)
        assert [p.name for p in pinned] == [fit.fit["model_file"], "fit.json"]
        first = {p.name: p.read_bytes() for p in pinned}
        again = materialize_probe(settings, policy)
        assert {p.name: p.read_bytes() for p in pinned} == first, variant
        record = json.loads(first["fit.json"])
        assert not [k for k in record if "seconds" in k or "time" in k], record  # no wall time in the record
        timing = json.loads((fit.folder / "fit_timing.json").read_text())  # the sidecar: the last fit's seconds
        assert timing == again.timing and again.metadata()["fit_seconds"] == timing["fit_seconds"] >= 0
