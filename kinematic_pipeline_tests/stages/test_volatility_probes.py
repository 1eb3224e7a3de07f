"""The probes as regressors of the volatility task (issue 53): the linear probe is a Gamma GLM on a log link (its fit
equal to statsmodels' on the same rows, the L2 penalty aside), LightGBM's gamma objective likewise fits QLIKE, and
through the real stages on a universe whose variance follows a known log-AR(1) process, the probes forecast next week's
variance in the task's schema, the trivial ones (vol20 and ret1) well below hindsight's best constant."""

from __future__ import annotations

import dataclasses
import datetime as dt

import numpy as np
import polars as pl
import pytest

from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.config import EvalConfig, load_settings
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.sources.synthetic import VOL_LEVEL, VOL_PERSISTENCE, VOL_SD, planted_forecast
from kinematic_pipeline.stages.baselines import materialize_probe
from kinematic_pipeline.stages.features import materialize_features
from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv
from kinematic_pipeline.stages.labels import materialize_labels
from kinematic_pipeline.stages.probe_learners import FitRows, fit_lightgbm, fit_logistic, gamma_loss
from kinematic_pipeline.stages.tokenize import materialize_tokens
from kinematic_pipeline.stages.window_store import materialize_window_store
from kinematic_pipeline.tasks.volatility import RealizedVariance
from kinematic_pipeline.tokenizations import TOKENIZATIONS
from kinematic_pipeline.variants import variant as lookup_variant
from kinematic_pipeline_tests.helpers.predictions import baseline_predictions


