"""The verdict's strategies: every pooled (variant, tau, rule) record tested on every fold, as daily excess returns
of the equal-weight portfolio of the backtested tickers on the days they and Buy & Hold share, one column per
distinct return series (what SPA, StepM, the MCS and the deflated Sharpe's N count). No dagster here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from kinematic_pipeline.backtest.portfolio import ticker_excess
from kinematic_pipeline.config import Settings
from kinematic_pipeline.variants import BENCHMARK

# decision rule -> the suffix of its strategies' names: the paper's (argmax of the model's own softmax), the argmax of
# the calibrated softmax, the margin rule (``stages.pooled``); the oracle is a control, never a strategy
RULES = {"paper": " [paper argmax]", "calibrated": " [calibrated argmax]", "margin": " [margin]"}
BENCHMARK_RULE = "calibrated"  # the rule whose pooled curves carry Buy & Hold


@dataclass(frozen=True)
class Strategies:
    """The pooled strategies on their common days: one column per distinct return series."""

    names: list[str]  # a column's name; "(= k identical)" when k others have the very same returns
    returns: np.ndarray  # T x k daily net returns
    bench: np.ndarray  # Buy & Hold's, T
    days: list
    column: dict[str, int]  # every strategy's name (twins included) -> its column

    def of(self, name: str) -> np.ndarray | None:
        return self.returns[:, self.column[name]] if name in self.column else None


def strategy_name(variant: str, tau: float, rule: str) -> str:
    return f"{variant} tau={round(tau, 4)}{RULES[rule]}"


def _daily_rows(settings: Settings, curves: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """strategy, seed, ticker, date, r: each pooled record's daily excess return at the verdict's cost, every rule
    (Buy & Hold from the ``BENCHMARK_RULE``'s curves), the records tested on every fold."""
    daily = []
    for rule, equity in curves.items():
        if equity.height == 0:
            continue
        rows = equity.filter(pl.col("cost_bps") == settings.evaluate.verdict_cost_bps)
        if rule != BENCHMARK_RULE:
            rows = rows.filter(pl.col("variant") != BENCHMARK)
        if "folds" in rows.columns:
            rows = rows.filter(pl.col("folds") == pl.col("folds").max())
        rows = ticker_excess(rows.drop("fold", strict=False), settings.evaluate.backtest.rf_annual).rename(
            {"excess": "r"}
        )
        name = pl.when(pl.col("variant") == BENCHMARK).then(pl.lit(BENCHMARK))
        name = name.otherwise(
            pl.col("variant") + pl.lit(" tau=") + pl.col("tau").round(4).cast(pl.String) + pl.lit(RULES[rule])
        )
        daily.append(rows.with_columns(name.alias("strategy")))
    return pl.concat(daily, how="diagonal_relaxed") if daily else pl.DataFrame()


def strategy_returns(settings: Settings, curves: dict[str, pl.DataFrame]) -> Strategies:
    """Every pooled (variant, tau) record of each rule (``curves``: rule -> pooled equity curves) tested on every
    fold, at the verdict's cost: the mean over the backtested tickers and seeds of each day's equity change, on
    the days every strategy and Buy & Hold share (Buy & Hold from the ``BENCHMARK_RULE``'s curves)."""
    rows = _daily_rows(settings, curves)
    if rows.height == 0:
        raise ValueError("the verdict needs Buy & Hold and at least one strategy on common days")
    daily = rows.group_by("strategy", "date").agg(pl.col("r").mean())
    wide = daily.pivot(on="strategy", index="date", values="r").sort("date").drop_nulls()
    names = sorted(c for c in wide.columns if c not in ("date", BENCHMARK))
    if BENCHMARK not in wide.columns or not names:
        raise ValueError("the verdict needs Buy & Hold and at least one strategy on common days")
    labels, returns, column = _distinct(names, wide.select(names).to_numpy())
    return Strategies(labels, returns, wide[BENCHMARK].to_numpy(), wide["date"].to_list(), column)


def strategy_returns_by_seed(
    settings: Settings, curves: dict[str, pl.DataFrame], days: list
) -> dict[tuple[str, int], np.ndarray]:
    """{(strategy, seed): its daily return on ``days`` (a ``Strategies``' days; NaN where it has none)}: each seed's
    record on its own, the mean over the backtested tickers (the seeds as replicates of the timing rows)."""
    rows = _daily_rows(settings, curves)
    if rows.height == 0 or "seed" not in rows.columns:
        return {}
    rows = rows.filter((pl.col("strategy") != BENCHMARK) & pl.col("seed").is_not_null())
    rows = rows.group_by("strategy", "seed", "date").agg(pl.col("r").mean())
    frame = pl.DataFrame({"date": days}, schema={"date": rows.schema["date"]})
    out = {}
    for (strategy, seed), group in rows.group_by("strategy", "seed"):
        joined = frame.join(group.select("date", "r"), on="date", how="left")
        out[(strategy, int(seed))] = joined["r"].cast(pl.Float64).fill_null(float("nan")).to_numpy()
    return out


def _distinct(names: list[str], returns: np.ndarray) -> tuple[list[str], np.ndarray, dict[str, int]]:
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
    column = {name: k for k, j in enumerate(columns) for name in twins[j]}
    return label, returns[:, columns], column


def count_trials(strategies: Strategies) -> tuple[int, str]:
    """N: the pooled strategies the verdict compares (distinct return series, both rules, at its cost)."""
    n, merged = len(strategies.names), len(strategies.column)
    twins = f" ({merged} (variant, tau, rule) records, identical ones merged)" if merged > n else ""
    return n, f"N = {n} pooled strategies{twins}"
