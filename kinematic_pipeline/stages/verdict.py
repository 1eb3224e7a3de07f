"""The verdict: the report's three questions answered with tests that survive multiple testing.

1. Does any strategy beat Buy & Hold after costs? Each (variant, tau) strategy's daily net return (the
   paper's rule, at ``evaluate.verdict_cost_bps``; an equal-weight portfolio of the backtested tickers, the
   seeds averaged) against Buy & Hold's on the same pooled out-of-sample days: Hansen's SPA p-values (lower /
   consistent / upper) and Romano-Wolf StepM's set at 5%; the best strategy's probabilistic and deflated
   Sharpe ratio, with the trials counted from what the run evaluated (variants x taus x costs x rules x folds).
2. Does any model carry directional information beyond the trivial baseline? The daily cross-sectional rank
   IC on the universe (report's tau, seeds averaged) of each model and probe minus that of the trivial probe
   (``lr_trivial``), with its Newey-West t and Holm-adjusted one-sided p-values; and the same against 0 (does
   the score rank tomorrow's returns at all: a trivial probe with a negative IC flatters every other).
3. Do spline tokens beat finite differences? Stationary-bootstrap 95% intervals of the Sharpe difference of each
   matched ablation (SplineGPT vs RawGPT-FD and vs RawGPT; each probe on spline vs on fd tokens).
Beside them the model confidence set across the strategies. Every answer is a template filled with the
numbers (``multiple_testing``: arch's SPA, StepM, MCS, StationaryBootstrap). No dagster here.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from scipy import stats as sps

from kinematic_pipeline.backtest import multiple_testing as mt
from kinematic_pipeline.backtest.signal import daily_ic, newey_west_t
from kinematic_pipeline.config import Settings
from kinematic_pipeline.label_rules import tau_key
from kinematic_pipeline.variants import BENCHMARK, display_name
from kinematic_pipeline.warehouse import BACKTESTS, EQUITY_CURVES

LEVEL = 0.05
ABLATIONS = (
    ("splinegpt", "rawgpt_fd"),
    ("splinegpt", "rawgpt"),
    ("lr_spline", "lr_fd"),
    ("lightgbm_spline", "lightgbm_fd"),
)
TRIVIAL = "lr_trivial"
VERDICT_SCHEMA = {
    "Question": pl.String,
    "Test": pl.String,
    "Statistic": pl.String,
    "Interval or p-value": pl.String,
    "Trials": pl.String,
    "Answer": pl.String,
}


def strategy_returns(settings: Settings, equity: pl.DataFrame) -> tuple[list[str], np.ndarray, np.ndarray, list]:
    """(names, returns T x k, Buy & Hold's returns T, days): the daily net return of every (variant, tau)
    tested on every fold, at the verdict's cost: the mean over the backtested tickers and seeds of each day's
    equity change, on the days every strategy and Buy & Hold share."""
    rows = equity.filter(pl.col("cost_bps") == settings.evaluate.verdict_cost_bps)
    if "folds" in rows.columns:
        rows = rows.filter(pl.col("folds") == pl.col("folds").max())
    rows = rows.sort("variant", "tau", "seed", "ticker", "date").with_columns(
        (pl.col("equity") / pl.col("equity").shift(1) - 1).over("variant", "tau", "seed", "ticker").alias("r")
    )
    rows = rows.filter(pl.col("r").is_not_null())
    name = pl.when(pl.col("variant") == BENCHMARK).then(pl.lit(BENCHMARK))
    name = name.otherwise(pl.col("variant") + pl.lit(" tau=") + pl.col("tau").round(4).cast(pl.String))
    daily = rows.with_columns(name.alias("strategy")).group_by("strategy", "date").agg(pl.col("r").mean())
    wide = daily.pivot(on="strategy", index="date", values="r").sort("date").drop_nulls()
    names = sorted(c for c in wide.columns if c not in ("date", BENCHMARK))
    if BENCHMARK not in wide.columns or not names:
        raise ValueError("the verdict needs Buy & Hold and at least one strategy on common days")
    names, returns = _distinct(names, wide.select(names).to_numpy())
    return names, returns, wide[BENCHMARK].to_numpy(), wide["date"].to_list()


def _distinct(names: list[str], returns: np.ndarray) -> tuple[list[str], np.ndarray]:
    """One column per distinct return series (a rule that never trades at any tau is one strategy, not four:
    identical columns would make the MCS's loss differences degenerate); the name lists its twins."""
    kept: dict[bytes, int] = {}
    twins: dict[int, list[str]] = {}
    for j, name in enumerate(names):
        key = np.ascontiguousarray(returns[:, j]).tobytes()
        first = kept.setdefault(key, j)
        twins.setdefault(first, []).append(name)
    columns = sorted(kept.values())
    label = [names[j] + (f" (= {len(twins[j]) - 1} identical)" if len(twins[j]) > 1 else "") for j in columns]
    return label, returns[:, columns]


def count_trials(settings: Settings, metrics_view: pl.DataFrame) -> tuple[int, str]:
    """The configurations this run evaluated: (variant, tau, fold) backtests x costs x decision rules."""
    policies = metrics_view.filter(pl.col("variant") != BENCHMARK).select("variant", "tau", "fold").unique()
    costs, rules = len(settings.evaluate.costs_bps), 2
    n = policies.height * costs * rules
    return n, f"{n} = {policies.height} (variant, tau, fold) x {costs} costs x {rules} rules"


def _p(value: float) -> str:
    return "nan" if not np.isfinite(value) else (f"{value:.3f}" if value >= 0.001 else "<0.001")


def _annual(daily_sharpe: float) -> float:
    return daily_sharpe * np.sqrt(252)


def beat_buy_and_hold(settings: Settings, equity: pl.DataFrame, trials: tuple[int, str]) -> list[dict]:
    ev = settings.evaluate
    names, returns, bench, days = strategy_returns(settings, equity)
    reps, seed = ev.verdict_bootstrap_resamples, ev.verdict_seed
    spa = mt.spa_pvalues(bench, returns, reps=reps, seed=seed)
    superior = mt.stepm_superior(bench, returns, names, size=LEVEL, reps=reps, seed=seed)
    sharpes = np.array([mt.sharpe_ratio(returns[:, j]) for j in range(len(names))])
    best = int(np.nanargmax(sharpes))
    n_trials = max(trials[0], len(names))
    variance = float(np.nanvar(sharpes, ddof=1)) if len(names) > 1 else 0.0
    psr = mt.probabilistic_sharpe_ratio(returns[:, best])
    dsr = mt.deflated_sharpe_ratio(returns[:, best], n_trials, variance)
    question = f"Does any strategy beat Buy & Hold after costs ({ev.verdict_cost_bps:g} bps a side)?"
    period = f"{days[0]} .. {days[-1]}, {len(days)} days, {len(names)} strategies"
    answer = (
        f"yes: StepM finds {len(superior)} strateg{'y' if len(superior) == 1 else 'ies'} better at 5% "
        f"({', '.join(superior[:4])}{'...' if len(superior) > 4 else ''})"
        if superior
        else f"no evidence at the 5% level (SPA consistent p = {_p(spa['consistent'])}; StepM: none)"
    )
    bench_sharpe = mt.sharpe_ratio(bench)
    rows = [
        {
            "Question": question,
            "Test": f"Hansen SPA vs Buy & Hold ({period}); losses = -daily net returns",
            "Statistic": f"best {names[best]}: Sharpe {_annual(sharpes[best]):.2f} vs Buy & Hold "
            f"{_annual(bench_sharpe):.2f} (annualized)",
            "Interval or p-value": f"p lower {_p(spa['lower'])}, consistent {_p(spa['consistent'])}, "
            f"upper {_p(spa['upper'])}",
            "Trials": trials[1],
            "Answer": answer,
        },
        {
            "Question": question,
            "Test": f"Probabilistic / deflated Sharpe ratio of the best strategy ({names[best]})",
            "Statistic": f"PSR(SR > 0) {psr:.3f}; DSR {dsr:.3f} (expected max Sharpe of {n_trials} unskilled "
            f"trials {_annual(mt.expected_maximum_sharpe(n_trials, variance)):.2f} annualized)",
            "Interval or p-value": f"p = {_p(1 - dsr)} (1 - DSR)",
            "Trials": trials[1],
            "Answer": "the best Sharpe survives deflation at 5%"
            if dsr > 1 - LEVEL
            else "no evidence at the 5% level once the trials are counted",
        },
    ]
    mcs = mt.model_confidence_set(returns, names, size=LEVEL, reps=reps, seed=seed)
    kept = [n for n, p in mcs.items() if p > LEVEL]
    rows.append(
        {
            "Question": "Which strategies are the best (model confidence set)?",
            "Test": f"Hansen-Lunde-Nason model confidence set at 5% (method R) over {len(names)} strategies",
            "Statistic": f"{len(kept)} of {len(names)} in the set",
            "Interval or p-value": ", ".join(f"{n} {_p(p)}" for n, p in sorted(mcs.items(), key=lambda x: -x[1])[:5]),
            "Trials": trials[1],
            "Answer": "every strategy is in the set: the data cannot tell them apart"
            if len(kept) == len(names)
            else f"the set keeps {', '.join(kept[:5])}{'...' if len(kept) > 5 else ''}",
        }
    )
    return rows


def information_beyond_trivial(settings: Settings, universe: pl.DataFrame | None) -> list[dict]:
    """Two rows: each model's and probe's daily rank IC minus the trivial probe's, and its own IC against 0 (a
    trivial probe with a negative IC, the one-day reversal, makes every other score look informative beside it)."""
    if universe is None or universe.height == 0:
        return []
    scores = universe.group_by("variant", "ticker", "date").agg(pl.col("score").mean(), pl.col("r_close").first())
    ic = {
        v: daily_ic(g, "score", "r_close").select("date", "rank_ic")
        for (v,), g in scores.group_by("variant", maintain_order=True)
    }
    tested = [v for v in sorted(ic) if v != TRIVIAL and not v.startswith(("always", "momentum"))]
    reference = ic.get(TRIVIAL)
    rows = []
    if reference is not None:
        rows += _ic_row(
            "Does any model carry directional information beyond the trivial baseline?",
            f"daily rank IC on the universe minus {display_name(TRIVIAL)}'s",
            {v: ic[v] for v in tested},
            reference,
        )
    rows += _ic_row(
        "Does any model's score rank the next day's returns (rank IC > 0)?",
        "daily rank IC on the universe against 0",
        {v: ic[v] for v in tested},
        None,
    )
    return rows


def _ic_row(question: str, test: str, ic: dict[str, pl.DataFrame], reference: pl.DataFrame | None) -> list[dict]:
    """One verdict row: a one-sided Newey-West t of each variant's daily IC (minus ``reference``'s on the same
    days), Holm-adjusted over the variants."""
    from statsmodels.stats.multitest import multipletests

    tests = []
    for v, daily in ic.items():
        if reference is not None:
            daily = daily.join(reference, on="date", suffix="_ref").with_columns(
                (pl.col("rank_ic") - pl.col("rank_ic_ref")).alias("rank_ic")
            )
        x = daily["rank_ic"].to_numpy()
        t, _, _ = newey_west_t(x)
        p = float(sps.norm.sf(t)) if np.isfinite(t) else float("nan")
        tests.append((v, float(np.nanmean(x)) if x.size else float("nan"), t, p, x.size))
    if not tests:
        return []
    pvals = np.array([p if np.isfinite(p) else 1.0 for *_, p, _ in tests])
    reject, adjusted, _, _ = multipletests(pvals, alpha=LEVEL, method="holm")
    winners = [tests[i][0] for i in range(len(tests)) if reject[i]]
    best = int(np.argmin(adjusted))
    return [
        {
            "Question": question,
            "Test": f"{test}, Newey-West t, one-sided, Holm over {len(tests)} models and probes "
            f"({tests[best][4]} days)",
            "Statistic": "; ".join(f"{v} {m:+.4f} (t {t:.2f})" for v, m, t, _, _ in tests),
            "Interval or p-value": f"smallest Holm p = {_p(adjusted[best])} ({tests[best][0]})",
            "Trials": f"{len(tests)} (one per model and probe)",
            "Answer": f"yes: {', '.join(winners)} at 5% (Holm)" if winners else "no evidence at the 5% level",
        }
    ]


def spline_vs_fd(settings: Settings, equity: pl.DataFrame, trials: tuple[int, str]) -> list[dict]:
    ev = settings.evaluate
    names, returns, _, days = strategy_returns(settings, equity)
    column = {n: returns[:, j] for j, n in enumerate(names)}
    tau = f" tau={round(ev.report_tau, 4)}"
    rows = []
    for a, b in ABLATIONS:
        if a + tau not in column or b + tau not in column:
            continue
        diff, low, high = mt.sharpe_difference_interval(
            column[a + tau], column[b + tau], reps=ev.verdict_bootstrap_resamples, seed=ev.verdict_seed
        )
        covers = low <= 0 <= high
        rows.append(
            {
                "Question": "Do spline tokens beat finite differences?",
                "Test": f"{display_name(a)} - {display_name(b)}: stationary-bootstrap 95% interval of the Sharpe "
                f"difference (tau {tau_key(ev.report_tau)}, {ev.verdict_cost_bps:g} bps, {len(days)} days)",
                "Statistic": f"{_annual(diff):+.2f} (annualized)",
                "Interval or p-value": f"[{_annual(low):+.2f}, {_annual(high):+.2f}]",
                "Trials": trials[1],
                "Answer": "no evidence at the 5% level (the interval holds 0)"
                if covers
                else (f"yes: {display_name(a)} is better" if low > 0 else f"no: {display_name(b)} is better"),
            }
        )
    return rows


def verdict_table(settings: Settings, equity: pl.DataFrame, metrics_view: pl.DataFrame, universe) -> pl.DataFrame:
    """The verdict rows (VERDICT_SCHEMA): questions 1-3 and the model confidence set."""
    trials = count_trials(settings, metrics_view)
    rows = beat_buy_and_hold(settings, equity, trials)
    rows += information_beyond_trivial(settings, universe)
    rows += spline_vs_fd(settings, equity, trials)
    return pl.DataFrame(rows, schema=VERDICT_SCHEMA)


def materialize_verdict(settings: Settings) -> pl.DataFrame:
    """The verdict of the run's pooled out-of-sample records (``stages.pooled``), written with the tables."""
    from kinematic_pipeline.stages.evidence import evaluated_variants, read_view, universe_predictions
    from kinematic_pipeline.stages.pooled import read_pooled

    equity = read_pooled(settings, EQUITY_CURVES)
    try:
        universe = universe_predictions(settings, evaluated_variants(settings))
    except FileNotFoundError:
        universe = None
    return verdict_table(settings, equity, read_view(settings, BACKTESTS), universe)
