"""Tests that survive multiple testing: how much of a reported Sharpe ratio is luck among the trials run.

- ``probabilistic_sharpe_ratio`` and ``deflated_sharpe_ratio`` (Bailey and Lopez de Prado, 2012 and 2014): the
  probability that the true Sharpe ratio exceeds a benchmark, given the sample's length, skewness and kurtosis;
  deflated, the benchmark is the Sharpe ratio the best of ``n_trials`` strategies with no skill would reach
  (``expected_maximum_sharpe``). Sharpe ratios here are per period (daily), not annualized.
- ``spa_pvalues`` (Hansen's SPA), ``stepm_superior`` (Romano and Wolf's StepM) and ``model_confidence_set``
  (Hansen, Lunde and Nason): arch's implementations, on losses = minus daily net returns, with its stationary
  bootstrap (block length ``default_block``), seeded.
- ``sharpe_difference_hac``: Ledoit and Wolf's HAC test of a Sharpe-ratio difference (the verdict's timing rows);
- ``sharpe_difference_interval`` / ``sharpe_difference_test``: a stationary-bootstrap interval (and p-value) of
  the difference of two strategies' Sharpe ratios, the two return series resampled together (arch's
  ``StationaryBootstrap``).
- ``effective_trials`` / ``trial_clusters`` and ``eigenvalue_trials``: two counts of the independent trials k
  correlated strategies amount to (silhouette-chosen clusters of their return correlations, independent series
  one each; and the eigenvalues that explain 95% of their correlation matrix), the range of the deflated Sharpe
  ratio's effective N; ``cluster_sharpe_ratios``: the Sharpe ratios of the clusters' aggregate returns, whose
  variance is V at the clusters' N (Lopez de Prado and Lewis, 2019).

Pure numpy / scipy / arch; no dagster, no file I/O. ``kinematic_pipeline_tests/unit/test_multiple_testing.py`` checks
the Sharpe statistics against a hand-computed case and the tests against arch called directly.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

EULER_GAMMA = 0.5772156649015329
# Daily returns no day tells apart by more than this are one series to the model confidence set: 1e-12 of a day's
# return is no difference a cost or a trade makes, and is far above the 1e-18 that pooling the same trades in another
# order leaves (the demo's momentum rules under paper, calibrated and margin, 2026-12-03)
SAME_SERIES_ATOL = 1e-12


def _finite(returns) -> np.ndarray:
    r = np.asarray(returns, dtype=np.float64).reshape(-1)
    return r[np.isfinite(r)]


def sharpe_ratio(returns) -> float:
    """Mean over standard deviation (ddof 1) of per-period returns; NaN when undefined."""
    r = _finite(returns)
    if r.size < 2:
        return float("nan")
    sd = r.std(ddof=1)
    return float(r.mean() / sd) if sd > 0 else float("nan")


def probabilistic_sharpe_ratio(returns, benchmark_sharpe: float = 0.0) -> float:
    """P(true Sharpe > ``benchmark_sharpe``): Phi((SR - SR*) sqrt(T - 1) / sqrt(1 - g3 SR + (g4 - 1) / 4 SR^2)),
    with SR the sample's per-period Sharpe ratio, g3 its skewness and g4 its (non-excess) kurtosis (population
    moments, as in Bailey and Lopez de Prado 2012, eq. 11)."""
    return float(probabilistic_sharpe_ratios(returns, [benchmark_sharpe])[0])


def probabilistic_sharpe_ratios(returns, benchmark_sharpes) -> np.ndarray:
    """``probabilistic_sharpe_ratio`` of one return series against each of several benchmarks (its moments
    computed once)."""
    benchmarks = np.asarray(benchmark_sharpes, dtype=np.float64)
    r = _finite(returns)
    sr = sharpe_ratio(r)
    if not np.isfinite(sr):
        return np.full(benchmarks.shape, np.nan)
    g3 = float(stats.skew(r, bias=True))
    g4 = float(stats.kurtosis(r, fisher=False, bias=True))
    denominator = 1.0 - g3 * sr + (g4 - 1.0) / 4.0 * sr**2
    if denominator <= 0:
        return np.full(benchmarks.shape, np.nan)
    return stats.norm.cdf((sr - benchmarks) * math.sqrt(r.size - 1) / math.sqrt(denominator))


def expected_maximum_sharpe(n_trials: int, trials_sharpe_variance: float, trials_mean_sharpe: float = 0.0) -> float:
    """E[max SR] of ``n_trials`` independent strategies with no skill beyond the trials' common mean Sharpe
    ``trials_mean_sharpe`` whose Sharpe ratios vary with variance ``trials_sharpe_variance``:
    E[SR] + sqrt(V) ((1 - gamma) Phi^-1(1 - 1/N) + gamma Phi^-1(1 - 1/(N e))) (Bailey and Lopez de Prado 2014,
    eq. 6, with E[SR] = 0 for "no skill at all"; gamma the Euler-Mascheroni constant). E[SR] for one trial."""
    if n_trials < 1 or trials_sharpe_variance < 0:
        raise ValueError(f"n_trials >= 1 and a variance >= 0 are needed, got {n_trials}, {trials_sharpe_variance}")
    if n_trials == 1:
        return float(trials_mean_sharpe)
    z1 = stats.norm.ppf(1.0 - 1.0 / n_trials)
    z2 = stats.norm.ppf(1.0 - 1.0 / (n_trials * math.e))
    luck = math.sqrt(trials_sharpe_variance) * ((1.0 - EULER_GAMMA) * z1 + EULER_GAMMA * z2)
    return float(trials_mean_sharpe + luck)


def deflated_sharpe_ratio(
    returns, n_trials: int, trials_sharpe_variance: float, trials_mean_sharpe: float = 0.0
) -> float:
    """The probabilistic Sharpe ratio of ``returns`` against the expected maximum Sharpe ratio of ``n_trials``
    skill-less trials (the trials actually run: variants x tau x costs x rules x folds), centred on
    ``trials_mean_sharpe`` (0: skill-less means a Sharpe of 0; the trials' mean: no better than the average
    trial, e.g. when every trial rides the same market)."""
    return probabilistic_sharpe_ratio(
        returns, expected_maximum_sharpe(n_trials, trials_sharpe_variance, trials_mean_sharpe)
    )


def default_block(n_periods: int) -> int:
    """The stationary bootstrap's mean block length: sqrt(T), at least 1."""
    return max(1, int(round(math.sqrt(n_periods))))


