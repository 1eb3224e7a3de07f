"""The verdict: the report's questions, each row answered by exactly the statistic it names.

1. Does any strategy beat Buy & Hold after costs and taxes? Each pooled (variant, tau, rule) strategy's daily net
   return (both decision rules: the paper's argmax and the margin rule; at ``evaluate.verdict_cost_bps``; an
   equal-weight portfolio of the backtested tickers, the seeds averaged) against Buy & Hold's on the same
   out-of-sample days: Hansen's SPA answers whether any does (its consistent p-value); Romano-Wolf StepM's set at
   5% says which. Strategies pay tax on realised gains, Buy & Hold never realises (the engine's convention). Daily
   returns are in excess of the risk-free rate with cash credited with it (``backtest.portfolio``: bounded, so
   a policy almost always in cash is near 0, not -300).
2. Is the best Sharpe more than the luck of the trials? The best strategy's probabilistic and deflated Sharpe
   ratios, N = the pooled strategies compared and V = the variance of their Sharpe ratios (one set), and the DSR
   at the effective N of their return correlations' clusters; the same for the best active return (strategy -
   Buy & Hold). Sharpe ratios here are of those excess returns, unlike the paper tables' (4% a year subtracted
   from a cash that earns nothing).
3. Does any model carry directional information beyond the trivial features? The daily cross-sectional partial
   rank IC on the universe (report's tau, seeds averaged) of each model and probe given ret1 and vol20 (the
   trivial probe's features, their ranks regressed out within each day), with its Newey-West t and Holm-adjusted
   one-sided p-values; and the plain rank IC against 0 (does the score rank tomorrow's returns at all).
4. Do spline tokens beat finite differences? One family, Holm-adjusted: each matched ablation (SplineGPT vs
   RawGPT-FD and vs RawGPT; each probe on spline vs on fd tokens) by the stationary-bootstrap Sharpe difference
   under each rule, and on the universe by the paired differences of their daily rank IC and of their daily mean
   log loss on close-to-close labels (far more days x tickers than six tickers' Sharpe ratios). An ablation that cannot
   be computed gets a row saying why; an undefined statistic answers "undefined".
Beside them the model confidence set across the strategies. Every answer is a template filled with the
numbers (``multiple_testing``: arch's SPA, StepM, MCS, StationaryBootstrap). No dagster here.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from kinematic_pipeline import exact_paths as exact
from kinematic_pipeline.backtest import multiple_testing as mt
from kinematic_pipeline.backtest.portfolio import CONVENTION
from kinematic_pipeline.config import Settings
from kinematic_pipeline.label_rules import tau_key
from kinematic_pipeline.layout import VERDICT_FILE, VERDICT_PIN_FILE
from kinematic_pipeline.pins import StalePairError, check_evaluation, evaluation_digest, pin_evaluation
from kinematic_pipeline.report.markdown import markdown_table
from kinematic_pipeline.stages.strategies import RULES, Strategies, count_trials, strategy_name, strategy_returns
from kinematic_pipeline.stages.verdict_signal import (
    LEVEL,
    POWER,
    Comparison,
    annual,
    daily_ics,
    daily_log_losses,
    information_beyond_trivial,
    p_text,
    paired,
    trivial_features,
)
from kinematic_pipeline.variants import ABLATIONS, display_name
from kinematic_pipeline.warehouse import EQUITY_CURVES

SHARPE_CONVENTION = f"daily net excess returns, {CONVENTION}"
VERDICT_SCHEMA = {
    "Question": pl.String,
    "Test": pl.String,
    "Statistic": pl.String,
    "Interval or p-value": pl.String,
    "Trials": pl.String,
    "Answer": pl.String,
    "Detectable at 80% power": pl.String,  # the smallest true effect this run's size detects at the row's level
}


def spa_answer(p_consistent: float, superior: list[str]) -> str:
    """SPA answers whether any strategy beats Buy & Hold; StepM (another procedure) says which."""
    which = (
        f"StepM names {', '.join(superior[:4])}{'...' if len(superior) > 4 else ''}"
        if superior
        else "StepM names none at 5% (a stepwise procedure: it can reject less than SPA)"
    )
    if not np.isfinite(p_consistent):
        return "undefined (SPA p-value is not finite)"
    if p_consistent < LEVEL:
        return f"yes: SPA rejects 'none beats Buy & Hold' (consistent p = {p_text(p_consistent)}); {which}"
    return f"no evidence at the 5% level (SPA consistent p = {p_text(p_consistent)}); {which}"


def _deflation_row(question: str, what: str, returns: np.ndarray, label: str, n: int, n_eff: int, v: float) -> dict:
    """PSR(SR > 0) and the DSR at N and at the effective N, of one return series among trials of variance v."""
    psr = mt.probabilistic_sharpe_ratio(returns)
    dsr = {m: mt.deflated_sharpe_ratio(returns, m, v) for m in (n, n_eff)}
    hurdle = {m: annual(mt.expected_maximum_sharpe(m, v)) for m in (n, n_eff)}
    survives = [m for m in (n, n_eff) if np.isfinite(dsr[m]) and dsr[m] > 1 - LEVEL]
    if not all(np.isfinite(d) for d in dsr.values()):
        answer = "undefined (a Sharpe ratio of a flat record)"
    elif len(survives) == 2 or (survives and n == n_eff):
        answer = f"yes: survives deflation at 5% at N = {n} and at the effective N = {n_eff}"
    elif survives:
        answer = f"only at the effective N = {n_eff}; not at N = {n}"
    else:
        answer = "no evidence at the 5% level once the trials are counted"
    return {
        "Question": question,
        "Test": f"Probabilistic / deflated Sharpe ratio of {what} ({label}); Sharpe of {SHARPE_CONVENTION}",
        "Statistic": f"Sharpe {annual(mt.sharpe_ratio(returns)):.2f} annualized; PSR(SR > 0) {psr:.3f}; DSR "
        f"{dsr[n]:.3f} at N = {n} (luck hurdle {hurdle[n]:.2f}), {dsr[n_eff]:.3f} at effective N = {n_eff} "
        f"(hurdle {hurdle[n_eff]:.2f})",
        "Interval or p-value": f"p = {p_text(1 - dsr[n])} at N, {p_text(1 - dsr[n_eff])} at effective N (1 - DSR)",
        "Trials": f"N = {n} strategies, V = their Sharpe ratios' variance; effective N = {n_eff} (clusters of "
        "their return correlations)",
        "Answer": answer,
        "Detectable at 80% power": "a Sharpe of "
        + " / ".join(
            f"{annual(mt.detectable_sharpe(returns.size, LEVEL, POWER, mt.expected_maximum_sharpe(m, v))):.2f}"
            for m in (n, n_eff)
        )
        + f" a year at N / effective N ({returns.size} days)",
    }


def beat_buy_and_hold(settings: Settings, strategies: Strategies) -> list[dict]:
    ev = settings.evaluate
    names, returns, bench, days = strategies.names, strategies.returns, strategies.bench, strategies.days
    trials = count_trials(strategies)
    reps, seed = ev.verdict_bootstrap_resamples, ev.verdict_seed
    spa = mt.spa_pvalues(bench, returns, reps=reps, seed=seed)
    superior = mt.stepm_superior(bench, returns, names, size=LEVEL, reps=reps, seed=seed)
    sharpes = np.array([mt.sharpe_ratio(returns[:, j]) for j in range(len(names))])
    active = returns - bench[:, None]
    active_sharpes = np.array([mt.sharpe_ratio(active[:, j]) for j in range(len(names))])
    n, n_eff = trials[0], mt.effective_trials(returns)
    question = (
        f"Does any strategy beat Buy & Hold after costs ({ev.verdict_cost_bps:g} bps a side) and taxes "
        "(strategies pay on realised gains; Buy & Hold never realises)?"
    )
    period = f"{days[0]} .. {days[-1]}, {len(days)} days, {len(names)} strategies, both rules"
    rows = []
    if np.isfinite(sharpes).any():
        best = int(np.nanargmax(sharpes))
        rows.append(
            {
                "Question": question,
                "Test": f"Hansen SPA vs Buy & Hold ({period}); losses = -daily net excess returns; StepM for which",
                "Statistic": f"best {names[best]}: Sharpe {annual(sharpes[best]):.2f} vs Buy & Hold "
                f"{annual(mt.sharpe_ratio(bench)):.2f} (annualized, {SHARPE_CONVENTION})",
                "Interval or p-value": f"p lower {p_text(spa['lower'])}, consistent {p_text(spa['consistent'])}, "
                f"upper {p_text(spa['upper'])}",
                "Trials": trials[1],
                "Answer": spa_answer(spa["consistent"], superior),
                "Detectable at 80% power": f"an active Sharpe (vs Buy & Hold) of "
                f"{annual(mt.detectable_sharpe(len(days), LEVEL / len(names), POWER)):.2f} a year in one strategy "
                f"(Bonferroni over {len(names)}, {len(days)} days)",
            }
        )
        variance = float(np.nanvar(sharpes, ddof=1)) if len(names) > 1 else 0.0
        rows.append(
            _deflation_row(
                "Is the best strategy's Sharpe more than the luck of the trials (above the expected best of N "
                "skill-less ones)?",
                "the best strategy's daily net returns",
                returns[:, best],
                names[best],
                n,
                n_eff,
                variance,
            )
        )
    if np.isfinite(active_sharpes).any():
        best_active = int(np.nanargmax(active_sharpes))
        rows.append(
            _deflation_row(
                "Does the best strategy's return beyond Buy & Hold's exceed the luck of the trials?",
                "the best active return (strategy - Buy & Hold, daily)",
                active[:, best_active],
                names[best_active],
                n,
                n_eff,
                float(np.nanvar(active_sharpes, ddof=1)) if len(names) > 1 else 0.0,
            )
        )
    mcs = mt.model_confidence_set(returns, names, size=LEVEL, reps=reps, seed=seed)
    kept = [n for n, p in mcs.items() if p > LEVEL]
    rows.append(
        {
            "Question": "Which strategies are the best (model confidence set)?",
            "Test": f"Hansen-Lunde-Nason model confidence set at 5% (method R) over {len(names)} strategies",
            "Statistic": f"{len(kept)} of {len(names)} in the set",
            "Interval or p-value": ", ".join(
                f"{n} {p_text(p)}" for n, p in sorted(mcs.items(), key=lambda x: -x[1])[:5]
            ),
            "Trials": trials[1],
            "Answer": "every strategy is in the set: the data cannot tell them apart"
            if len(kept) == len(names)
            else f"the set keeps {', '.join(kept[:5])}{'...' if len(kept) > 5 else ''}",
            "Detectable at 80% power": "- (a set, not one effect)",
        }
    )
    return rows


def ablation_comparisons(
    settings: Settings, strategies: Strategies, ics: dict | None, losses: dict | None = None
) -> list[Comparison]:
    """Each matched ablation by the Sharpe difference under each rule, and on the universe by the paired daily
    differences of the rank IC and of the log loss (b's minus a's: positive when a predicts better)."""
    ev = settings.evaluate
    tau, cost = ev.report_tau, ev.verdict_cost_bps
    out = []
    for a, b in ABLATIONS:
        pair = f"{display_name(a)} - {display_name(b)}"
        for rule in RULES:
            names = strategy_name(a, tau, rule), strategy_name(b, tau, rule)
            test = (
                f"{pair}, {rule} rule: stationary-bootstrap Sharpe difference (tau {tau_key(tau)}, {cost:g} bps, "
                f"{len(strategies.days)} days, {SHARPE_CONVENTION})"
            )
            missing = [n for n in names if n not in strategies.column]
            if missing:
                why = f"no pooled record of {' and '.join(missing)} tested on every fold at {cost:g} bps"
                out.append(Comparison(test, why=why))
                continue
            if strategies.column[names[0]] == strategies.column[names[1]]:
                out.append(Comparison(test, why="the two records are identical day by day (e.g. neither trades)"))
                continue
            diff, low, high, p, se = mt.sharpe_difference_test(
                strategies.of(names[0]),
                strategies.of(names[1]),
                reps=ev.verdict_bootstrap_resamples,
                seed=ev.verdict_seed,
            )
            interval = f"[{annual(low):+.2f}, {annual(high):+.2f}] (95%, unadjusted)"
            out.append(Comparison(test, f"{annual(diff):+.2f} (annualized)", interval, diff, p, se=se, unit="sharpe"))
        test = f"{pair}: paired difference of the daily rank IC on the universe, Newey-West t, two-sided"
        out.append(paired(test, ics or {}, a, b, "rank_ic", 1.0))
        test = (
            f"{pair}: paired difference of the daily mean log loss on the universe (close-to-close labels, "
            f"{display_name(b)}'s minus {display_name(a)}'s, nats), Newey-West t, two-sided"
        )
        out.append(paired(test, losses or {}, a, b, "log_loss", -1.0))
    return out


def family_answers(comparisons: list[Comparison], a_b: list[tuple[str, str]]) -> list[str]:
    """Holm over the family's computable tests; each test's answer (``a_b``: its (a, b) display names)."""
    from statsmodels.stats.multitest import multipletests

    finite = [k for k, c in enumerate(comparisons) if c.why is None and np.isfinite(c.p)]
    adjusted = dict.fromkeys(range(len(comparisons)), float("nan"))
    if finite:
        _, holm, _, _ = multipletests([comparisons[k].p for k in finite], alpha=LEVEL, method="holm")
        adjusted.update(zip(finite, map(float, holm)))
    answers = []
    for k, (c, (a, b)) in enumerate(zip(comparisons, a_b)):
        if c.why is not None:
            answers.append(f"cannot be computed: {c.why}")
        elif not np.isfinite(c.p):
            answers.append("undefined: the statistic or its interval is not finite (a flat record)")
        elif adjusted[k] < LEVEL:
            better = a if c.estimate > 0 else b
            answers.append(
                f"{'yes' if c.estimate > 0 else 'no'}: {better} is better at 5% (Holm p {p_text(adjusted[k])})"
            )
        else:
            answers.append(f"no evidence at the 5% level (Holm p {p_text(adjusted[k])})")
    return answers


def spline_vs_fd(
    settings: Settings, strategies: Strategies, ics: dict | None, losses: dict | None = None
) -> list[dict]:
    comparisons = ablation_comparisons(settings, strategies, ics, losses)
    per_ablation = len(comparisons) // len(ABLATIONS)
    a_b = [(display_name(a), display_name(b)) for a, b in ABLATIONS for _ in range(per_ablation)]
    computable = sum(c.why is None and np.isfinite(c.p) for c in comparisons)
    return [
        {
            "Question": "Do spline tokens beat finite differences?",
            "Test": c.test,
            "Statistic": c.statistic,
            "Interval or p-value": f"{c.interval}; p {p_text(c.p)}" if c.why is None else "-",
            "Trials": f"{computable} tests in this family (Holm)",
            "Answer": answer,
            "Detectable at 80% power": _detectable_difference(c, max(computable, 1)),
        }
        for c, answer in zip(comparisons, family_answers(comparisons, a_b))
    ]


def _detectable_difference(c: Comparison, m: int) -> str:
    """The smallest difference this comparison detects at 80% power, two-sided at 5%/m (Holm's first step)."""
    mde = mt.detectable(c.se, LEVEL / (2 * m), POWER)
    if c.why is not None or not np.isfinite(mde):
        return "-"
    if c.unit == "sharpe":
        return f"a Sharpe difference of {annual(mde):.2f} a year (two-sided, 5%/{m})"
    if c.unit == "log_loss":
        return f"a mean daily log-loss difference of {mde:.4f} nats (two-sided, 5%/{m})"
    return f"a mean daily rank-IC difference of {mde:.4f} (two-sided, 5%/{m})"


def verdict_table(settings: Settings, curves: dict[str, pl.DataFrame], universe: pl.DataFrame | None) -> pl.DataFrame:
    """The verdict rows (VERDICT_SCHEMA) of the pooled equity curves of each rule (``curves``: rule -> frame) and the
    universe's predictions (None: none)."""
    strategies = strategy_returns(settings, curves)
    rows = beat_buy_and_hold(settings, strategies)
    rows += information_beyond_trivial(settings, universe)
    ics = daily_ics(universe) if universe is not None and universe.height else None
    rows += spline_vs_fd(settings, strategies, ics, daily_log_losses(settings, universe))
    return pl.DataFrame(rows, schema=VERDICT_SCHEMA)


def compute_verdict(settings: Settings) -> pl.DataFrame:
    """The verdict of the run's pooled out-of-sample records (``stages.pooled``) and its universe predictions."""
    from kinematic_pipeline.stages.evidence import universe_predictions
    from kinematic_pipeline.stages.pooled import MARGIN_EQUITY_CURVES, read_pooled

    curves = {"argmax": read_pooled(settings, EQUITY_CURVES), "margin": read_pooled(settings, MARGIN_EQUITY_CURVES)}
    try:
        universe = universe_predictions(settings, settings.evaluated_variants)
    except FileNotFoundError:
        universe = None
    features = trivial_features(settings)
    if universe is not None and features is not None:
        universe = universe.join(features, on=["ticker", "date"], how="left")
    return verdict_table(settings, curves, universe)


def materialize_verdict(settings: Settings) -> pl.DataFrame:
    """The ``verdict`` asset: the verdict table, or one row saying why this run cannot compute it, written to
    ``reports/tables/verdict.parquet`` (and ``.md``) with the digest of the evaluation files it was computed from."""
    wh = settings.warehouse
    inputs = evaluation_digest(wh)
    try:
        table = compute_verdict(settings)
    except StalePairError:
        raise  # stale pooled records are refused, never a table row
    except ValueError as exc:
        row = {k: "-" for k in VERDICT_SCHEMA} | {"Question": "all", "Answer": f"not computable: {exc}"}
        table = pl.DataFrame([row], schema=VERDICT_SCHEMA)
    out = wh.report_tables_dir
    out.mkdir(parents=True, exist_ok=True)
    (out / "verdict.md").write_text(markdown_table(table) + "\n")
    wh.write(table, out / VERDICT_FILE)
    pin_evaluation(wh, out / VERDICT_PIN_FILE, inputs)
    return table


def read_verdict(settings: Settings) -> pl.DataFrame:
    """The ``verdict`` asset's table, once checked against the evaluation files it was computed from."""
    out = settings.warehouse.report_tables_dir
    check_evaluation(settings.warehouse, out / VERDICT_PIN_FILE, "verdict")
    return exact.read_parquet(out / VERDICT_FILE)