def _log_variance_rows(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x (n, 3), the true log variance (a linear function of x) and a noisy log RV: ln(sigma^2 chi2_5 / 5)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    log_var = -8.0 + x @ np.array([0.5, -0.3, 0.0])
    rv = np.exp(log_var) * rng.chisquare(5, n) / 5
    return x, log_var, np.log(rv)


def test_the_linear_probe_is_statsmodels_gamma_glm_on_a_log_link():
    import statsmodels.api as sm

    x, _, y = _log_variance_rows(4000, 1)
    rows = FitRows(x, y, x[:0], y[:0], None, 0, 1, "gamma")
    model, iterations = fit_logistic(rows, EvalConfig())
    glm = sm.GLM(np.exp(y), sm.add_constant(x), family=sm.families.Gamma(sm.families.links.Log())).fit()
    np.testing.assert_allclose(model.intercept[0], glm.params[0], atol=2e-3)
    np.testing.assert_allclose(model.coef[0], glm.params[1:], atol=2e-3)  # the penalty 1 / rows moves it little
    np.testing.assert_allclose(model.predict_log(x), sm.add_constant(x) @ glm.params, atol=5e-3)
    assert model.classes_.size == 0 and 0 < iterations < 20  # Newton steps: converged, far below max_iter


def test_the_tree_probe_fits_qlike_better_than_the_constant_and_near_the_truth():
    x, truth, y = _log_variance_rows(20_000, 2)
    xv, truth_v, yv = _log_variance_rows(5_000, 3)
    rows = FitRows(x, y, xv, yv, None, 0, 1, "gamma")
    model, trees = fit_lightgbm(rows, EvalConfig(probe_trees=200))
    constant = np.log(np.mean(np.exp(y)))  # the prior: QLIKE's best constant on the training rows
    forecast = model.predict_log(xv)
    assert gamma_loss(yv, forecast) < gamma_loss(yv, np.full_like(yv, constant)) - 0.03
    assert gamma_loss(yv, truth_v) <= gamma_loss(yv, forecast) + 0.01  # near the true variance's
    assert np.corrcoef(forecast, truth_v)[0, 1] > 0.95 and 1 <= trees <= 200


def test_gamma_loss_is_qlike_and_least_at_the_true_variance():
    x, truth, y = _log_variance_rows(50_000, 4)
    assert gamma_loss([0.0], [0.0]) == 0.0 and gamma_loss([np.log(2.0)], [0.0]) == pytest.approx(1 - np.log(2.0))
    at_truth = gamma_loss(y, truth)
    assert all(at_truth < gamma_loss(y, truth + shift) for shift in (-0.2, -0.05, 0.05, 0.2))


# --- through the stages, on a universe whose variance is a known log-AR(1) -------------------------------

START, END, CUT = dt.date(2019, 1, 2), dt.date(2020, 6, 30), dt.date(2020, 1, 31)
N_TICKERS = 16


# the log variance's AR(1) of the planted source (KP_PLANTED_VOL): persistence, stationary sd, mean
PHI, SD, LEVEL = VOL_PERSISTENCE, VOL_SD, VOL_LEVEL


def oracle_log_variance(h: np.ndarray, horizon: int = 5) -> np.ndarray:
    """ln E[RV of the next ``horizon`` returns | h_t] under the log-AR(1) (``synthetic.planted_forecast``, checked
    against its loop twin in ``unit/test_planted_volatility.py``)."""
    return planted_forecast(h, horizon)


def volatility_universe(seed: int = 0) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Bars whose daily log return is N(0, exp(LEVEL + h_t)), h a log-AR(1) (``PHI``, a stationary sd ``SD``): next
    week's variance is predictable from the last weeks' returns; and the oracle's forecast from the true h (ticker,
    date, log_variance: ``oracle_log_variance``)."""
    rng = np.random.default_rng(seed)
    days = trading_days(START, END)
    frames, oracle = [], []
    for i in range(N_TICKERS):
        h = np.zeros(len(days))
        h[0] = rng.normal(0, SD)
        for t in range(1, len(days)):
            h[t] = PHI * h[t - 1] + rng.normal(0, SD * np.sqrt(1 - PHI**2))
        r = np.exp((LEVEL + h) / 2) * rng.standard_normal(len(days))
        oracle.append(pl.DataFrame({"ticker": f"V{i:02d}", "date": days, "log_variance": oracle_log_variance(h)}))
        close = 50.0 * np.exp(np.cumsum(r))
        frames.append(
            pl.DataFrame(
                {
                    "ticker": f"V{i:02d}",
                    "date": days,
                    "open": close,
                    "high": close * np.exp(np.abs(r) / 2),
                    "low": close * np.exp(-np.abs(r) / 2),
                    "close": close,
                    "volume": rng.integers(100_000, 200_000, len(days)).astype(np.float64),
                }
            )
        )
    return pl.concat(frames), pl.concat(oracle)


@pytest.fixture(scope="module")
def vol_warehouse(tmp_path_factory):
    root = tmp_path_factory.mktemp("vol")
    path = root / "bars.parquet"
    bars, oracle = volatility_universe()
    bars.write_parquet(path)
    settings = load_settings(
        "ci", source="parquet", source_path=str(path), warehouse=root / "w", start_date=START, end_date=END, env={}
    )
    settings = dataclasses.replace(
        settings,
        split=dataclasses.replace(settings.split, train_end=CUT, folds=1),
        tokenize=dataclasses.replace(settings.tokenize, tasks=("bsh", "vol")),
    )
    days = trading_days(START, END)
    materialize_raw_ohlcv(settings, days, progress=False)
    materialize_tokens(settings, days, progress=False)
    labelled = [d for d in days if settings.warehouse.shard("spline_tokens", d).exists()]
    materialize_labels(settings, labelled, progress=False)
    for tok in TOKENIZATIONS.values():
        materialize_window_store(settings, tok, progress=False)
        materialize_features(settings, tok, progress=False)
    return settings, bars, oracle


@pytest.mark.slow
def test_the_probes_forecast_next_weeks_variance_in_the_tasks_schema(vol_warehouse):
    (settings, _, _), week = vol_warehouse, RealizedVariance(5)
    assert week.evaluated_by(lookup_variant("lr_spline"), settings)
    assert not week.evaluated_by(lookup_variant("momentum_20d"), settings)  # a rule forecasts nothing
    fold = settings.folds[0]
    results = {}
    for variant in ("lr_trivial", "lr_spline", "lightgbm_trivial", "lightgbm_fd"):
        policy = Policy(variant, week, 0, fold)
        fit = materialize_probe(settings, policy).fit
        assert fit["objective"] == "gamma" and fit["class_weights"] is None and fit["task"] == "vol5"
        validation = baseline_predictions(settings, policy, "validation", None).filter(pl.col("label").is_finite())
        recorded = gamma_loss(validation["label"].to_numpy(), validation["log_variance"].to_numpy())
        assert fit["validation_qlike"] == pytest.approx(recorded, abs=1e-5)  # the fit's record: what it predicts
        test = baseline_predictions(settings, policy, "test", None)
        assert set(test.columns) == set(week.predictions_schema) and test["log_variance"].is_finite().all()
        known = test.filter(pl.col("label").is_finite())
        y, f = known["label"].to_numpy(), known["log_variance"].to_numpy()
        prior = np.log(np.mean(np.exp(y)))  # hindsight's best constant: a stricter zero than the training one
        results[variant] = (gamma_loss(y, f), gamma_loss(y, np.full_like(y, prior)))
    print(results)
    # vol20 forecasts a log-AR(1) variance: both trivial probes well below hindsight's constant. The token probes (54
    # features on 2,720 autocorrelated rows) are only checked to forecast: at this size a linear one overfits
    for variant in ("lr_trivial", "lightgbm_trivial"):
        probe, constant = results[variant]
        assert probe < constant - 0.03, (variant, probe, constant)


@pytest.mark.slow
def test_on_the_planted_source_the_oracle_leads_the_confidence_set_of_probes_and_references(vol_warehouse):
    """The probes' test forecasts, the oracle's (the exact conditional variance) and the references refitted on the
    fold's training bars, scored on the same ticker-days by the task's evidence: the oracle has the least QLIKE and
    leads the model confidence set, and the stage's targets are the variance the oracle forecasts (aligned days)."""
    from kinematic_pipeline.backtest.volatility_evidence import forecaster_table, realized, scored_forecasts

    settings, bars, oracle = vol_warehouse
    week, fold = RealizedVariance(5), settings.folds[0]
    frames = []
    for variant in ("lr_trivial", "lightgbm_trivial", "lightgbm_spline"):
        policy = Policy(variant, week, 0, fold)
        materialize_probe(settings, policy)
        frames.append(
            baseline_predictions(settings, policy, "test", None).select(
                "variant", "seed", "ticker", "date", "log_variance"
            )
        )
    days = frames[0].select("ticker", "date")
    planted = oracle.join(days, on=["ticker", "date"]).select(
        pl.lit("oracle").alias("variant"), pl.lit(0, pl.Int64).alias("seed"), "ticker", "date", "log_variance"
    )
    predictions = pl.concat([*frames, planted]).with_columns(pl.lit(fold.label).alias("fold"))
    scored, train_mean = scored_forecasts(predictions, bars, 5, settings.folds)
    table = forecaster_table(scored, 5, train_mean, reps=300)
    with pl.Config(tbl_cols=16, tbl_width_chars=200):
        print(table.drop("qlike_low", "qlike_high"))
    assert table["forecaster"][0] == "oracle seed 0" and table["mcs_p"][0] == 1.0
    assert {"har", "garch", "ewma", "vol20", "lightgbm_trivial seed 0"} <= set(table["forecaster"])
    # the labels the stages wrote are ln RV of the next five close-to-close returns, as the bars give them
    labels = baseline_predictions(settings, Policy("lr_trivial", week, 0, fold), "test", None)
    truth = realized(bars, 5).join(labels.select("ticker", "date", "label"), on=["ticker", "date"])
    known = truth.filter(pl.col("label").is_finite())
    np.testing.assert_allclose(known["label"].to_numpy(), known["log_rv"].to_numpy(), atol=1e-5)
    assert known.height > 0.9 * labels.height
