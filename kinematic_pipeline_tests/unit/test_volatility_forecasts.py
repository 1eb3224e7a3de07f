"""The volatility reference forecasters (backtest/volatility_forecasts.py) and their scores
(backtest/volatility_metrics.py), issue 53: loop twins of the target, the returns, EWMA and the HAR features; HAR's
coefficients against statsmodels on hand-built training rows and its purge; GARCH against arch called directly; no
forecaster reads a bar after its day; QLIKE minimised by the true variance of a simulated GARCH; Diebold-Mariano
against a hand Newey-West; the MCS keeping the truth and dropping a bad forecaster; seeded bootstrap intervals."""

from __future__ import annotations

import datetime as dt
import math
import statistics

import numpy as np
import polars as pl
import pytest
import statsmodels.api as sm
from arch import arch_model
from scipy.stats import norm, spearmanr

from kinematic_pipeline.backtest import volatility_forecasts as vf
from kinematic_pipeline.backtest import volatility_metrics as vm
from kinematic_pipeline.tasks.targets import VARIANCE_FLOOR

DAY0 = dt.date(2010, 1, 4)
OMEGA, ALPHA, BETA = 2e-6, 0.08, 0.90  # decimal returns: unconditional variance 1e-4, 1% a day
H = 5
FORECAST = {"ticker": pl.String, "date": pl.Date, "log_variance": pl.Float64}


def _day(k: int) -> dt.date:
    return DAY0 + dt.timedelta(k)


