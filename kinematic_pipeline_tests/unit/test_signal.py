"""Tests of kinematic_pipeline.backtest.signal against hand computations, scipy and brute force."""

from __future__ import annotations

import math
from datetime import date

import numpy as np
import polars as pl
import pytest
from scipy import stats

from kinematic_pipeline.backtest.signal import (
    daily_ic,
    direction_auc,
    ic_summary,
    newey_west_lags,
    newey_west_t,
    time_series_ic,
)

D1, D2, D3, D4 = date(2024, 1, 2), date(2024, 1, 3), date(2024, 1, 4), date(2024, 1, 5)
# day 1: 5 names, score has a tie (0.3, 0.3); day 2: 5 finite names plus a NaN, an inf and a null row
S1 = [0.1, 0.3, 0.3, 0.5, 0.2]
R1 = [0.02, -0.01, 0.03, 0.04, 0.00]
S2 = [1.0, -2.0, 0.5, 3.0, 0.0]
R2 = [0.01, 0.02, -0.03, 0.05, 0.00]


def _hand_frame() -> pl.DataFrame:
    rows = []
    rows += [(D1, f"T{i}", s, r) for i, (s, r) in enumerate(zip(S1, R1, strict=True))]
    rows += [(D2, f"T{i}", s, r) for i, (s, r) in enumerate(zip(S2, R2, strict=True))]
    rows += [(D2, "T5", float("nan"), 0.9), (D2, "T6", 9.0, float("inf")), (D2, "T7", None, 0.5)]
    rows += [(D3, f"T{i}", s, r) for i, (s, r) in enumerate(zip(S1[:4], R1[:4], strict=True))]  # 4 names
    rows += [(D4, f"T{i}", 0.7, r) for i, r in enumerate(R1)]  # constant score
    return pl.DataFrame(rows, schema=["date", "ticker", "score", "r_close"], orient="row")


def _pearson(x, y) -> float:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    dx, dy = x - x.mean(), y - y.mean()
    return float((dx * dy).sum() / np.sqrt((dx * dx).sum() * (dy * dy).sum()))


def test_daily_ic_hand_case_and_scipy():
    out = daily_ic(_hand_frame())
    assert out.columns == ["date", "n", "ic", "rank_ic"]
    assert out.schema["n"] == pl.Int64 and out.schema["ic"] == pl.Float64 and out.schema["rank_ic"] == pl.Float64
    assert out["date"].to_list() == [D1, D2]  # D3 has 4 names, D4 a constant score
    assert out["n"].to_list() == [5, 5]  # NaN / inf / null rows of D2 are excluded

    # ranks by hand: S1 = [.1, .3, .3, .5, .2] -> [1, 3.5, 3.5, 5, 2]; R1 -> [3, 1, 4, 5, 2]
    rank_ic_1 = _pearson([1, 3.5, 3.5, 5, 2], [3, 1, 4, 5, 2])
    # S2 = [1, -2, .5, 3, 0] -> [4, 1, 3, 5, 2]; R2 = [.01, .02, -.03, .05, 0] -> [3, 4, 1, 5, 2]
    rank_ic_2 = _pearson([4, 1, 3, 5, 2], [3, 4, 1, 5, 2])
    np.testing.assert_allclose(out["ic"].to_numpy(), [_pearson(S1, R1), _pearson(S2, R2)], rtol=0, atol=1e-12)
    np.testing.assert_allclose(out["rank_ic"].to_numpy(), [rank_ic_1, rank_ic_2], rtol=0, atol=1e-12)
    # an independent check of the hand numbers: sum d^2 formula holds for day 2 (no ties)
    d2 = np.array([4, 1, 3, 5, 2]) - np.array([3, 4, 1, 5, 2])
    assert rank_ic_2 == pytest.approx(1 - 6 * (d2**2).sum() / (5 * (25 - 1)), abs=1e-12)

    for row, (s, r) in zip(out.iter_rows(named=True), [(S1, R1), (S2, R2)], strict=True):
        assert row["ic"] == pytest.approx(stats.pearsonr(s, r).statistic, abs=1e-12)
        assert row["rank_ic"] == pytest.approx(stats.spearmanr(s, r).statistic, abs=1e-12)


