"""The verdict's decision rules: which rule a strategy's name belongs to, each strategy's days in the market, and
whether each argmax rule can tell tokenizations apart at all (``stages.verdict``, question 4). No dagster here.
"""

from __future__ import annotations

import polars as pl

from kinematic_pipeline.backtest.portfolio import ticker_excess
from kinematic_pipeline.config import Settings
from kinematic_pipeline.stages.strategies import RULES, Strategies, strategy_name
from kinematic_pipeline.variants import ABLATIONS, BENCHMARK, display_name

MARGIN_RULE = "margin"  # every other rule of ``strategies.RULES`` is an argmax rule


def rule_of(name: str) -> str:
    """The decision rule of a strategy's name: the rule whose suffix (``strategies.RULES``) it ends with, the
    longest when several do (an empty suffix matches every name)."""
    matches = [r for r, suffix in RULES.items() if name.endswith(suffix)]
    if not matches:
        raise ValueError(f"{name!r} ends with no rule's suffix of {RULES}")
    return max(matches, key=lambda r: len(RULES[r]))


def argmax_rules() -> list[str]:
    return [r for r in RULES if r != MARGIN_RULE]


def market_positions(settings: Settings, curves: dict[str, pl.DataFrame], days: list) -> dict[str, pl.DataFrame]:
    """{strategy name: ticker, seed, date, position}: on the verdict's common ``days``, whether each of its
    ticker-seed records was long at the previous close (1.0) or in cash (0.0), i.e. whether its return that day was
    the market's (the pooled curves at the verdict's cost, records tested on every fold, as
    ``strategies.strategy_returns`` takes them)."""
    out: dict[str, pl.DataFrame] = {}
    for rule, equity in curves.items():
        if equity.height == 0 or rule not in RULES:
            continue
        rows = equity.filter(
            (pl.col("cost_bps") == settings.evaluate.verdict_cost_bps) & (pl.col("variant") != BENCHMARK)
        )
        if "folds" in rows.columns:
            rows = rows.filter(pl.col("folds") == pl.col("folds").max())
        held = ticker_excess(rows.drop("fold", strict=False), settings.evaluate.backtest.rf_annual).join(
            pl.DataFrame({"date": days}, schema={"date": rows.schema["date"]}), on="date", how="semi"
        )
        if "seed" not in held.columns:
            held = held.with_columns(pl.lit(0, pl.Int64).alias("seed"))
        for (variant, tau), group in held.group_by("variant", "tau", maintain_order=True):
            position = pl.col("invested").cast(pl.Float64).alias("position")
            out[strategy_name(variant, tau, rule)] = group.select("ticker", "seed", "date", position)
    return out


def days_in_market(positions: dict[str, pl.DataFrame]) -> dict[str, int]:
    """{strategy name: its days in the market}: the days on which its equal-weight portfolio was long in at least
    one ticker (of any seed) at the previous close (``market_positions``). It saturates with many ticker-seeds (a
    strategy long 30% of the time at random is in the market nearly every day): the timing rows give the exposure
    beside it (``seed_replicates.exposure_pair``)."""
    return {
        name: int(frame.group_by("date").agg((pl.col("position") > 0).any())["position"].sum())
        for name, frame in positions.items()
    }


def matched_pairs(strategies: Strategies, names: list[str], in_market: dict[str, int]) -> list[tuple[str, bool]]:
    """Each matched pair of tokenizations (``variants.ABLATIONS``) both of whose records of ``names``' rule and tau
    are there: ("A / B", whether they differ: not one return series day by day, and not both never in the market).
    Science-6 L-E: records of rules that read no tokens (momentum, always Hold) tell no tokenizations apart."""
    out = []
    for a, b in ABLATIONS:
        for name in names:
            variant, sep, rest = name.partition(" tau=")
            other = f"{b}{sep}{rest}"
            if variant != a or other not in strategies.column:
                continue
            same = strategies.column[name] == strategies.column[other]
            idle = in_market.get(name) == 0 and in_market.get(other) == 0
            out.append((f"{display_name(a)} / {display_name(b)}", not (same or idle)))
    return out