def simulate_garch(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(r_1..r_n, s2) of a GARCH(1,1) with OMEGA, ALPHA, BETA: s2[t] = Var(r_t+1 | r_1..r_t), t = 0..n."""
    s2 = np.empty(n + 1)
    r = np.empty(n)
    s2[0] = OMEGA / (1 - ALPHA - BETA)
    for t in range(n):
        r[t] = math.sqrt(s2[t]) * rng.standard_normal()
        s2[t + 1] = OMEGA + ALPHA * r[t] ** 2 + BETA * s2[t]
    return r, s2


def true_log_rv_forecast(s2: np.ndarray, h: int) -> np.ndarray:
    """ln sum_{k=1..h} E_t s2_t+k per bar t = 0..n: the GARCH's own forecast from its true parameters."""
    persistence, mean = ALPHA + BETA, OMEGA / (1 - ALPHA - BETA)
    return np.log(sum(mean + persistence ** (k - 1) * (s2 - mean) for k in range(1, h + 1)))


def simulated_bars(seed: int, tickers: int = 6, n: int = 1200) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(bars of ``tickers`` GARCH names, n + 1 bars each, shuffled; ticker, date, true log forecast of RV_H)."""
    rng = np.random.default_rng(seed)
    rows, truth = [], []
    for i in range(tickers):
        r, s2 = simulate_garch(rng, n)
        close = 50.0 * np.exp(np.r_[0.0, np.cumsum(r)])
        vol = np.sqrt(s2)
        opens = close * np.exp(np.r_[0.0, 0.2 * vol[:-1] * rng.standard_normal(n)])
        high = np.maximum(opens, close) * np.exp(0.5 * vol * np.abs(rng.standard_normal(n + 1)))
        low = np.minimum(opens, close) * np.exp(-0.5 * vol * np.abs(rng.standard_normal(n + 1)))
        rows += [(f"T{i}", _day(k), opens[k], high[k], low[k], close[k]) for k in range(n + 1)]
        truth += [(f"T{i}", _day(k), v) for k, v in enumerate(true_log_rv_forecast(s2, H))]
    schema = {"ticker": pl.String, "date": pl.Date} | {c: pl.Float64 for c in ("open", "high", "low", "close")}
    bars = pl.DataFrame(rows, schema=schema, orient="row").sample(fraction=1.0, shuffle=True, seed=seed)
    return bars, pl.DataFrame(truth, schema=FORECAST, orient="row")


@pytest.fixture(scope="module")
def sim():
    return simulated_bars(7)


def small_bars(seed: int = 3, n: int = 90) -> pl.DataFrame:
    """Three tickers with a missing close, a non-positive close, a missing high and a day one ticker skips."""
    bars, _ = simulated_bars(seed, tickers=3, n=n)
    bars = bars.filter(~((pl.col("ticker") == "T2") & (pl.col("date") == _day(40))))
    bad_close = (pl.col("ticker") == "T0") & pl.col("date").is_in([_day(30), _day(61)])
    bad_high = (pl.col("ticker") == "T1") & (pl.col("date") == _day(50))
    return bars.with_columns(
        pl.when(bad_close)
        .then(pl.when(pl.col("date") == _day(30)).then(None).otherwise(-1.0))
        .otherwise("close")
        .alias("close"),
        pl.when(bad_high).then(None).otherwise("high").alias("high"),
    )


def _by_key(frame: pl.DataFrame, column: str) -> dict:
    return {(t, d): v for t, d, v in frame.select("ticker", "date", column).iter_rows()}


def _assert_matches(frame: pl.DataFrame, column: str, expected: dict) -> None:
    """``frame``'s column equals ``expected`` where the loop has a value, and is NaN on every other row."""
    got = _by_key(frame, column)
    assert set(expected) <= set(got)
    for key, value in got.items():
        if key in expected:
            assert value == pytest.approx(expected[key], rel=1e-10, abs=1e-300), key
        else:
            assert math.isnan(value), key


# ------------------------------------------------------------------------------------------ the loop twins


def naive_series(bars: pl.DataFrame) -> dict[str, list]:
    """{ticker: [(date, open, high, low, close, r)] in date order}, r by a loop (None where undefined)."""
    out = {}
    for ticker in sorted(set(bars["ticker"].to_list())):
        mine = sorted(
            r for r in bars.select("date", "open", "high", "low", "close", "ticker").iter_rows() if r[5] == ticker
        )
        series = []
        for i, (d, o, hi, lo, c, _) in enumerate(mine):
            prev = mine[i - 1][4] if i else None
            ok = i > 0 and c is not None and prev is not None and c > 0 and prev > 0
            series.append((d, o, hi, lo, c, math.log(c) - math.log(prev) if ok else None))
        out[ticker] = series
    return out


def naive_realized(bars: pl.DataFrame, h: int) -> dict:
    out = {}
    for ticker, series in naive_series(bars).items():
        for i in range(len(series) - h):
            forward = [series[i + k][5] for k in range(1, h + 1)]
            if all(r is not None for r in forward):
                out[(ticker, series[i][0])] = math.log(max(sum(r * r for r in forward), VARIANCE_FLOOR))
    return out


def naive_ewma(bars: pl.DataFrame, h: int, lam: float = 0.94) -> dict:
    out = {}
    for ticker, series in naive_series(bars).items():
        seen, s2 = [], None
        for d, *_, r in series:
            if r is None:
                continue
            seen.append(r)
            if len(seen) == 20:
                s2 = statistics.variance(seen)
            elif len(seen) > 20:
                s2 = lam * s2 + (1 - lam) * r * r
            if s2 is not None:
                out[(ticker, d)] = math.log(h * s2)
    return out


def naive_har_features(bars: pl.DataFrame, proxy: str) -> dict:
    """{(ticker, date): (ln d, ln w, ln m)}, each None where undefined, by a loop."""
    out = {}
    for ticker, series in naive_series(bars).items():
        d = []
        for _, _, hi, lo, _, r in series:
            if proxy == "close":
                d.append(None if r is None else max(r * r, VARIANCE_FLOOR))
            elif hi is None or lo is None or not lo > 0 or hi < lo:
                d.append(None)
            else:
                d.append(max(math.log(hi / lo) ** 2 / (4 * math.log(2)), VARIANCE_FLOOR))
        for i in range(len(series)):
            week, month = d[max(0, i - 4) : i + 1], d[max(0, i - 21) : i + 1]
            out[(ticker, series[i][0])] = (
                None if d[i] is None else math.log(d[i]),
                None if i < 4 or None in week else math.log(sum(week) / 5),
                None if i < 21 or None in month else math.log(sum(month) / 22),
            )
    return out


def test_returns_and_the_target_equal_their_loop_twins():
    bars = small_bars()
    returns = {(t, s[0]): s[5] for t, series in naive_series(bars).items() for s in series if s[5] is not None}
    _assert_matches(vf.log_returns(bars), "r", returns)
    for h in (1, 5):
        _assert_matches(vf.realized(bars, h), "log_rv", naive_realized(bars, h))


def test_ewma_equals_its_loop_twin():
    bars = small_bars(n=120)
    _assert_matches(vf.ewma_forecast(bars, H), "log_variance", naive_ewma(bars, H))
    _assert_matches(vf.ewma_forecast(bars, 1, lam=0.8), "log_variance", naive_ewma(bars, 1, 0.8))


def test_vol20_forecast_is_h_vol20_squared():
    bars = small_bars()
    frame = vf.vol20_forecast(bars, H).join(vf.trailing_volatility(bars), on=["ticker", "date"])
    known = frame.filter(pl.col("vol").is_not_nan())
    assert known.height > 100 and frame.filter(pl.col("vol").is_nan())["log_variance"].is_nan().all()
    np.testing.assert_allclose(known["log_variance"], np.log(H * known["vol"].to_numpy() ** 2), rtol=1e-12)


@pytest.mark.parametrize("proxy", ["range", "close"])
def test_har_features_equal_their_loop_twin(proxy):
    bars = small_bars()
    frame = vf.har_features(bars, proxy)
    expected = naive_har_features(bars, proxy)
    assert len(expected) > 100
    for i, name in enumerate(vf.HAR_FEATURES):
        _assert_matches(frame, name, {k: v[i] for k, v in expected.items() if v[i] is not None})


def test_har_coefficients_equal_statsmodels_on_the_hand_built_purged_training_rows():
    bars = small_bars(n=150)
    train_end = _day(100)
    features, target = naive_har_features(bars, "range"), naive_realized(bars, H)
    xs, ys, ends = [], [], []
    for ticker, series in naive_series(bars).items():
        for i in range(len(series) - H):
            key = (ticker, series[i][0])
            if series[i + H][0] <= train_end and None not in features[key] and key in target:
                xs.append(features[key]), ys.append(target[key]), ends.append(series[i + H][0])
    hand = sm.OLS(np.array(ys), sm.add_constant(np.array(xs))).fit()
    fit = vf.har_fit(bars, H, train_end, "range")
    np.testing.assert_allclose(fit.params, hand.params, rtol=1e-9)
    assert fit.residual_variance == pytest.approx(hand.scale, rel=1e-9)
    assert fit.rows == len(ys) and fit.last_target_date == max(ends) == train_end  # up to, never past, train_end
    forecast = vf.har_forecast(bars, H, train_end, "range")
    key = next(k for k, v in features.items() if None not in v)
    expected = hand.params @ np.r_[1.0, features[key]] + np.log(np.mean(np.exp(hand.resid)))  # Duan's smearing
    assert _by_key(forecast, "log_variance")[key] == pytest.approx(expected, rel=1e-9)


def test_a_har_training_row_moves_with_train_end_only_once_its_target_is_known():
    bars = small_bars(n=150)
    fits = [vf.har_fit(bars, H, _day(k), "close") for k in (99, 100, 101)]
    assert fits[0].rows < fits[1].rows < fits[2].rows
    assert [f.last_target_date for f in fits] == [_day(99), _day(100), _day(101)]


def _garch(returns_pct):
    return arch_model(returns_pct, mean="Zero", vol="GARCH", p=1, q=1, rescale=False)


def test_garch_equals_arch_fitted_on_the_training_returns_and_forecasting_from_day_t(sim):
    bars, _ = sim
    bars = bars.filter(pl.col("ticker").is_in(["T0", "T1"]))
    train_end = _day(700)
    params = vf.garch_parameters(bars, train_end).sort("ticker")
    forecast = _by_key(vf.garch_forecast(bars, H, train_end), "log_variance")
    series = naive_series(bars)
    for ticker, omega, alpha, beta in params.select("ticker", "omega", "alpha", "beta").iter_rows():
        r = np.array([s[5] for s in series[ticker][1:]])
        dates = [s[0] for s in series[ticker][1:]]
        own = _garch(100 * r[: dates.index(train_end) + 1]).fit(disp="off", show_warning=False)
        np.testing.assert_allclose([omega, alpha, beta], own.params, rtol=1e-10)
        for t in (100, 500, 1000):  # a training day and two test days: the series up to t only
            arch_says = _garch(100 * r[: t + 1]).fix(own.params).forecast(horizon=H).variance.to_numpy()[-1]
            assert forecast[(ticker, dates[t])] == pytest.approx(math.log(arch_says.sum() / 1e4), rel=1e-10)
        assert math.isnan(forecast[(ticker, dates[73])]) and math.isfinite(forecast[(ticker, dates[74])])


def test_garch_skips_a_ticker_with_too_few_training_returns(sim):
    bars, _ = sim
    bars = bars.filter(
        pl.col("ticker").is_in(["T0", "T1"]) & ((pl.col("ticker") == "T0") | (pl.col("date") > _day(500)))
    )
    params = vf.garch_parameters(bars, _day(700)).sort("ticker")
    assert params["train_returns"].to_list() == [700, 199] and params["omega"].is_nan().to_list() == [False, True]
    forecast = vf.garch_forecast(bars, H, _day(700))
    assert forecast.filter(pl.col("ticker") == "T1")["log_variance"].is_nan().all()


def _perturbed_after(bars: pl.DataFrame, t0: dt.date, seed: int) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    shock = pl.lit(pl.Series(np.exp(rng.normal(0, 0.05, bars.height))))
    widen = pl.lit(pl.Series(np.exp(np.abs(rng.normal(0, 0.03, bars.height)))))
    later = pl.col("date") > t0
    return bars.with_columns(
        pl.when(later).then(pl.col("open") * shock).otherwise("open"),
        pl.when(later).then(pl.col("close") * shock).otherwise("close"),
        pl.when(later).then(pl.col("high") * shock * widen).otherwise("high"),
        pl.when(later).then(pl.col("low") * shock / widen).otherwise("low"),
    )


FORECASTERS = {
    "vol20": lambda bars, end: vf.vol20_forecast(bars, H),
    "ewma": lambda bars, end: vf.ewma_forecast(bars, H),
    "garch": lambda bars, end: vf.garch_forecast(bars, H, end),
    "har_range": lambda bars, end: vf.har_forecast(bars, H, end, "range"),
    "har_close": lambda bars, end: vf.har_forecast(bars, H, end, "close"),
}


@pytest.mark.parametrize("name", sorted(FORECASTERS))
def test_no_forecast_changes_when_the_bars_after_its_day_change(sim, name):
    bars, _ = sim
    bars = bars.filter(pl.col("ticker").is_in(["T0", "T1", "T2"]) & (pl.col("date") <= _day(800)))
    train_end, t0 = _day(600), _day(650)
    before = FORECASTERS[name](bars, train_end).sort("ticker", "date")
    after = FORECASTERS[name](_perturbed_after(bars, t0, 11), train_end).sort("ticker", "date")
    early = (before["date"] <= t0).to_numpy()
    a, b = before["log_variance"].to_numpy(), after["log_variance"].to_numpy()
    np.testing.assert_allclose(a[early], b[early], rtol=1e-13, equal_nan=True)
    assert np.isfinite(a[early]).sum() > 1000 and not np.allclose(
        a[~early], b[~early], equal_nan=True
    )  # the future did change


# ------------------------------------------------------------------------------------------ the metrics


def test_the_losses_and_r2_have_their_hand_values():
    y, f = np.log([2.0, 1.0, 0.5]), np.log([1.0, 1.0, 1.0])
    np.testing.assert_allclose(vm.qlike(y, f), [2 - math.log(2) - 1, 0.0, 0.5 - math.log(0.5) - 1], atol=1e-15)
    np.testing.assert_allclose(vm.mse_variance(y, f), [1.0, 0.0, 0.25], atol=1e-15)
    expected = 1 - sum((a - b) ** 2 for a, b in zip(y, f)) / sum((a - 0.1) ** 2 for a in y)
    assert vm.r2_log(np.r_[y, np.nan], np.r_[f, 0.0], 0.1) == pytest.approx(expected)


def test_qlike_is_minimised_by_the_true_conditional_variance(sim):
    bars, truth = sim
    scored = truth.join(vf.realized(bars, H), on=["ticker", "date"]).filter(pl.col("log_rv").is_finite())
    y, f = scored["log_rv"].to_numpy(), scored["log_variance"].to_numpy()
    true_loss = vm.qlike(y, f).mean()
    constant = math.log(np.exp(y).mean())  # the best constant in hindsight
    for other in (f + math.log(0.8), f + math.log(1.25), np.full_like(f, constant)):
        assert true_loss < vm.qlike(y, other).mean() - 0.01


def naive_newey_west_t(d: np.ndarray, lag: int) -> float:
    n, mean = d.size, d.mean()
    gamma = [sum((d[t] - mean) * (d[t - j] - mean) for t in range(j, n)) / n for j in range(lag + 1)]
    variance = gamma[0] + 2 * sum((1 - j / (lag + 1)) * gamma[j] for j in range(1, lag + 1))
    return mean / math.sqrt(variance / n)


def test_diebold_mariano_equals_a_hand_newey_west_t():
    rng = np.random.default_rng(5)
    a = rng.normal(1.0, 1.0, 120)
    b = a + 0.3 * np.convolve(rng.normal(0, 1, 124), np.ones(5) / 5, mode="valid") - 0.05
    dm = vm.diebold_mariano(a, b, lag=10)
    t = naive_newey_west_t(a - b, 10)
    assert dm["t"] == pytest.approx(t, rel=1e-10) and dm["mean"] == pytest.approx((a - b).mean())
    assert dm["p"] == pytest.approx(2 * norm.sf(abs(t))) and dm["lag"] == 10 and dm["days"] == 120


def _scored(sim, scale_bad: float = 0.5) -> pl.DataFrame:
    bars, truth = sim
    forecasts = {
        "truth": truth,
        "bad": truth.with_columns(pl.col("log_variance") + math.log(scale_bad)),
        "vol20": vf.vol20_forecast(bars, H),
    }
    return vm.scored_frame(vf.realized(bars, H), forecasts)


def test_daily_losses_are_over_the_same_ticker_days_for_every_forecaster(sim):
    scored = _scored(sim)
    nan_one = (pl.col("forecaster") == "bad") & (pl.col("ticker") == "T0") & (pl.col("date") == _day(300))
    scored = scored.with_columns(pl.when(nan_one).then(float("nan")).otherwise("log_variance").alias("log_variance"))
    losses = vm.daily_losses(scored, vm.qlike).filter(pl.col("date") == _day(300))
    day = scored.filter((pl.col("date") == _day(300)) & (pl.col("ticker") != "T0") & (pl.col("forecaster") == "truth"))
    assert losses["truth"].item() == pytest.approx(vm.qlike(day["log_rv"], day["log_variance"]).mean())
    wide, names = vm.common_rows(scored)
    assert names == ["truth", "bad", "vol20"] and np.isfinite(wide.select("log_rv", *names).to_numpy()).all()
    assert wide.filter(pl.col("date") == _day(300)).height == 5


def test_daily_rank_ic_is_the_spearman_correlation_of_each_day(sim):
    wide, _ = vm.common_rows(_scored(sim))
    daily, mean, t = vm.daily_rank_ic(wide, "vol20", "log_rv", lags=10)
    day = wide.filter(pl.col("date") == daily["date"][3])
    assert daily["rank_ic"][3] == pytest.approx(spearmanr(day["vol20"], day["log_rv"])[0])
    assert mean == pytest.approx(daily["rank_ic"].mean()) and t == pytest.approx(
        naive_newey_west_t(daily["rank_ic"].to_numpy(), 10)
    )


def test_the_confidence_set_keeps_the_truth_and_drops_a_bad_forecaster(sim):
    losses = vm.daily_losses(_scored(sim), vm.qlike)
    mcs = vm.confidence_set(losses, size=0.10, reps=300, seed=1)
    kept = dict(mcs.select("forecaster", "in_mcs").iter_rows())
    assert kept["truth"] and not kept["bad"]
    assert mcs.equals(vm.confidence_set(losses, size=0.10, reps=300, seed=1))


def test_block_interval_is_deterministic_for_a_seed_and_covers_the_mean():
    x = np.random.default_rng(2).normal(0.3, 1.0, 400)
    first = vm.block_interval(x, block=50, reps=400, seed=9)
    assert (
        first == vm.block_interval(x, block=50, reps=400, seed=9) != vm.block_interval(x, block=50, reps=400, seed=10)
    )
    assert first[0] == pytest.approx(x.mean()) and first[1] < first[0] < first[2]


def test_the_forecast_table_reads_one_row_per_forecaster(sim):
    bars, _ = sim
    scored = _scored(sim, scale_bad=0.8)
    har = vf.har_forecast(bars, H, _day(600), "range")
    scored = pl.concat([scored, vm.scored_frame(vf.realized(bars, H), {"har": har})]).filter(pl.col("date") > _day(600))
    table = vm.forecast_table(scored, H, train_mean=-7.0, benchmark="har", reps=200, seed=0)
    assert table["forecaster"].to_list() == ["truth", "bad", "vol20", "har"]
    assert table.schema == pl.Schema(vm.TABLE_SCHEMA)
    row = dict(zip(table.columns, table.row(0)))
    assert row["in_mcs"] and row["dm_t"] < 0 and row["qlike_low"] < row["qlike"] < row["qlike_high"]
    assert math.isnan(table.row(3)[table.columns.index("dm_t")]) and table["days"].n_unique() == 1


def test_a_forecaster_entered_twice_shares_its_twins_confidence_set_p_value(sim):
    losses = vm.daily_losses(_scored(sim), vm.qlike)
    twice = losses.with_columns(pl.col("truth").alias("truth_again"))
    mcs = dict(vm.confidence_set(twice, size=0.10, reps=200, seed=1).select("forecaster", "mcs_p").iter_rows())
    alone = dict(vm.confidence_set(losses, size=0.10, reps=200, seed=1).select("forecaster", "mcs_p").iter_rows())
    assert mcs["truth_again"] == mcs["truth"] == alone["truth"] and mcs["bad"] == alone["bad"]


def test_har_is_not_biased_up_on_next_day_variance_whose_log_is_skewed(sim):
    """ln r^2 is a log chi-square: the log-normal correction exp(s^2 / 2) overstates next-day variance (~3x on the
    real file); Duan's smearing keeps HAR's QLIKE beside vol20's on simulated GARCH names."""
    bars, _ = sim
    targets, train_end = vf.realized(bars, 1), _day(600)
    forecasts = {"vol20": vf.vol20_forecast(bars, 1), "har": vf.har_forecast(bars, 1, train_end, "range")}
    losses = vm.daily_losses(vm.scored_frame(targets, forecasts).filter(pl.col("date") > train_end))
    assert losses["har"].mean() < 1.05 * losses["vol20"].mean()
    fit = vf.har_fit(bars, 1, train_end, "range")
    assert fit.smearing < 0.5 * fit.residual_variance - 0.5  # the log-normal term would add far more