def test_daily_ic_min_names_constant_outcome_and_custom_names():
    frame = _hand_frame().rename({"date": "day", "score": "alpha", "r_close": "fwd"})
    out = daily_ic(frame, score="alpha", outcome="fwd", day="day", min_names=4)
    assert out["day"].to_list() == [D1, D2, D3]  # D3 (4 names) now kept; D4 still constant
    np.testing.assert_allclose(out["ic"][2], stats.pearsonr(S1[:4], R1[:4]).statistic, atol=1e-12)
    assert daily_ic(frame, score="alpha", outcome="fwd", day="day", min_names=6).height == 0

    const_outcome = pl.DataFrame({"date": [D1] * 5, "score": S1, "r_close": [0.1] * 5})
    assert daily_ic(const_outcome).height == 0


def test_daily_ic_perturbation_changes_only_that_day():
    rng = np.random.default_rng(0)
    days = [date(2024, 2, d) for d in range(1, 11)]
    frame = pl.DataFrame(
        {
            "date": pl.Series([d for d in days for _ in range(30)], dtype=pl.Date),
            "score": rng.normal(size=300),
            "r_close": rng.normal(size=300),
        }
    )
    base = daily_ic(frame)
    assert base.height == 10
    d = days[4]
    on_d = (frame["date"] == d).to_numpy()
    new_r = np.where(on_d, rng.normal(size=300), frame["r_close"].to_numpy())
    moved = daily_ic(frame.with_columns(pl.Series("r_close", new_r)))
    changed = (base["ic"] != moved["ic"]) | (base["rank_ic"] != moved["rank_ic"])
    assert base["date"].filter(changed).to_list() == [d]
    assert base.filter(~changed).equals(moved.filter(~changed))


X8 = np.array([0.031, -0.012, 0.044, 0.008, -0.027, 0.019, 0.052, -0.005])  # a short series, written out


def _bartlett_se(x: np.ndarray, lags: int) -> float:
    t_len = x.size
    e = x - x.mean()
    gamma = [float((e[j:] * e[: t_len - j]).sum() / t_len) for j in range(lags + 1)]
    lrv = gamma[0] + 2 * sum((1 - j / (lags + 1)) * gamma[j] for j in range(1, lags + 1))
    return math.sqrt(lrv / t_len)


def test_newey_west_t_hand_case():
    t, se, used = newey_west_t(X8, lags=2)
    assert used == 2
    assert se == pytest.approx(_bartlett_se(X8, 2), abs=1e-12)
    assert t == pytest.approx(X8.mean() / _bartlett_se(X8, 2), abs=1e-12)

    t0, se0, _ = newey_west_t(X8, lags=0)
    plain_se = math.sqrt(X8.var(ddof=0) / X8.size)  # 1/T variance, no correction
    assert se0 == pytest.approx(plain_se, abs=1e-12)
    assert t0 == pytest.approx(X8.mean() / plain_se, abs=1e-12)

    # non-finite values are dropped; default lags from T = 8: floor(4 (0.08)^(2/9)) = 2
    t_nan, se_nan, used_nan = newey_west_t(np.r_[X8[:3], np.nan, X8[3:], np.inf])
    assert used_nan == int(np.floor(4 * (8 / 100) ** (2 / 9))) == 2
    assert (t_nan, se_nan) == pytest.approx((t, se), abs=1e-12)

    t1, se1, used1 = newey_west_t(np.array([1.0]), lags=3)
    assert math.isnan(t1) and math.isnan(se1) and used1 == 3


def test_newey_west_t_positive_autocorrelation_shrinks_t():
    rng = np.random.default_rng(7)
    x = np.empty(500)
    x[0] = 0.0
    for i in range(1, x.size):
        x[i] = 0.8 * x[i - 1] + rng.normal()
    x += 0.3
    t_nw, se_nw, used = newey_west_t(x)
    assert used == int(np.floor(4 * (500 / 100) ** (2 / 9)))
    t_plain = x.mean() / math.sqrt(x.var(ddof=0) / x.size)
    assert abs(t_nw) < abs(t_plain)
    assert se_nw == pytest.approx(_bartlett_se(x, used), rel=1e-10)


