"""The verdict: the report's questions, each row answered by exactly the statistic it names.

1. Does any strategy beat Buy & Hold after costs and taxes? Each pooled (variant, tau, rule) strategy's daily net
   return (every decision rule of ``strategies.RULES``; at ``evaluate.verdict_cost_bps``; an equal-weight portfolio
   of the backtested tickers, the seeds averaged) against Buy & Hold's on the same out-of-sample days: Hansen's SPA
   answers whether any does (its consistent p-value); Romano-Wolf StepM's set at 5% says which. Strategies pay
   tax on realised gains, Buy & Hold never realises (the engine's convention). Daily returns are in excess of the
   risk-free rate with cash credited with it (``backtest.portfolio``: bounded, so a policy almost always in cash
   is near 0, not -300).
2. Is the best Sharpe more than the luck of the trials? The best strategy's deflated Sharpe ratio with the hurdle
   centred on the trials' mean Sharpe (E[SR] + sqrt(V) E[max of N]: long/cash strategies that ride the market
   share its Sharpe, so "above 0 by luck" would pass any of them), N = the strategies whose Sharpe ratio is
   defined (a never-trading record has none: it is left out of N and V alike) and V = the variance of those
   Sharpe ratios; the same for the best active return (strategy - Buy & Hold) against 0. Each row gives the DSR
   at an effective N as information only, a range: the silhouette clusters of the returns' correlations (V over
   the clusters' aggregate returns' Sharpe ratios, Lopez de Prado and Lewis 2019) and the eigenvalues explaining
   95% of the correlation matrix (V over all N); only the full N answers "yes". Sharpe ratios here are of those
   excess returns, unlike the paper tables' (4% a year subtracted from a cash that earns nothing).
3. Does any model carry directional information beyond the trivial features? The daily cross-sectional partial
   rank IC on the universe (report's tau, seeds averaged) of each model and probe given ret1 and vol20 (the
   trivial probe's features, their ranks regressed out within each day), with its Newey-West t and Holm-adjusted
   one-sided p-values; and the plain rank IC against 0 (does the score rank tomorrow's returns at all).
4. Can the argmax rules tell tokenizations apart? Per argmax rule (every rule but the margin rule), a descriptive
   row: how many distinct return series its records make and how many days they are in the market; "no" when
   every record is the same series or none is ever in the market (the Liquidation Equilibrium is the rule's).
5. Do spline tokens beat finite differences (or raw values, for RawGPT)? Three questions, each its own Holm family
   over the matched ablations (``variants.ABLATIONS``): more information, from the paired differences of the daily
   rank IC and of the daily partial rank IC (given ret1 and vol20) on the universe; better probabilistic forecasts,
   from the paired daily mean log loss on close-to-close labels; better timed, from Ledoit and Wolf's HAC test of
   the Sharpe difference under each rule, with both sides' exposure, the share of ticker-days on which their positions differ
   and their days in the market (``verdict_ablations._days_text``). Paired Newey-West tests use a lag of at least
   ``verdict_signal.HAC_LAG`` days. An ablation that cannot be computed gets a row saying why; an undefined
   statistic answers "undefined".
6. The run's other tasks' questions (``Task.verdict_rows``): on next-week volatility, does a learned forecaster beat
   HAR and GARCH, and do spline tokens beat finite differences or raw values (QLIKE, vol-rank IC), seeds as
   replicates; beside them, the next-day direction questions are named the negative control.
Beside them the model confidence set across the strategies. On real data the Test of every strategies' row (SPA,
the deflated Sharpe ratios, the model confidence set) names the basket's survivorship and hindsight. Every answer is
a template filled with the numbers (``multiple_testing``: arch's SPA, StepM, MCS, StationaryBootstrap). No dagster
here.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from kinematic_pipeline.backtest import multiple_testing as mt
from kinematic_pipeline.config import Settings
from kinematic_pipeline.pins import StalePairError, check_evaluation, evaluation_digest, pin_evaluation
from kinematic_pipeline.report.markdown import markdown_table
from kinematic_pipeline.run_keys import run_keys_digest
from kinematic_pipeline.stages.evidence import universe_predictions
from kinematic_pipeline.stages.oracle_control import oracle_days_in_market
from kinematic_pipeline.stages.pooled import MARGIN_EQUITY_CURVES, PAPER_EQUITY_CURVES, read_pooled, read_view
from kinematic_pipeline.stages.strategies import (
    RULES,
    Strategies,
    count_trials,
    strategy_returns,
    strategy_returns_by_seed,
)
from kinematic_pipeline.stages.task_evidence import task_tables, task_verdict_rows, write_task_tables
from kinematic_pipeline.stages.verdict_ablations import CALIBRATION, INFORMATION, spline_vs_fd
from kinematic_pipeline.stages.verdict_rules import (
    argmax_equilibrium,
    days_in_market,
    market_positions,
)
from kinematic_pipeline.stages.verdict_signal import (
    BEYOND_TRIVIAL,
    LEVEL,
    POWER,
    RANKS_NEXT_DAY,
    annual,
    daily_ics,
    daily_ics_by_seed,
    daily_log_losses,
    daily_partial_ics,
    information_beyond_trivial,
    p_text,
    trivial_features,
)
from kinematic_pipeline.stages.verdict_trials import SHARPE_CONVENTION, luck_of_the_trials
from kinematic_pipeline.warehouse import EQUITY_CURVES, PREDICTIONS
from kinematic_pipeline.warehouse import exact_paths as exact
from kinematic_pipeline.warehouse.atomic import write_text_atomic
from kinematic_pipeline.warehouse.layout import VERDICT_FILE, VERDICT_PIN_FILE

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


def beat_buy_and_hold(settings: Settings, strategies: Strategies) -> list[dict]:
    ev = settings.evaluate
    names, returns, bench, days = strategies.names, strategies.returns, strategies.bench, strategies.days
    trials = count_trials(strategies)
    reps, seed = ev.verdict_bootstrap_resamples, ev.verdict_seed
    spa = mt.spa_pvalues(bench, returns, reps=reps, seed=seed)
    superior = mt.stepm_superior(bench, returns, names, size=LEVEL, reps=reps, seed=seed)
    sharpes = np.array([mt.sharpe_ratio(returns[:, j]) for j in range(len(names))])
    question = (
        f"Does any strategy beat Buy & Hold after costs ({ev.verdict_cost_bps:g} bps a side) and taxes "
        "(strategies pay on realised gains; Buy & Hold never realises)?"
    )
    period = f"{days[0]} .. {days[-1]}, {len(days)} days, {len(names)} strategies, rules {', '.join(RULES)}"
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
    rows += luck_of_the_trials(names, returns, bench)
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
    return with_survivorship(settings, rows)


SURVIVORSHIP = (
    "the backtested tickers are today's index members (survivors) chosen with hindsight, in every fold whether or "
    "not they were members then"
)


def with_survivorship(settings: Settings, rows: list[dict]) -> list[dict]:
    """``rows`` (the strategies' rows: SPA, the deflated Sharpe ratios, the model confidence set), each Test naming
    the basket's own bias (``SURVIVORSHIP``) on real data; unchanged on a synthetic source (no name delisted)."""
    if settings.data.source == "synthetic":
        return rows
    return [row | {"Test": f"{row['Test']}; {SURVIVORSHIP}"} for row in rows]


def verdict_table(
    settings: Settings,
    curves: dict[str, pl.DataFrame],
    universe: pl.DataFrame | None,
    oracle: dict[str, int] | None = None,
) -> pl.DataFrame:
    """The verdict rows (VERDICT_SCHEMA) of the pooled equity curves of each rule (``curves``: rule -> frame), the
    universe's predictions (None: none) and, on synthetic runs, the oracle's days in the market under each rule
    (``stages.oracle_control``; None: no oracle)."""
    strategies = strategy_returns(settings, curves)
    positions = market_positions(settings, curves, strategies.days)
    in_market = days_in_market(positions)
    partial = daily_partial_ics(universe)  # every variant's, once: question 3 reads the models', 5 the pairs'
    rows = beat_buy_and_hold(settings, strategies)
    rows += information_beyond_trivial(settings, universe, partial)
    rows += argmax_equilibrium(strategies, in_market, oracle)
    ics = daily_ics(universe) if universe is not None and universe.height else None
    losses = daily_log_losses(settings, universe)
    by_seed = {
        "rank_ic": daily_ics_by_seed(universe),
        "log_loss": daily_log_losses(settings, universe, by_seed=True),
        "sharpe": strategy_returns_by_seed(settings, curves, strategies.days),
    }
    rows += spline_vs_fd(settings, strategies, ics, losses, partial, in_market, positions, by_seed)
    return pl.DataFrame(rows, schema=VERDICT_SCHEMA)


DIRECTION = (BEYOND_TRIVIAL, RANKS_NEXT_DAY, INFORMATION, CALIBRATION)  # the questions on next-day direction
NEGATIVE_CONTROL = "Next-day direction (the negative control): "


def with_task_rows(table: pl.DataFrame, task_rows: list[dict]) -> pl.DataFrame:
    """``table`` and the run's other tasks' rows after it (``task_evidence.task_verdict_rows``); with any, the
    next-day direction questions (``DIRECTION``) are named the negative control: the task the data cannot answer,
    beside one it can."""
    if not task_rows:
        return table
    named = pl.when(pl.col("Question").is_in(DIRECTION)).then(pl.lit(NEGATIVE_CONTROL) + pl.col("Question"))
    table = table.with_columns(named.otherwise(pl.col("Question")).alias("Question"))
    return pl.concat([table, pl.DataFrame(task_rows, schema=VERDICT_SCHEMA)], how="vertical")


def pooled_curves(settings: Settings) -> dict[str, pl.DataFrame]:
    """{rule: its pooled equity curves} for every rule of ``strategies.RULES``."""
    files = {"paper": PAPER_EQUITY_CURVES, "calibrated": EQUITY_CURVES, "margin": MARGIN_EQUITY_CURVES}
    return {rule: read_pooled(settings, files[rule]) for rule in RULES}


def compute_verdict(settings: Settings) -> tuple[pl.DataFrame, dict[str, pl.DataFrame]]:
    """The verdict of the run's pooled out-of-sample records (``stages.pooled``) and its universe predictions, and
    the run's other tasks' tables its rows were read from (``task_evidence.task_tables``)."""
    curves = pooled_curves(settings)
    try:
        universe = universe_predictions(settings, settings.evaluated_variants)
    except FileNotFoundError:
        universe = None
    features = trivial_features(settings)
    if universe is not None and features is not None:
        universe = universe.join(features, on=["ticker", "date"], how="left")
    oracle = oracle_days_in_market(settings, read_view(settings, PREDICTIONS))
    tables = task_tables(settings)
    return with_task_rows(
        verdict_table(settings, curves, universe, oracle), task_verdict_rows(settings, tables)
    ), tables


def materialize_verdict(settings: Settings) -> pl.DataFrame:
    """The ``verdict`` asset: the verdict table, or one row saying why this run cannot compute it, written to
    ``reports/tables/verdict.parquet`` (and ``.md``) with the digest of the evaluation files it was computed from."""
    wh = settings.warehouse
    inputs = evaluation_digest(wh)
    try:
        table, tables = compute_verdict(settings)
    except StalePairError:
        raise  # stale pooled records are refused, never a table row
    except ValueError as exc:
        row = {k: "-" for k in VERDICT_SCHEMA} | {"Question": "all", "Answer": f"not computable: {exc}"}
        table, tables = pl.DataFrame([row], schema=VERDICT_SCHEMA), {}
    write_task_tables(settings, tables)  # computed once: paper_tables reads them back (task_evidence.read_task_tables)
    out = wh.report_tables_dir
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "verdict.md", markdown_table(table) + "\n")
    wh.write(table, out / VERDICT_FILE)
    pin_evaluation(wh, out / VERDICT_PIN_FILE, inputs, run_keys_digest(settings))  # and the run's policies
    return table


def read_verdict(settings: Settings) -> pl.DataFrame:
    """The ``verdict`` asset's table, once checked against the evaluation files it was computed from."""
    out = settings.warehouse.report_tables_dir
    check_evaluation(settings.warehouse, out / VERDICT_PIN_FILE, "verdict", run_keys_digest(settings))
    return exact.read_parquet(out / VERDICT_FILE)
