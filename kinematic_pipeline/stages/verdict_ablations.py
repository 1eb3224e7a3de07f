"""The verdict's tokenization questions (``stages.verdict``, question 5): each matched ablation (``variants.ABLATIONS``)
asked three questions, each its own Holm family: more information (paired daily rank IC and partial rank IC), better
calibrated (paired daily log loss), better timed (the Sharpe difference under each rule, both sides' days in the
market). No dagster here.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl

from kinematic_pipeline.backtest import multiple_testing as mt
from kinematic_pipeline.backtest.seed_replicates import exposure_pair
from kinematic_pipeline.config import Settings
from kinematic_pipeline.stages.strategies import RULES, Strategies, strategy_name
from kinematic_pipeline.stages.verdict_signal import (
    HAC_LAG,
    LEVEL,
    POWER,
    Comparison,
    annual,
    hac_lag,
    p_text,
    paired,
    replicated,
    replication_text,
    seed_sharpe_replication,
)
from kinematic_pipeline.stages.verdict_trials import SHARPE_CONVENTION
from kinematic_pipeline.tasks.buy_sell_hold import tau_key
from kinematic_pipeline.variants import ABLATIONS, display_name
from kinematic_pipeline.variants import variant as lookup_variant

# each row's Test starts "<a> - <b> (<what each reads>), <statistic>:", unique in the table
INFORMATION = "Do spline tokens carry more information than finite differences (or raw values)?"


CALIBRATION = "Do spline tokens make better probabilistic forecasts (log loss) than finite differences (or raw values)?"


TIMING = "Do spline tokens make better-timed strategies than finite differences (or raw values)?"


TOKENIZATION_QUESTIONS = {  # question -> what "better" reads in its answer
    INFORMATION: "carries more information",
    CALIBRATION: "forecasts better (log loss)",
    TIMING: "is better timed",
}


def _contrast(a: str, b: str) -> str:
    """What a matched ablation contrasts: "spline vs finite differences" or "spline vs raw values"."""
    return " vs ".join(lookup_variant(v).tokenization.called for v in (a, b))


def _days_text(
    names: tuple[str, str],
    pair: tuple[str, str],
    in_market: dict[str, int] | None,
    total: int,
    positions: dict[str, pl.DataFrame] | None = None,
) -> str:
    """Both sides' exposure (the mean per ticker-seed of the share of days long), the share of ticker-days on which
    their positions differ (only there can their returns differ; science-6 M-C), and the days on which any
    ticker-seed was long."""

    def one(name: str) -> str:
        days = (in_market or {}).get(name)
        return "?" if days is None else str(days)

    days = f"days with any ticker-seed long: {pair[0]} {one(names[0])}, {pair[1]} {one(names[1])} of {total}"
    if positions is None or not all(n in positions for n in names):
        return days
    try:
        e = exposure_pair(positions[names[0]], positions[names[1]], keys=("ticker", "seed"))
    except ValueError:  # no ticker-day in common
        return days
    return (
        f"exposure (mean share of days long per ticker-seed): {pair[0]} {e['a_share_of_days_long']:.0%}, "
        f"{pair[1]} {e['b_share_of_days_long']:.0%}; positions differ on {e['share_of_ticker_days_differing']:.0%} "
        f"of {e['n_ticker_days']} ticker-days; {days}"
    )


def ablation_comparisons(
    settings: Settings,
    strategies: Strategies,
    ics: dict | None,
    losses: dict | None = None,
    partial: dict | None = None,
    in_market: dict[str, int] | None = None,
    positions: dict[str, pl.DataFrame] | None = None,
    by_seed: dict[str, dict] | None = None,
) -> dict[str, list[Comparison]]:
    """{question: its family's comparisons} over the matched ablations: more information (the paired daily
    differences of the rank IC and of the partial rank IC given ret1 and vol20), better probabilistic forecasts (of the daily
    mean log loss, b's minus a's) and better timed (the Sharpe difference under each rule, with both sides' days
    in the market). Every estimate is positive when a is better. ``by_seed``: {"rank_ic": ``daily_ics_by_seed``,
    "log_loss": the per-seed ``daily_log_losses``, "sharpe": ``strategies.strategy_returns_by_seed``}, the seeds
    as replicates of the rank IC, log-loss and timing rows."""
    ev = settings.evaluate
    tau, cost = ev.report_tau, ev.verdict_cost_bps
    out: dict[str, list[Comparison]] = {q: [] for q in TOKENIZATION_QUESTIONS}
    total = len(strategies.days)
    lag = f"Newey-West t with a lag of at least {HAC_LAG} days, two-sided"
    boot = (ev.verdict_bootstrap_resamples, ev.verdict_seed)

    def seeded(c: Comparison, column: str, a: str, b: str, sign: float) -> Comparison:
        done = replicated(c, (by_seed or {}).get(column, {}), a, b, column, sign, boot)
        return (
            done
            if done.replication is None
            else dataclasses.replace(done, statistic=done.statistic + replication_text(done))
        )

    for a, b in ABLATIONS:
        pair = (display_name(a), display_name(b))
        label = f"{pair[0]} - {pair[1]} ({_contrast(a, b)})"
        test = f"{label}, rank IC: paired difference of the daily rank IC on the universe, {lag}"
        out[INFORMATION].append(seeded(paired(test, ics or {}, a, b, "rank_ic", 1.0, pair), "rank_ic", a, b, 1.0))
        test = f"{label}, partial rank IC: paired difference of the daily partial rank IC given ret1, vol20 on the "
        test += f"universe, {lag}"
        if partial is None:
            why = "the universe has no ret1 and vol20 (the trivial probe's features)"
            out[INFORMATION].append(Comparison(test, why=why, pair=pair))
        else:
            out[INFORMATION].append(paired(test, partial, a, b, "rank_ic", 1.0, pair, unit="partial_rank_ic"))
        test = f"{label}, log loss: paired difference of the daily mean log loss on the universe (close-to-close "
        test += f"labels, {pair[1]}'s minus {pair[0]}'s, nats), {lag}"
        out[CALIBRATION].append(
            seeded(paired(test, losses or {}, a, b, "log_loss", -1.0, pair), "log_loss", a, b, -1.0)
        )
        for rule in RULES:
            names = strategy_name(a, tau, rule), strategy_name(b, tau, rule)
            test = (
                f"{label}, {rule} rule: Ledoit-Wolf HAC test of the Sharpe difference (Newey-West lag "
                f"{hac_lag(total)}; tau {tau_key(tau)}, {cost:g} bps, {total} days, {SHARPE_CONVENTION})"
            )
            missing = [n for n in names if n not in strategies.column]
            if missing:
                why = f"no pooled record of {' and '.join(missing)} tested on every fold at {cost:g} bps"
                out[TIMING].append(Comparison(test, why=why, pair=pair))
                continue
            days = _days_text(names, pair, in_market, total, positions)
            if strategies.column[names[0]] == strategies.column[names[1]]:
                why = "the two records are identical day by day (e.g. neither trades)"
                out[TIMING].append(Comparison(test, statistic=days, why=why, pair=pair))
                continue
            diff, low, high, p, se = mt.sharpe_difference_hac(
                strategies.of(names[0]), strategies.of(names[1]), hac_lag(total)
            )
            if not np.isfinite(diff):  # a record whose excess returns do not vary (cash every day): no Sharpe
                why = "a Sharpe ratio is undefined: one record's excess returns do not vary (e.g. it never trades)"
                out[TIMING].append(Comparison(test, statistic=days, why=why, pair=pair))
                continue
            interval = f"[{annual(low):+.2f}, {annual(high):+.2f}] (95%, unadjusted)"
            statistic = f"{annual(diff):+.2f} (annualized); {days}"
            timed = Comparison(test, statistic, interval, diff, p, se=se, unit="sharpe", pair=pair)
            if lookup_variant(a).seeded and lookup_variant(b).seeded:  # a probe is fitted once: no seeds to vary
                replication = seed_sharpe_replication((by_seed or {}).get("sharpe", {}), *names)
                if replication is not None:
                    timed = dataclasses.replace(timed, replication=replication)
                    timed = dataclasses.replace(timed, statistic=statistic + replication_text(timed, annual))
            out[TIMING].append(timed)
    return out


def family_answers(comparisons: list[Comparison], a_b: list[tuple[str, str]], better: str = "is better") -> list[str]:
    """Holm over the family's computable tests; each test's answer (``a_b``: its (a, b) display names; ``better``:
    what the better side is, e.g. "forecasts better (log loss)")."""
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
        elif adjusted[k] < LEVEL and c.replication is not None and c.replication["answer"] != "yes":
            reason = c.replication["reason"]
            answers.append(f"no evidence across seeds: {reason} (each day-only Holm p {p_text(adjusted[k])})")
        elif adjusted[k] < LEVEL:
            winner = a if c.estimate > 0 else b
            answers.append(
                f"{'yes' if c.estimate > 0 else 'no'}: {winner} {better} at 5% (Holm p {p_text(adjusted[k])})"
            )
        else:
            answers.append(f"no evidence at the 5% level (Holm p {p_text(adjusted[k])})")
    return answers


def spline_vs_fd(
    settings: Settings,
    strategies: Strategies,
    ics: dict | None,
    losses: dict | None = None,
    partial: dict | None = None,
    in_market: dict[str, int] | None = None,
    positions: dict[str, pl.DataFrame] | None = None,
    by_seed: dict[str, dict] | None = None,
) -> list[dict]:
    """The tokenization rows: each question of ``TOKENIZATION_QUESTIONS`` its own Holm family; a "yes" (or "no")
    of a trained pair needs its seeds to agree too (``verdict_signal.replicated``)."""
    rows = []
    comparisons_by = ablation_comparisons(settings, strategies, ics, losses, partial, in_market, positions, by_seed)
    for question, comparisons in comparisons_by.items():
        computable = sum(c.why is None and np.isfinite(c.p) for c in comparisons)
        answers = family_answers(comparisons, [c.pair for c in comparisons], TOKENIZATION_QUESTIONS[question])
        rows += [
            {
                "Question": question,
                "Test": c.test,
                "Statistic": c.statistic,
                "Interval or p-value": f"{c.interval}; p {p_text(c.p)}" if c.why is None else "-",
                "Trials": f"{computable} tests in this family (Holm)",
                "Answer": answer,
                "Detectable at 80% power": _detectable_difference(c, max(computable, 1)),
            }
            for c, answer in zip(comparisons, answers)
        ]
    return rows


def _detectable_difference(c: Comparison, m: int) -> str:
    """The smallest difference this comparison detects at 80% power, two-sided at 5%/m (Holm's first step)."""
    mde = mt.detectable(c.se, LEVEL / (2 * m), POWER)
    if c.why is not None or not np.isfinite(mde):
        return "-"
    if c.unit == "sharpe":
        return f"a Sharpe difference of {annual(mde):.2f} a year (two-sided, 5%/{m})"
    if c.unit == "log_loss":
        return f"a mean daily log-loss difference of {mde:.4f} nats (two-sided, 5%/{m})"
    if c.unit == "partial_rank_ic":
        return f"a mean daily partial rank-IC difference of {mde:.4f} (two-sided, 5%/{m})"
    return f"a mean daily rank-IC difference of {mde:.4f} (two-sided, 5%/{m})"