def argmax_equilibrium(
    strategies: Strategies, in_market: dict[str, int], oracle: dict[str, int] | None = None
) -> list[dict]:
    """One descriptive row per argmax rule: can it tell tokenizations apart? "no" when all its records are one
    return series or none is ever in the market (``in_market``: days in the market by strategy name), or when
    within every matched pair of tokenizations (``matched_pairs``) the two records are; otherwise how many pairs
    differ. ``oracle`` (synthetic runs): the oracle's days in the market under each
    rule, which says whether the rule could trade at all with perfect information. Counts only: no test
    statistic."""
    rows = []
    total = len(strategies.days)
    for rule in argmax_rules():
        names = sorted(n for n in strategies.column if rule_of(n) == rule)
        question = f"Can the {rule} argmax rule tell tokenizations apart?"
        base = {
            "Question": question,
            "Test": f"descriptive: the {rule} rule's pooled (variant, tau) records compared day by day (identical "
            f"return series merged) and their days in the market ({total} common days)",
            "Trials": "- (descriptive, no test)",
            "Detectable at 80% power": "-",
        }
        if not names:
            rows.append(
                base
                | {
                    "Statistic": "-",
                    "Interval or p-value": "-",
                    "Answer": f"cannot be computed: no pooled record of the {rule} rule tested on every fold",
                }
            )
            continue
        distinct = len({strategies.column[n] for n in names})
        days = [in_market.get(n) for n in names]
        known = [d for d in days if d is not None]
        never = sum(d == 0 for d in known)
        variants = sorted({n.split(" tau=")[0] for n in names})
        held = None if oracle is None else oracle.get(rule)
        if held is None:
            oracle_text, oracle_note = "", ""
        elif held == 0:
            oracle_text = " (the oracle included)"
            oracle_note = (
                "; the oracle, which knows the law of the next return, is never in the market either: the rule's "
                "equilibrium, not the tokens'"
            )
        else:
            oracle_text = ""
            oracle_note = f"; the oracle is in the market on {held} days: the rule can trade perfect information"
        spread = "unknown" if not known else f"{min(known)}" + (f"-{max(known)}" if max(known) > min(known) else "")
        spread += f" of {total}" if known else ""
        pairs = matched_pairs(strategies, names, in_market)
        differ = [pair for pair, differs in pairs if differs]
        statistic = (
            f"{len(names)} records of {len(variants)} variants; {distinct} distinct return series; {never} never in "
            f"the market; days in the market {spread}"
            + ("" if held is None else f"; the oracle's days in the market {held}")
            + (f"; matched pairs of tokenizations that differ: {len(differ)} of {len(pairs)}" if pairs else "")
        )
        if known and len(known) == len(names) and never == len(names):
            answer = f"no: every variant{oracle_text} is in the same equilibrium: never in the market{oracle_note}"
        elif distinct == 1:
            answer = (
                f"no: every variant{oracle_text} is in the same equilibrium: one return series day by day{oracle_note}"
            )
        elif pairs and not differ:
            answer = (
                f"no: within each of the {len(pairs)} matched pairs of tokenizations the two records are one return "
                f"series or both never in the market ({distinct} distinct series among all {len(names)} records, "
                "the rules that read no tokens included)"
            )
        elif pairs:
            answer = f"yes, descriptively: {len(differ)} of {len(pairs)} matched pairs differ ({', '.join(differ)})"
        else:
            answer = (
                f"{distinct} distinct return series among its {len(names)} records ({never} never in the market), "
                "no matched pair of tokenizations among them"
            )
        rows.append(base | {"Statistic": statistic, "Interval or p-value": "-", "Answer": answer})
    return rows
