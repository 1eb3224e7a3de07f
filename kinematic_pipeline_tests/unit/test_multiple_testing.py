"""The multiple-testing statistics: the probabilistic and deflated Sharpe ratios against a case computed by hand,
the expected maximum Sharpe against a simulation, and SPA / StepM / MCS / the Sharpe-difference interval
against arch called directly on the same losses (and on cases whose answer is known)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from kinematic_pipeline.backtest.multiple_testing import (
    SAME_SERIES_ATOL,
    cluster_sharpe_ratios,
    default_block,
    deflated_sharpe_ratio,
    distinct_columns,
    effective_trials,
    eigenvalue_trials,
    expected_maximum_sharpe,
    model_confidence_set,
    probabilistic_sharpe_ratio,
    sharpe_difference_interval,
    sharpe_ratio,
    silhouettes,
    spa_pvalues,
    stepm_superior,
    trial_clusters,
)

R10 = [0.012, -0.004, 0.007, 0.021, -0.015, 0.003, 0.009, -0.002, 0.016, -0.008]  # ten daily returns


def _hand_psr(returns: list[float], benchmark: float) -> float:
    """Bailey and Lopez de Prado (2012), eq. 11, with every moment written out."""
    t = len(returns)
    mean = sum(returns) / t
    sd = math.sqrt(sum((x - mean) ** 2 for x in returns) / (t - 1))
    m2 = sum((x - mean) ** 2 for x in returns) / t
    m3 = sum((x - mean) ** 3 for x in returns) / t
    m4 = sum((x - mean) ** 4 for x in returns) / t
    skew, kurt = m3 / m2**1.5, m4 / m2**2
    sr = mean / sd
    z = (sr - benchmark) * math.sqrt(t - 1) / math.sqrt(1 - skew * sr + (kurt - 1) / 4 * sr**2)
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


def test_the_probabilistic_sharpe_ratio_equals_the_hand_computed_case():
    mean = sum(R10) / 10
    assert sharpe_ratio(R10) == pytest.approx(mean / math.sqrt(sum((x - mean) ** 2 for x in R10) / 9), rel=1e-12)
    for benchmark in (0.0, 0.1, 0.5):
        assert probabilistic_sharpe_ratio(R10, benchmark) == pytest.approx(_hand_psr(R10, benchmark), abs=1e-12)
    assert probabilistic_sharpe_ratio(R10, 0.0) > probabilistic_sharpe_ratio(R10, 0.5)
    assert math.isnan(probabilistic_sharpe_ratio([0.01, 0.01, 0.01]))  # no dispersion: undefined


def test_the_expected_maximum_sharpe_matches_a_simulation_and_deflation_lowers_the_psr():
    # E[max of N standard normals] by simulation, against the closed-form approximation (V = 1)
    rng = np.random.default_rng(0)
    simulated = rng.standard_normal((4000, 100)).max(axis=1).mean()
    assert expected_maximum_sharpe(100, 1.0) == pytest.approx(simulated, abs=0.03)
    hand = math.sqrt(0.04) * (
        (1 - 0.5772156649015329) * norm.ppf(1 - 1 / 50) + 0.5772156649015329 * norm.ppf(1 - 1 / (50 * math.e))
    )
    assert expected_maximum_sharpe(50, 0.04) == pytest.approx(hand, rel=1e-12)
    assert expected_maximum_sharpe(1, 0.04) == 0.0
    # deflated = probabilistic against the expected maximum, and more trials deflate more
    returns = np.random.default_rng(1).normal(0.001, 0.01, 750)
    assert deflated_sharpe_ratio(returns, 50, 0.04**2) == pytest.approx(
        probabilistic_sharpe_ratio(returns, expected_maximum_sharpe(50, 0.04**2)), abs=1e-15
    )
    assert deflated_sharpe_ratio(returns, 1, 0.0016) == pytest.approx(probabilistic_sharpe_ratio(returns), abs=1e-15)
    assert deflated_sharpe_ratio(returns, 500, 0.0016) < deflated_sharpe_ratio(returns, 5, 0.0016)
    with pytest.raises(ValueError, match="n_trials"):
        expected_maximum_sharpe(0, 1.0)


def _universe(seed: int = 2, t: int = 600):
    rng = np.random.default_rng(seed)
    bench = rng.normal(0.0002, 0.01, t)
    strategies = np.column_stack(
        [bench + rng.normal(0.0, 0.004, t), bench + rng.normal(0.004, 0.004, t), rng.normal(-0.002, 0.01, t)]
    )
    return bench, strategies


def test_spa_stepm_and_mcs_equal_arch_on_the_same_losses_and_find_the_better_strategy():
    from arch.bootstrap import MCS, SPA, StepM

    bench, strategies = _universe()
    block = default_block(bench.size)
    spa = SPA(-bench, -strategies, block_size=block, reps=300, seed=7)
    spa.compute()
    ours = spa_pvalues(bench, strategies, reps=300, seed=7)
    assert ours == {k: float(v) for k, v in spa.pvalues.items()}
    assert ours["consistent"] < 0.05  # strategy 1 earns 0.4% a day more than the benchmark
    assert spa_pvalues(bench, strategies[:, [0, 2]], reps=300, seed=7)["consistent"] > 0.2  # no skill among these
    stepm = StepM(-bench, -strategies, size=0.05, block_size=block, reps=300, seed=7)
    stepm.compute()
    assert (
        stepm_superior(bench, strategies, ["a", "b", "c"], reps=300, seed=7)
        == ["b"]
        == ["abc"[i] for i in stepm.superior_models]
    )
    mcs = model_confidence_set(strategies, ["a", "b", "c"], size=0.05, reps=300, seed=7)
    direct = MCS(-strategies, size=0.05, reps=300, block_size=block, seed=7)
    direct.compute()
    assert mcs == {"abc"[int(i)]: float(p) for i, p in direct.pvalues.iloc[:, 0].items()}
    assert [name for name, p in mcs.items() if p > 0.05] == ["b"]  # the best strategy alone


def test_identical_series_share_their_model_confidence_p_value_instead_of_failing_arch():
    # the demo's failure at b648743: every flat strategy in cash has the same returns, and arch's MCS divides by the
    # zero variance of their differences (IndexError); identical series cannot be told apart, so they share a p-value
    _, strategies = _universe()
    cash = np.zeros(strategies.shape[0])
    doubled = np.column_stack([cash, strategies[:, 0], cash, strategies[:, 1], strategies[:, 2], cash])
    names = ["hold", "a", "flat1", "b", "c", "flat2"]
    mcs = model_confidence_set(doubled, names, size=0.05, reps=300, seed=7)
    once = model_confidence_set(doubled[:, [0, 1, 3, 4]], ["hold", "a", "b", "c"], size=0.05, reps=300, seed=7)
    assert {k: mcs[k] for k in once} == once and mcs["flat1"] == mcs["flat2"] == mcs["hold"]
    assert model_confidence_set(np.column_stack([cash, cash]), ["x", "y"], reps=50) == {"x": 1.0, "y": 1.0}


def test_series_a_rounding_apart_are_one_series_to_the_model_confidence_set():
    # the demo's failure at 7d749ed: one rule's trades pooled under paper, calibrated and margin differ by 1e-18 on
    # some days; every bootstrap mean of their difference is then exactly 0, and arch divides 0 by 0 (IndexError)
    _, strategies = _universe()
    a = strategies[:, 0]
    ulp = a.copy()
    ulp[::7] = np.nextafter(ulp[::7], np.inf)  # a rounding apart on every 7th day
    assert 0 < np.abs(ulp - a).max() < 1e-15
    series = np.column_stack([a, strategies[:, 1], ulp, strategies[:, 2]])
    kept, which = distinct_columns(-series, SAME_SERIES_ATOL)
    assert kept == [0, 1, 3] and which.tolist() == [0, 1, 0, 2]
    mcs = model_confidence_set(series, ["a", "b", "a'", "c"], size=0.05, reps=300, seed=7)
    once = model_confidence_set(series[:, [0, 1, 3]], ["a", "b", "c"], size=0.05, reps=300, seed=7)
    assert {k: mcs[k] for k in once} == once and mcs["a'"] == mcs["a"]
    # a difference a cost makes (a basis point on one day) is a difference
    cost = a.copy()
    cost[10] -= 1e-4
    assert distinct_columns(-np.column_stack([a, cost]), SAME_SERIES_ATOL)[0] == [0, 1]


def test_the_sharpe_difference_interval_resamples_both_series_together():
    bench, strategies = _universe()
    diff, low, high = sharpe_difference_interval(strategies[:, 1], bench, reps=300, seed=3)
    assert diff == pytest.approx(sharpe_ratio(strategies[:, 1]) - sharpe_ratio(bench)) and 0 < low < diff < high
    same = sharpe_difference_interval(bench, bench, reps=100, seed=3)
    assert same == (0.0, 0.0, 0.0)  # the same days drawn for both: every resample's difference is 0
    with pytest.raises(ValueError, match="same days"):
        sharpe_difference_interval(bench, bench[:-1])
    with pytest.raises(ValueError, match="align"):
        spa_pvalues(bench, strategies[:-1])


# ---- the effective number of trials (science-5 M1) ----------------------------------------------------------------


def test_the_trials_mean_centres_the_expected_maximum():
    """E[max SR] = E[SR] + sqrt(V) E[max of N standard normals]: the mean shifts the hurdle, and one trial's
    expected maximum is its mean."""
    assert expected_maximum_sharpe(15, 0.04, 0.05) == pytest.approx(0.05 + expected_maximum_sharpe(15, 0.04), abs=1e-15)
    assert expected_maximum_sharpe(1, 0.04, 0.05) == 0.05
    returns = np.random.default_rng(3).normal(0.001, 0.01, 750)
    assert deflated_sharpe_ratio(returns, 15, 0.0004, 0.05) == pytest.approx(
        probabilistic_sharpe_ratio(returns, 0.05 + expected_maximum_sharpe(15, 0.0004)), abs=1e-15
    )


def test_the_silhouettes_equal_scikit_learns():
    from sklearn.metrics import silhouette_samples

    rng = np.random.default_rng(0)
    for k, clusters in ((6, 2), (9, 3), (15, 5), (12, 11)):
        d = np.abs(rng.normal(size=(k, k)))
        d = (d + d.T) / 2
        np.fill_diagonal(d, 0.0)
        labels = np.r_[np.arange(clusters), rng.integers(0, clusters, k - clusters)]  # every cluster used
        np.testing.assert_allclose(silhouettes(d, labels), silhouette_samples(d, labels, metric="precomputed"))


def _clustered(rng, groups: int, size: int, days: int = 1007, noise: float = 0.003) -> np.ndarray:
    """``groups`` independent factors, ``size`` strategies on each (correlation about 0.92 within a group)."""
    factors = rng.normal(0, 0.01, (days, groups))
    return np.column_stack([factors[:, j // size] + rng.normal(0, noise, days) for j in range(groups * size)])


def test_independent_series_count_one_trial_each_by_both_counts():
    """Fifteen independent series of 1,007 days are fifteen trials: the silhouette choice makes them all singletons
    (the ONC mean/std score it used before cut them into 2-5 clusters) and the eigenvalues for 95% of their
    correlation matrix number 14-15."""
    rng = np.random.default_rng(11)
    for _ in range(8):
        returns = rng.normal(0, 0.01, (1007, 15))
        assert effective_trials(returns) == 15
        assert 14 <= eigenvalue_trials(returns) <= 15
    assert effective_trials(rng.normal(0, 0.01, (1007, 5))) == 5


def test_planted_clusters_are_found_and_loose_series_count_alone():
    rng = np.random.default_rng(12)
    assert effective_trials(_clustered(rng, 3, 5)) == 3
    assert effective_trials(_clustered(rng, 5, 3)) == 5
    assert effective_trials(_clustered(rng, 1, 15)) == 1  # one bet: the silhouette choice can return 1
    assert 3 <= eigenvalue_trials(_clustered(rng, 3, 5)) <= 8  # the noise within clusters adds eigenvalues
    assert eigenvalue_trials(np.column_stack([rng.normal(0, 0.01, 500)] * 6)) == 1
    # three clusters of five and five independent series: 3 + 5 trials, not 3 + one lump of the five
    mixed = np.column_stack([_clustered(rng, 3, 5), rng.normal(0, 0.01, (1007, 5))])
    labels = trial_clusters(mixed)
    assert np.unique(labels).size == 8
    assert all(np.unique(labels[5 * g : 5 * g + 5]).size == 1 for g in range(3))
    assert np.unique(labels[15:]).size == 5 and not set(labels[15:]) & set(labels[:15])


def test_cluster_sharpe_ratios_are_the_sharpe_ratios_of_each_clusters_mean_return():
    """V at the clusters' N is taken over the clusters' aggregate returns (Lopez de Prado and Lewis, 2019)."""
    r = np.array([[0.01, 0.03, -0.01], [0.02, 0.00, 0.02], [-0.01, 0.01, 0.00], [0.03, 0.02, 0.01]])
    got = cluster_sharpe_ratios(r, [0, 0, 1])
    mean01 = [(0.01 + 0.03) / 2, 0.01, 0.0, 0.025]
    assert got == pytest.approx([sharpe_ratio(mean01), sharpe_ratio(r[:, 2])], rel=1e-12)


# --- Ledoit and Wolf's HAC Sharpe-difference test (science-6 L-B) --------------------------------------------


def _loop_hac_sharpe_difference(a: list[float], b: list[float], lags: int) -> tuple[float, float]:
    """The difference and its standard error the obvious way: the moments, their Bartlett-weighted autocovariances
    summed in loops, the delta method's gradient written out."""
    n = len(a)
    mu_a, mu_b = sum(a) / n, sum(b) / n
    sq_a, sq_b = sum(x * x for x in a) / n, sum(x * x for x in b) / n
    var_a, var_b = sq_a - mu_a**2, sq_b - mu_b**2
    y = [[a[t] - mu_a, b[t] - mu_b, a[t] ** 2 - sq_a, b[t] ** 2 - sq_b] for t in range(n)]
    psi = [[0.0] * 4 for _ in range(4)]
    for j in range(lags + 1):
        weight = 1.0 if j == 0 else 1.0 - j / (lags + 1)
        for i in range(4):
            for k in range(4):
                gamma = sum(y[t][i] * y[t - j][k] for t in range(j, n)) / n
                psi[i][k] += weight * gamma
                if j:
                    psi[k][i] += weight * gamma
    g = [sq_a / var_a**1.5, -sq_b / var_b**1.5, -mu_a / (2 * var_a**1.5), mu_b / (2 * var_b**1.5)]
    quad = sum(g[i] * psi[i][k] * g[k] for i in range(4) for k in range(4))
    return mu_a / math.sqrt(var_a) - mu_b / math.sqrt(var_b), math.sqrt(quad / n)