def test_ic_summary_hand_case():
    vals = [0.1, -0.05, 0.2, 0.0, 0.15]
    s = ic_summary(pl.DataFrame({"rank_ic": vals, "ic": [1.0] * 5}), lags=1)
    arr = np.array(vals)
    assert s["days"] == 5
    assert s["mean"] == pytest.approx(0.08, abs=1e-15)
    assert s["std"] == pytest.approx(math.sqrt(((arr - 0.08) ** 2).sum() / 4), abs=1e-15)
    assert s["icir"] == pytest.approx(0.08 / s["std"], abs=1e-12)
    assert s["share_positive"] == pytest.approx(3 / 5)
    assert s["lags"] == 1
    assert s["t_nw"] == pytest.approx(0.08 / _bartlett_se(arr, 1), abs=1e-12)

    s_ic = ic_summary(pl.DataFrame({"rank_ic": vals, "ic": [0.1, 0.2, 0.3, -0.1, 0.5]}), column="ic")
    assert s_ic["share_positive"] == pytest.approx(0.8) and s_ic["days"] == 5

    empty = ic_summary(daily_ic(pl.DataFrame(schema={"date": pl.Date, "score": pl.Float64, "r_close": pl.Float64})))
    assert empty["days"] == 0
    assert all(math.isnan(empty[k]) for k in ("mean", "std", "icir", "t_nw", "share_positive"))


def test_time_series_ic_against_scipy():
    rng = np.random.default_rng(3)
    parts = []
    for ticker, n in [("BBB", 40), ("AAA", 30), ("CCC", 10)]:
        s = rng.normal(size=n)
        r = 0.5 * s + rng.normal(size=n)
        parts.append(pl.DataFrame({"ticker": [ticker] * n, "date": np.arange(n), "score": s, "r_close": r}))
    parts.append(
        pl.DataFrame(
            {"ticker": ["DDD"] * 25, "date": np.arange(25), "score": [1.0] * 25, "r_close": rng.normal(size=25)}
        )
    )
    frame = pl.concat(parts)
    frame = frame.with_columns(
        pl.when(pl.int_range(pl.len()) == 3).then(None).otherwise(pl.col("score")).alias("score")
    )
    out = time_series_ic(frame)
    assert out["ticker"].to_list() == ["AAA", "BBB"]  # CCC too short, DDD constant score
    for row in out.iter_rows(named=True):
        sub = frame.filter((pl.col("ticker") == row["ticker"]) & pl.col("score").is_not_null())
        s, r = sub["score"].to_numpy(), sub["r_close"].to_numpy()
        assert row["n"] == len(s)
        assert row["ic"] == pytest.approx(stats.pearsonr(s, r).statistic, abs=1e-12)
        assert row["rank_ic"] == pytest.approx(stats.spearmanr(s, r).statistic, abs=1e-12)
    assert out.filter(pl.col("ticker") == "BBB")["n"].item() == 39  # the null score row is dropped


def test_direction_auc_brute_force():
    rng = np.random.default_rng(5)
    labels = rng.integers(-1, 3, size=60)
    score = np.round(rng.normal(size=60) + 0.5 * (labels == 0), 1)  # rounding makes ties
    score[::11] = np.nan
    keep = np.isfinite(score)
    buys, sells = score[keep & (labels == 0)], score[keep & (labels == 1)]
    wins = sum((b > s) + 0.5 * (b == s) for b in buys for s in sells)
    expected = wins / (len(buys) * len(sells))
    assert direction_auc(score, labels) == pytest.approx(expected, abs=1e-12)

    # Hold and unknown rows do not matter
    other = (labels == 2) | (labels == -1)
    scrambled = score.copy()
    scrambled[other] = rng.normal(size=other.sum()) * 100
    assert direction_auc(scrambled, labels) == pytest.approx(expected, abs=1e-12)
    # swapping the classes flips the AUC
    assert direction_auc(score, labels, buy=1, sell=0) == pytest.approx(1 - expected, abs=1e-12)

    assert math.isnan(direction_auc(score, np.where(labels == 1, 2, labels)))  # no Sell
    assert math.isnan(direction_auc(np.array([0.1, 0.2, np.nan]), np.array([0, 2, 1])))  # Sell score NaN