def _losses(benchmark_returns, strategy_returns) -> tuple[np.ndarray, np.ndarray]:
    bench = -np.asarray(benchmark_returns, dtype=np.float64).reshape(-1)
    models = -np.asarray(strategy_returns, dtype=np.float64)
    models = models.reshape(-1, 1) if models.ndim == 1 else models
    if models.shape[0] != bench.size:
        raise ValueError(f"the strategies have {models.shape[0]} days, the benchmark {bench.size}: align them first")
    if not (np.isfinite(bench).all() and np.isfinite(models).all()):
        raise ValueError("returns must be finite (align the series on common days first)")
    return bench, models


def spa_pvalues(benchmark_returns, strategy_returns, *, reps: int = 1000, block: int | None = None, seed: int = 0):
    """Hansen's SPA test of H0 "no strategy beats the benchmark", on losses = -returns (T, and T x k):
    {"lower", "consistent", "upper"} p-values (arch ``SPA``, stationary bootstrap, studentized)."""
    from arch.bootstrap import SPA

    bench, models = _losses(benchmark_returns, strategy_returns)
    spa = SPA(bench, models, block_size=block or default_block(bench.size), reps=reps, seed=seed)
    spa.compute()
    return {k: float(v) for k, v in spa.pvalues.items()}


def stepm_superior(
    benchmark_returns, strategy_returns, names, *, size: float = 0.05, reps: int = 1000, block=None, seed: int = 0
) -> list[str]:
    """Romano and Wolf's StepM: the names of the strategies that beat the benchmark at level ``size``, with the
    family-wise error controlled (arch ``StepM``)."""
    from arch.bootstrap import StepM

    bench, models = _losses(benchmark_returns, strategy_returns)
    names = list(names)
    stepm = StepM(bench, models, size=size, block_size=block or default_block(bench.size), reps=reps, seed=seed)
    stepm.compute()
    return [names[int(i)] for i in stepm.superior_models]