def _garch_market(rng, n: int) -> np.ndarray:
    h, r = np.empty(n), np.empty(n)
    h[0] = 1e-4
    for t in range(n):
        if t:
            h[t] = 1e-6 + 0.08 * r[t - 1] ** 2 + 0.9 * h[t - 1]
        r[t] = math.sqrt(h[t]) * rng.standard_t(5) / math.sqrt(5 / 3)
    return r + 0.0003


def _long_or_cash(rng, n: int, stay: float = 0.95, share: float = 0.9) -> np.ndarray:
    """A skill-less position: kept with probability ``stay``, else redrawn long with probability ``share``."""
    p = np.empty(n)
    p[0] = rng.random() < share
    for t in range(1, n):
        p[t] = p[t - 1] if rng.random() < stay else rng.random() < share
    return p


def test_the_hac_sharpe_difference_equals_its_loop_twin():
    from kinematic_pipeline.backtest.multiple_testing import sharpe_difference_hac

    rng = np.random.default_rng(3)
    r = _garch_market(rng, 300)
    a, b = _long_or_cash(rng, 300) * r, _long_or_cash(rng, 300) * r
    diff, low, high, p, se = sharpe_difference_hac(a, b, 20)
    twin_diff, twin_se = _loop_hac_sharpe_difference(a.tolist(), b.tolist(), 20)
    assert diff == pytest.approx(twin_diff, rel=1e-10) and se == pytest.approx(twin_se, rel=1e-8)
    assert diff == pytest.approx(sharpe_ratio(a) - sharpe_ratio(b), rel=3e-3)  # ddof 0 against 1: n / (n - 1)
    assert (low, high) == pytest.approx((diff - 1.959964 * se, diff + 1.959964 * se), rel=1e-6)
    assert p == pytest.approx(2 * norm.sf(abs(diff) / se))
    assert all(math.isnan(v) for v in sharpe_difference_hac(np.zeros(50), a[:50], 5))  # a flat record


def test_the_hac_sharpe_difference_holds_its_size_on_skill_less_long_cash_pairs_and_finds_an_edge():
    """On 400 pairs of skill-less long/cash strategies (90% long, persistent) on one GARCH-t market, it rejects
    "no difference" at 5% in 2.5-8% of them (the stationary bootstrap: 7.4% on such pairs, science-6 L-B), and
    finds a strategy that earns 5 bps a day more almost always."""
    from kinematic_pipeline.backtest.multiple_testing import sharpe_difference_hac

    rng = np.random.default_rng(7)
    rejected, found = 0, 0
    for _ in range(400):
        r = _garch_market(rng, 750)
        a, b = _long_or_cash(rng, 750) * r, _long_or_cash(rng, 750) * r
        rejected += sharpe_difference_hac(a, b, 20)[3] < 0.05
    for _ in range(50):
        r = _garch_market(rng, 750)
        found += sharpe_difference_hac(r + 0.0005, r, 20)[3] < 0.05
    assert 0.025 <= rejected / 400 <= 0.08, rejected
    assert found >= 45
