"""The verdict's luck-of-the-trials rows: the deflated Sharpe of the best strategy (hurdle centred on the trials'
mean Sharpe) and of the best active return, N and V over the same defined Sharpe ratios, the effective N a range
given as information only (``stages.verdict``, question 2). No dagster here.
"""

from __future__ import annotations

import numpy as np

from kinematic_pipeline.backtest import multiple_testing as mt
from kinematic_pipeline.backtest.portfolio import CONVENTION
from kinematic_pipeline.stages.verdict_signal import (
    LEVEL,
    POWER,
    annual,
    p_text,
)

SHARPE_CONVENTION = f"daily net excess returns, {CONVENTION}"


def _count(n: int, things: str) -> str:
    return f"{n} {things if n != 1 else things.removesuffix('s')}"


def _deflation_row(
    question: str, test: str, series: np.ndarray, names: list[str], *, centred: bool, passes: str, left_out: str
) -> dict:
    """The deflated Sharpe ratio of the best of ``series`` (T x N, every Sharpe ratio defined) among them: at N
    (answers) and at the effective N's range (information only). ``centred``: the hurdle is centred on the trials'
    mean Sharpe, not 0; ``passes``: what a pass means; ``left_out``: the records left out of N and V."""
    sharpes = np.array([mt.sharpe_ratio(series[:, j]) for j in range(series.shape[1])])
    n, best = len(names), int(np.argmax(sharpes))
    returns = series[:, best]
    v = float(np.var(sharpes, ddof=1)) if n > 1 else 0.0
    labels = mt.trial_clusters(series)
    clusters = mt.cluster_sharpe_ratios(series, labels)
    clusters = clusters[np.isfinite(clusters)]
    n_eig = mt.eigenvalue_trials(series)
    trials = {  # (N, V, E[SR]) of the full N and of the two effective Ns
        "N": (n, v, float(sharpes.mean()) if centred else 0.0),
        "clusters": (
            clusters.size,
            float(np.var(clusters, ddof=1)) if clusters.size > 1 else 0.0,
            float(clusters.mean()) if centred and clusters.size else 0.0,
        ),
        "eigenvalues": (n_eig, v, float(sharpes.mean()) if centred else 0.0),
    }
    hurdle = {k: mt.expected_maximum_sharpe(*t) for k, t in trials.items()}
    psr, *deflated = map(float, mt.probabilistic_sharpe_ratios(returns, [0.0, *hurdle.values()]))
    dsr = dict(zip(hurdle, deflated))
    effective = f"{min(clusters.size, n_eig)}-{max(clusters.size, n_eig)}"
    at_effective = "; ".join(f"{dsr[k]:.3f} at {_count(trials[k][0], k)}" for k in ("clusters", "eigenvalues"))
    if not np.isfinite(dsr["N"]):
        answer = "undefined (a Sharpe ratio's moments are degenerate)"
    elif dsr["N"] > 1 - LEVEL:
        answer = f"yes: {passes} at 5% with N = {n} (DSR {dsr['N']:.3f}; at the effective N {at_effective})"
    else:
        answer = f"no evidence at the 5% level with N = {n} (DSR {dsr['N']:.3f})"
        if any(np.isfinite(dsr[k]) and dsr[k] > 1 - LEVEL for k in ("clusters", "eigenvalues")):
            answer += (
                f"; it would pass at the effective N ({at_effective}), which alone never answers yes: an effective "
                "N is a count of what the trials amount to, not of the trials run"
            )
    centre = f"; mean trial Sharpe {annual(trials['N'][2]):.2f}" if centred else ""
    return {
        "Question": question,
        "Test": f"{test} ({names[best]}); Sharpe of {SHARPE_CONVENTION}",
        "Statistic": f"Sharpe {annual(sharpes[best]):.2f} annualized{centre}; PSR(SR > 0) "
        f"{psr:.3f}; DSR {dsr['N']:.3f} at N = {n} (hurdle "
        f"{annual(hurdle['N']):.2f}); at the effective N (information only): "
        + "; ".join(
            f"{dsr[k]:.3f} at {_count(trials[k][0], k)} (hurdle {annual(hurdle[k]):.2f})"
            for k in ("clusters", "eigenvalues")
        ),
        "Interval or p-value": f"p = {p_text(1 - dsr['N'])} at N (1 - DSR); "
        f"{p_text(1 - dsr['clusters'])} / {p_text(1 - dsr['eigenvalues'])} at the effective N (information)",
        "Trials": f"N = {n} strategies with a defined Sharpe ratio{left_out}; V = their Sharpe ratios' variance"
        + ("; the hurdle centred on their mean Sharpe" if centred else "")
        + f"; effective N {effective}: {_count(clusters.size, 'silhouette clusters')} of their return correlations "
        f"({'V and mean' if centred else 'V'} over the clusters' equal-weight aggregate returns' Sharpe ratios), "
        f"{_count(n_eig, 'eigenvalues')} for {mt.EIGENVALUE_SHARE:.0%} of their correlation matrix (V over all N)",
        "Answer": answer,
        "Detectable at 80% power": "a Sharpe of "
        + " / ".join(f"{annual(mt.detectable_sharpe(returns.size, LEVEL, POWER, hurdle[k])):.2f}" for k in trials)
        + f" a year at N / {_count(clusters.size, 'clusters')} / {_count(n_eig, 'eigenvalues')} ({returns.size} days)",
    }


def luck_of_the_trials(names: list[str], returns: np.ndarray, bench: np.ndarray) -> list[dict]:
    """Question 2's rows: the best strategy's Sharpe above the average trial's by more than luck, and the best
    active return (strategy - Buy & Hold) above 0 by more than luck (``_deflation_row``). Only strategies whose
    Sharpe ratio is defined count, in N and V alike."""
    rows = []
    for series, question, test, centred, passes in (
        (
            returns,
            "Is the best strategy's Sharpe above the average trial's Sharpe by more than the luck of N trials?",
            "Deflated Sharpe ratio of the best strategy's daily net returns, hurdle E[SR] + sqrt(V) E[max of N] "
            "centred on the trials' mean Sharpe (long/cash trials share the market's: a hurdle at 0 passes them)",
            True,
            "above the average trial's Sharpe by more than the luck of the trials",
        ),
        (
            returns - bench[:, None],
            "Does the best strategy's return beyond Buy & Hold's exceed the luck of the trials?",
            "Probabilistic / deflated Sharpe ratio of the best active return (strategy - Buy & Hold, daily), "
            "hurdle sqrt(V) E[max of N] above 0",
            False,
            "survives deflation",
        ),
    ):
        sharpes = np.array([mt.sharpe_ratio(series[:, j]) for j in range(series.shape[1])])
        defined = np.isfinite(sharpes)
        if not defined.any():
            continue
        flat = int((~defined).sum())
        left_out = (
            f" ({flat} record{'s' if flat > 1 else ''} whose Sharpe is undefined, never in the market, left out of "
            "N and V)"
            if flat
            else ""
        )
        kept = [name for name, d in zip(names, defined) if d]
        rows.append(
            _deflation_row(question, test, series[:, defined], kept, centred=centred, passes=passes, left_out=left_out)
        )
    return rows