def model_confidence_set(
    strategy_returns,
    names,
    *,
    size: float = 0.05,
    reps: int = 1000,
    block=None,
    seed: int = 0,
    same_within: float = SAME_SERIES_ATOL,
) -> dict[str, float]:
    """Hansen, Lunde and Nason's model confidence set on losses = -returns (T x k): {name: MCS p-value}; the set at
    level ``size`` is the names whose p-value exceeds it (arch ``MCS``, method "R"). Series that no day tells apart by
    more than ``same_within`` (strategies flat in cash alike, or the same trades pooled in another order, 1e-18
    apart) are one series: the set is computed on the distinct ones, each name given its series' p-value (arch divides
    their mean difference, 0, by its bootstrap variance, 0, and fails); one distinct series: p 1 each."""
    from arch.bootstrap import MCS

    losses = -np.asarray(strategy_returns, dtype=np.float64)
    if not np.isfinite(losses).all():
        raise ValueError("returns must be finite (align the series on common days first)")
    names = list(names)
    kept, which = distinct_columns(losses, same_within)
    if len(kept) == 1:
        return dict.fromkeys(names, 1.0)
    mcs = MCS(losses[:, kept], size=size, reps=reps, block_size=block or default_block(losses.shape[0]), seed=seed)
    mcs.compute()
    pvalues = {int(i): float(p) for i, p in mcs.pvalues.iloc[:, 0].items()}
    return {name: pvalues[int(k)] for name, k in zip(names, which)}


def distinct_columns(x: np.ndarray, atol: float) -> tuple[list[int], np.ndarray]:
    """The columns of ``x`` (T x k) that differ from every earlier kept one by more than ``atol`` on some row, in
    order, and for each column the position among them of the first kept column within ``atol`` of it."""
    kept: list[int] = []
    which = np.empty(x.shape[1], dtype=np.int64)
    for j in range(x.shape[1]):
        same = next((r for r, col in enumerate(kept) if np.abs(x[:, j] - x[:, col]).max() <= atol), None)
        if same is None:
            same = len(kept)
            kept.append(j)
        which[j] = same
    return kept, which


def sharpe_difference_interval(
    returns_a, returns_b, *, reps: int = 1000, block: int | None = None, seed: int = 0, alpha: float = 0.05
) -> tuple[float, float, float]:
    """(SR_a - SR_b, low, high): the per-period Sharpe difference and its percentile interval from a stationary
    bootstrap that resamples the two series' days together (arch ``StationaryBootstrap``)."""
    diff, low, high, _, _ = sharpe_difference_test(returns_a, returns_b, reps=reps, block=block, seed=seed, alpha=alpha)
    return diff, low, high


def sharpe_difference_test(
    returns_a, returns_b, *, reps: int = 1000, block: int | None = None, seed: int = 0, alpha: float = 0.05
) -> tuple[float, float, float, float, float]:
    """``sharpe_difference_interval``, its two-sided bootstrap p-value of "no difference" (twice the share of
    resampled differences on the far side of 0: the percentile interval's duality, p < alpha exactly when the
    interval excludes 0; at most 1) and the bootstrap standard error. NaN throughout when a Sharpe ratio is
    undefined (a flat record)."""
    from arch.bootstrap import StationaryBootstrap

    a, b = np.asarray(returns_a, dtype=np.float64), np.asarray(returns_b, dtype=np.float64)
    if a.shape != b.shape or not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("two finite return series of the same days are needed")

    def difference(x: np.ndarray, y: np.ndarray) -> float:
        return sharpe_ratio(x) - sharpe_ratio(y)

    point = difference(a, b)
    if not np.isfinite(point):
        return (float("nan"),) * 5
    bootstrap = StationaryBootstrap(block or default_block(a.size), a, b, seed=seed)
    draws = np.array([difference(*pos) for pos, _ in bootstrap.bootstrap(reps)])
    draws = draws[np.isfinite(draws)]
    if not draws.size:
        return point, float("nan"), float("nan"), float("nan"), float("nan")
    low, high = np.quantile(draws, [alpha / 2, 1 - alpha / 2])
    p = 1.0 if point == 0 else min(1.0, 2.0 * float(np.mean(draws <= 0) if point > 0 else np.mean(draws >= 0)))
    return point, float(low), float(high), p, float(draws.std(ddof=1)) if draws.size > 1 else float("nan")