def test_a_day_whose_rank_ic_is_zero_is_exactly_zero_and_not_counted_positive():
    """Ranks (1..5) against (4, 1, 3, 5, 2): sum d^2 = 20, Spearman 1 - 6*20/120 = 0 exactly. Polars' parallel sums
    may leave +-1e-17 in another run; rounded, the day is 0 in every run and never a "day IC > 0"."""
    frame = pl.DataFrame(
        {"date": [date(2022, 1, 3)] * 5, "score": [1.0, 2.0, 3.0, 4.0, 5.0], "r_close": [4.0, 1.0, 3.0, 5.0, 2.0]}
    )
    out = daily_ic(frame)
    assert out["rank_ic"][0] == 0.0
    assert ic_summary(out)["share_positive"] == 0.0


def test_the_partial_rank_ic_is_the_spearman_of_the_within_day_residual_and_removes_a_control():
    """Loop twin with scipy; a score that is the control plus noise has a large IC and a partial IC near 0, and
    a score with information beyond the control keeps it."""
    import datetime as dt

    from scipy import stats

    from kinematic_pipeline.backtest.signal import daily_ic, partial_rank_ic

    rng = np.random.default_rng(11)
    n_days, n = 120, 60
    rows = []
    for d in range(n_days):
        control = rng.normal(size=n)
        extra = rng.normal(size=n)
        outcome = 0.5 * control + 0.3 * extra + rng.normal(size=n)
        day = dt.date(2022, 1, 1) + dt.timedelta(days=d)
        rows += [
            {
                "date": day,
                "ticker": f"T{i}",
                "r_close": outcome[i],
                "ret1": control[i],
                "copy": control[i] + 0.01 * rng.normal(),
                "beyond": control[i] + extra[i],
            }
            for i in range(n)
        ]
    frame = pl.DataFrame(rows)
    got = partial_rank_ic(frame, ("ret1",), score="beyond")
    first = frame.filter(pl.col("date") == frame["date"][0])
    ranks = {c: stats.rankdata(first[c].to_numpy()) for c in ("beyond", "ret1", "r_close")}
    x = np.column_stack([np.ones(n), ranks["ret1"]])
    a, b = (ranks[c] - x @ np.linalg.lstsq(x, ranks[c], rcond=None)[0] for c in ("beyond", "r_close"))
    assert got["rank_ic"][0] == pytest.approx(stats.pearsonr(a, b).statistic, abs=1e-12)
    # one control: the textbook partial correlation of the three Spearman correlations
    r_sy, r_sc, r_yc = (
        stats.spearmanr(first[u], first[v]).statistic
        for u, v in (("beyond", "r_close"), ("beyond", "ret1"), ("r_close", "ret1"))
    )
    assert got["rank_ic"][0] == pytest.approx((r_sy - r_sc * r_yc) / np.sqrt((1 - r_sc**2) * (1 - r_yc**2)), abs=1e-12)
    copy_ic = daily_ic(frame, "copy", "r_close")["rank_ic"].mean()
    copy_partial = partial_rank_ic(frame, ("ret1",), score="copy")["rank_ic"].mean()
    assert copy_ic > 0.3 and abs(copy_partial) < 0.03  # nothing beyond the control
    assert got["rank_ic"].mean() > 0.15  # the extra information survives


def test_the_paired_tests_lag_holds_the_size_closer_to_5_percent_on_persistent_differences():
    """AR(1) daily differences (phi 0.8, mean 0, 1,007 days, 300 draws): the rule of thumb's lag 6 rejects "mean
    0" far more often than 5%; the verdict's paired lag (at least 20 days) much less."""
    from scipy.signal import lfilter

    from kinematic_pipeline.stages.verdict_signal import HAC_LAG, hac_lag

    assert newey_west_lags(1007) == 6 and newey_west_lags(100) == 4
    assert newey_west_t(np.arange(1007.0) % 7)[2] == 6  # the default lag is the rule of thumb
    assert hac_lag(1007) == HAC_LAG == 20 and hac_lag(10**7) == newey_west_lags(10**7) > 20
    x = lfilter([1.0], [1.0, -0.8], np.random.default_rng(0).normal(size=(300, 1007)), axis=1)
    size = {lag: np.mean([abs(newey_west_t(s, lag)[0]) > 1.96 for s in x]) for lag in (6, hac_lag(1007))}
    assert size[6] > 0.13 and size[20] < 0.12 and size[20] < size[6] / 1.5
