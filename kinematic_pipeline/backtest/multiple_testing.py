"""Tests that survive multiple testing: how much of a reported Sharpe ratio is luck among the trials run.

- ``probabilistic_sharpe_ratio`` and ``deflated_sharpe_ratio`` (Bailey and Lopez de Prado, 2012 and 2014): the
  probability that the true Sharpe ratio exceeds a benchmark, given the sample's length, skewness and kurtosis;
  deflated, the benchmark is the Sharpe ratio the best of ``n_trials`` strategies with no skill would reach
  (``expected_maximum_sharpe``). Sharpe ratios here are per period (daily), not annualized.
- ``spa_pvalues`` (Hansen's SPA), ``stepm_superior`` (Romano and Wolf's StepM) and ``model_confidence_set``
  (Hansen, Lunde and Nason): arch's implementations, on losses = minus daily net returns, with its stationary
  bootstrap (block length ``default_block``), seeded.
- ``sharpe_difference_interval`` / ``sharpe_difference_test``: a stationary-bootstrap interval (and p-value) of
  the difference of two strategies' Sharpe ratios, the two return series resampled together (arch's
  ``StationaryBootstrap``).
- ``effective_trials``: how many independent trials k correlated strategies amount to (clusters of their return
  correlations), for the deflated Sharpe ratio's N.

Pure numpy / scipy / arch; no dagster, no file I/O. ``kinematic_pipeline_tests/unit/test_multiple_testing.py`` checks
the Sharpe statistics against a hand-computed case and the tests against arch called directly.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

EULER_GAMMA = 0.5772156649015329


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
    r = _finite(returns)
    sr = sharpe_ratio(r)
    if not np.isfinite(sr):
        return float("nan")
    g3 = float(stats.skew(r, bias=True))
    g4 = float(stats.kurtosis(r, fisher=False, bias=True))
    denominator = 1.0 - g3 * sr + (g4 - 1.0) / 4.0 * sr**2
    if denominator <= 0:
        return float("nan")
    return float(stats.norm.cdf((sr - benchmark_sharpe) * math.sqrt(r.size - 1) / math.sqrt(denominator)))


def expected_maximum_sharpe(n_trials: int, trials_sharpe_variance: float) -> float:
    """E[max SR] of ``n_trials`` independent strategies with no skill whose Sharpe ratios vary with variance
    ``trials_sharpe_variance``: sqrt(V) ((1 - gamma) Phi^-1(1 - 1/N) + gamma Phi^-1(1 - 1/(N e)))
    (Bailey and Lopez de Prado 2014, eq. 6; gamma the Euler-Mascheroni constant). 0 for one trial."""
    if n_trials < 1 or trials_sharpe_variance < 0:
        raise ValueError(f"n_trials >= 1 and a variance >= 0 are needed, got {n_trials}, {trials_sharpe_variance}")
    if n_trials == 1:
        return 0.0
    z1 = stats.norm.ppf(1.0 - 1.0 / n_trials)
    z2 = stats.norm.ppf(1.0 - 1.0 / (n_trials * math.e))
    return float(math.sqrt(trials_sharpe_variance) * ((1.0 - EULER_GAMMA) * z1 + EULER_GAMMA * z2))


def deflated_sharpe_ratio(returns, n_trials: int, trials_sharpe_variance: float) -> float:
    """The probabilistic Sharpe ratio of ``returns`` against the expected maximum Sharpe ratio of ``n_trials``
    skill-less trials (the trials actually run: variants x tau x costs x rules x folds)."""
    return probabilistic_sharpe_ratio(returns, expected_maximum_sharpe(n_trials, trials_sharpe_variance))


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
    strategy_returns, names, *, size: float = 0.05, reps: int = 1000, block=None, seed: int = 0
) -> dict[str, float]:
    """Hansen, Lunde and Nason's model confidence set on losses = -returns (T x k): {name: MCS p-value}; the set at
    level ``size`` is the names whose p-value exceeds it (arch ``MCS``, method "R")."""
    from arch.bootstrap import MCS

    losses = -np.asarray(strategy_returns, dtype=np.float64)
    if not np.isfinite(losses).all():
        raise ValueError("returns must be finite (align the series on common days first)")
    mcs = MCS(losses, size=size, reps=reps, block_size=block or default_block(losses.shape[0]), seed=seed)
    mcs.compute()
    names = list(names)
    pvalues = mcs.pvalues.iloc[:, 0]
    return {names[int(i)]: float(p) for i, p in pvalues.items()}


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


def effective_trials(returns) -> int:
    """The number of independent trials behind k correlated return series (T x k): the clusters of their
    correlation distance sqrt((1 - rho) / 2), cut where the silhouette's mean over its standard deviation is
    highest (the quality score of Lopez de Prado's ONC, 2019, over average-linkage clusters instead of k-means).
    k for k <= 2; 1 when every pair is perfectly correlated."""
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import squareform
    from sklearn.metrics import silhouette_samples

    r = np.asarray(returns, dtype=np.float64)
    k = r.shape[1]
    if k <= 2:
        return k
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.corrcoef(r, rowvar=False)
    rho = np.nan_to_num(rho, nan=0.0)  # a constant series is uncorrelated with every other
    np.fill_diagonal(rho, 1.0)
    distance = np.sqrt(np.clip((1.0 - rho) / 2.0, 0.0, None))
    if np.all(distance < 1e-6):
        return 1
    tree = linkage(squareform(distance, checks=False), method="average")
    best, best_quality = k, -np.inf
    for n in range(2, k):
        labels = fcluster(tree, n, criterion="maxclust")
        if len(np.unique(labels)) < 2:
            continue
        silhouette = silhouette_samples(distance, labels, metric="precomputed")
        quality = silhouette.mean() / silhouette.std() if silhouette.std() > 0 else np.inf
        if quality > best_quality:
            best, best_quality = len(np.unique(labels)), quality
    return int(best)