def sharpe_difference_hac(
    returns_a, returns_b, lags: int, alpha: float = 0.05
) -> tuple[float, float, float, float, float]:
    """Ledoit and Wolf's (2008) HAC test of Sharpe(a) - Sharpe(b) on the same days: the delta method on the moments
    (mean and mean square of each series), their long-run covariance by Newey-West (Bartlett weights, ``lags``;
    statsmodels' ``S_hac_simple`` of the demeaned moments, over T). (difference, the 1 - alpha interval, its
    two-sided normal p-value, the standard error), per day (Sharpe ratios of ``sharpe_ratio``'s convention, the
    population standard deviation); NaN throughout when a series is flat. Unlike the stationary bootstrap of
    ``sharpe_difference_test`` (7.4% rejections at 5% on skill-less pairs, science-6 L-B) it holds its size on
    pairs of long/cash strategies (``unit/test_multiple_testing.py``)."""
    from scipy.stats import norm
    from statsmodels.stats.sandwich_covariance import S_hac_simple

    a, b = np.asarray(returns_a, dtype=np.float64), np.asarray(returns_b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("two finite return series of the same days are needed")
    mu_a, mu_b, sq_a, sq_b = a.mean(), b.mean(), np.mean(a * a), np.mean(b * b)
    var_a, var_b = sq_a - mu_a**2, sq_b - mu_b**2
    if not (var_a > 0 and var_b > 0):
        return (float("nan"),) * 5
    diff = mu_a / np.sqrt(var_a) - mu_b / np.sqrt(var_b)
    gradient = np.array([sq_a / var_a**1.5, -sq_b / var_b**1.5, -mu_a / (2 * var_a**1.5), mu_b / (2 * var_b**1.5)])
    moments = np.column_stack([a - mu_a, b - mu_b, a * a - sq_a, b * b - sq_b])
    psi = S_hac_simple(moments, nlags=int(lags)) / a.size
    se = float(np.sqrt(max(gradient @ psi @ gradient, 0.0) / a.size))
    if not se > 0:
        return float(diff), float("nan"), float("nan"), float("nan"), se
    z = float(norm.ppf(1 - alpha / 2))
    p = float(2 * norm.sf(abs(diff) / se))
    return float(diff), float(diff - z * se), float(diff + z * se), p, se


def detectable(standard_error: float, level: float, power: float = 0.8) -> float:
    """The smallest true effect a one-sided z-test at ``level`` detects with probability ``power`` when its
    estimate has ``standard_error``: (z_{1 - level} + z_{power}) * se (a two-sided test: pass level / 2)."""
    if not np.isfinite(standard_error):
        return float("nan")
    return float((stats.norm.ppf(1 - level) + stats.norm.ppf(power)) * standard_error)


def detectable_sharpe(n_periods: int, level: float, power: float = 0.8, hurdle: float = 0.0) -> float:
    """The smallest per-period Sharpe ratio above ``hurdle`` that a PSR test at ``level`` over ``n_periods``
    detects with probability ``power``, for normal returns: the Sharpe estimate's standard error is
    sqrt((1 + SR^2 / 2) / (T - 1)) (Lo 2002), taken at SR = hurdle."""
    if n_periods < 2:
        return float("nan")
    return hurdle + detectable(math.sqrt((1 + hurdle**2 / 2) / (n_periods - 1)), level, power)


SILHOUETTE_STRUCTURE = 0.25  # Kaufman and Rousseeuw (1990): a silhouette below 0.25 shows no substantial structure
EIGENVALUE_SHARE = 0.95  # the share of the correlation matrix's variance the eigenvalue count of trials explains


def _correlation(returns) -> np.ndarray:
    """The k x k correlation matrix of T x k returns; a constant series is uncorrelated with every other."""
    r = np.asarray(returns, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.atleast_2d(np.corrcoef(r, rowvar=False))
    rho = np.nan_to_num(rho, nan=0.0)
    np.fill_diagonal(rho, 1.0)
    return rho


def silhouettes(distance: np.ndarray, labels) -> np.ndarray:
    """Each point's silhouette (b - a) / max(a, b) under ``labels``, from a precomputed distance matrix: a its mean
    distance to the rest of its cluster, b the least mean distance to another cluster; 0 in a cluster of one
    (Rousseeuw 1987). The numbers of scikit-learn's ``silhouette_samples(..., metric="precomputed")`` (the unit
    test compares them) without its input checks, which made a clustering of 15 series 7 times slower: the
    verdict's tests simulate hundreds of histories."""
    d = np.asarray(distance, dtype=np.float64)
    _, index = np.unique(np.asarray(labels), return_inverse=True)
    onehot = np.eye(index.max() + 1)[index]  # k x c
    sizes = onehot.sum(axis=0)
    sums = d @ onehot  # each point's summed distance to each cluster
    own = sizes[index] - 1
    a = np.divide(sums[np.arange(index.size), index], own, out=np.zeros(index.size), where=own > 0)
    others = np.where(onehot > 0, np.inf, sums / sizes)
    b = others.min(axis=1) if sizes.size > 1 else np.full(index.size, np.nan)
    scale = np.maximum(a, b)
    s = np.divide(b - a, scale, out=np.zeros(index.size), where=scale > 0)
    return np.where(own > 0, s, 0.0)


def trial_clusters(returns) -> np.ndarray:
    """Which independent trial each of k correlated return series (T x k) belongs to: labels 0..n-1.

    The series are clustered on their correlation distance sqrt((1 - rho) / 2) (average linkage), cut into the
    number of clusters 1..k-1 whose mean silhouette is highest (Rousseeuw's average silhouette width; for one
    cluster the nearest other is an uncorrelated series, at distance sqrt(1/2)). Not the silhouette's mean over
    its standard deviation (the quality of Lopez de Prado's ONC, 2019, used here before): that rewards uniformly
    weak silhouettes, so it cut 15 independent series into 2-5 clusters and lumped planted clusters together. A
    cut always groups something, even independent series, so each series whose own silhouette in the chosen cut
    is below 0.25 (Kaufman and Rousseeuw, 1990: no substantial structure; independent series score about 0) is
    not clearly in any cluster: it counts as a trial of its own. So k independent series give k trials (all
    singletons), a planted cluster of very similar series one, and a loose group (rho about 0.3 or less) one per
    member: the count errs towards more trials, a stricter deflation. k <= 2 series are one trial when
    identical, else k."""
    from scipy.cluster.hierarchy import cut_tree, linkage
    from scipy.spatial.distance import squareform

    r = np.asarray(returns, dtype=np.float64)
    k = r.shape[1]
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    distance = np.sqrt(np.clip((1.0 - _correlation(r)) / 2.0, 0.0, None))
    np.fill_diagonal(distance, 0.0)
    if np.all(distance < 1e-6):
        return np.zeros(k, dtype=np.int64)
    if k <= 2:
        return np.arange(k)
    # one cluster: each series' mean distance to the others against an uncorrelated series' sqrt(1/2)
    uncorrelated = math.sqrt(0.5)
    within = distance.sum(axis=1) / (k - 1)
    best, best_silhouette = np.zeros(k, dtype=np.int64), (uncorrelated - within) / np.maximum(within, uncorrelated)
    tree = linkage(squareform(distance, checks=False), method="average")
    for labels in cut_tree(tree, n_clusters=range(2, k)).T:  # the tree cut into 2, ..., k - 1 clusters
        silhouette = silhouettes(distance, labels)
        if silhouette.mean() > best_silhouette.mean():
            best, best_silhouette = labels, silhouette
    labels = np.asarray(best, dtype=np.int64).copy()
    loose = best_silhouette < SILHOUETTE_STRUCTURE
    labels[loose] = labels.max() + 1 + np.arange(int(loose.sum()))  # each a trial of its own
    return np.unique(labels, return_inverse=True)[1].astype(np.int64)


def effective_trials(returns) -> int:
    """The number of independent trials behind k correlated return series (T x k): the clusters of
    ``trial_clusters`` (the silhouette choice; independent series count one each)."""
    return int(np.unique(trial_clusters(returns)).size)


def eigenvalue_trials(returns, share: float = EIGENVALUE_SHARE) -> int:
    """Another count of the independent trials behind k return series (T x k): the number of the correlation
    matrix's largest eigenvalues needed to explain ``share`` (95%) of its variance (its trace k). k independent
    series need about k of them (each eigenvalue near 1), k copies of one series 1, clusters about one each. Not
    the Marchenko-Pastur count above the noise edge: that counts independent series as 0 (all are noise)."""
    r = np.asarray(returns, dtype=np.float64)
    k = r.shape[1]
    if k <= 1:
        return k
    eigenvalues = np.sort(np.clip(np.linalg.eigvalsh(_correlation(r)), 0.0, None))[::-1]
    explained = np.cumsum(eigenvalues) / eigenvalues.sum()
    return int(min(k, np.searchsorted(explained, share - 1e-12) + 1))


def cluster_sharpe_ratios(returns, labels) -> np.ndarray:
    """The Sharpe ratio of each cluster's aggregate return (the equal-weight mean of its members' returns, day by
    day), clusters in label order: the trials whose variance V deflates at the effective N (Lopez de Prado and
    Lewis, 2019, who take V over the clusters' aggregate returns, not over every strategy)."""
    r = np.asarray(returns, dtype=np.float64)
    labels = np.asarray(labels)
    return np.array([sharpe_ratio(r[:, labels == c].mean(axis=1)) for c in np.unique(labels)])
