"""paper_tables, figures and report: the paper's tables and figures regenerated from the backtests.

Everything lands under ``$KP_WAREHOUSE/reports/``: ``tables/<name>.md`` and ``.parquet``, ``tables.md`` (all
tables, what the CLI prints), ``figures/<name>.png`` and ``report.md``. No dagster here.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import polars as pl

from kinematic_pipeline.backtest.decisions import buy_threshold
from kinematic_pipeline.backtest.metrics import conventions
from kinematic_pipeline.backtest.portfolio import CONVENTION as PORTFOLIO_CONVENTION
from kinematic_pipeline.config import EvalConfig, Settings
from kinematic_pipeline.model_pins import run_class_weights
from kinematic_pipeline.pins import check_evaluation, evaluation_digest, pin_evaluation
from kinematic_pipeline.report import document, figures, kinematic_figures, paper, tables
from kinematic_pipeline.report.answers import answer_lines
from kinematic_pipeline.report.markdown import markdown_table
from kinematic_pipeline.run_keys import run_keys_digest
from kinematic_pipeline.stages.evidence import evidence_tables
from kinematic_pipeline.stages.oracle_control import RULE_LABELS, oracle_rule_table
from kinematic_pipeline.stages.pooled import (
    PAPER_BACKTESTS,
    PAPER_EQUITY_CURVES,
    check_inputs_current,
    per_fold_table,
    pooled_margin_metrics,
    portfolio_summaries,
    read_pooled,
    read_view,
    walk_forward_run,
)
from kinematic_pipeline.stages.report_titles import (
    FIGURE_HEADINGS,
    RULE_TABLES,
    convention_notes,
    optional_tables,
    table_headings,
)
from kinematic_pipeline.stages.task_evidence import read_task_tables
from kinematic_pipeline.stages.training_table import (
    BUDGET_TEST_TABLE,
    LEARNABILITY_TABLE,
    LEARNABILITY_TEST_TABLE,
    TRAINING_TABLE,
    budget_test_table,
    learnability_table,
    learnability_test_table,
    model_runs,
    training_table,
)
from kinematic_pipeline.stages.verdict import read_verdict
from kinematic_pipeline.stages.volatility_report import volatility_figures
from kinematic_pipeline.tasks.buy_sell_hold import at_tau, same_tau
from kinematic_pipeline.tokenizations import SPLINE
from kinematic_pipeline.tokenizations.spline import window_end_kinematics
from kinematic_pipeline.training.curves import read_curves
from kinematic_pipeline.variants import BENCHMARK, FOCUS_VARIANT, models
from kinematic_pipeline.warehouse import BACKTESTS, EQUITY_CURVES, PREDICTIONS, RAW_OHLCV
from kinematic_pipeline.warehouse import exact_paths as exact
from kinematic_pipeline.warehouse.atomic import write_text_atomic
from kinematic_pipeline.warehouse.layout import TABLES_ASSET, TABLES_PIN_FILE

CONTEXT_FILE = "context.json"  # under reports/tables/: the run the tables describe
KINEMATIC_COLUMNS = tuple(c.name for c in SPLINE.channels)
RULE_BACKTESTS = {"paper": PAPER_BACKTESTS, "calibrated": BACKTESTS}  # rule -> its pooled metrics
RULE_EQUITY = {"paper": PAPER_EQUITY_CURVES, "calibrated": EQUITY_CURVES}


def load_metrics(settings: Settings, rule: str = "calibrated") -> pl.DataFrame:
    """Every backtests row of ``rule`` (each policy's pooled out-of-sample record over its folds, and the Buy & Hold
    rows, once per ticker and cost; ``stages.pooled``), with its days in the market, and the Sharpe and Sortino N/A
    below ``evaluate.min_days_in_market`` (``tables.with_days_in_market``)."""
    metrics = read_pooled(settings, RULE_BACKTESTS[rule])
    if rule != "calibrated":  # Buy & Hold rides with the calibrated argmax's records
        bench = read_pooled(settings, BACKTESTS).filter(pl.col("variant") == BENCHMARK)
        metrics = pl.concat([metrics, bench.select(metrics.columns)], how="vertical_relaxed")
    metrics = metrics.sort("variant", "tau", "ticker", "cost_bps", nulls_last=True)
    return tables.with_days_in_market(metrics, settings.evaluate.min_days_in_market)


def rule_tables(settings: Settings) -> tuple[dict[str, pl.DataFrame], pl.DataFrame]:
    """The paper's tables under both argmax rules (``RULE_TABLES`` stacked with a Rule column first; the others,
    and the paper comparison, under the paper's rule), and the calibrated argmax's metrics (what the evidence
    tables read)."""
    built, metrics = {}, {}
    for rule in RULE_BACKTESTS:
        metrics[rule] = load_metrics(settings, rule)
        equity = read_pooled(settings, RULE_EQUITY[rule])
        portfolios = portfolio_summaries(settings, equity, ["variant", "seed"])
        built[rule] = build_tables(settings, metrics[rule], portfolios)
    out = {}
    for name, frame in built["paper"].items():
        if name in RULE_TABLES:
            out[name] = pl.concat(
                [built[r][name].select(pl.lit(RULE_LABELS[r]).alias("Rule"), pl.all()) for r in RULE_BACKTESTS]
            )
        else:
            out[name] = frame
    return out, metrics["calibrated"]


def report_conventions(ev: EvalConfig, notes: dict[str, str] | None = None) -> str:
    """The conventions paragraph, with the values this run's EvalConfig used, and then ``notes``
    (``report_titles.convention_notes``: what the captions refer to) as a list."""
    listed = "".join(f"\n- **{name}**: {text}" for name, text in (notes or {}).items())
    return (
        conventions(ev.backtest)
        + f" The paper's tables print a Sharpe, its interval and a Sortino as N/A for a record long on fewer than "
        f"{ev.min_days_in_market} days (in that convention a nearly flat record's Sharpe is unbounded: one day "
        "long in 1,008 gives -307), and give the days in the market beside them. The verdict and the tables not "
        f"in the paper use one bounded convention instead, named in each: {PORTFOLIO_CONVENTION}, the Sharpe of "
        "the equal-weight portfolio of the backtested tickers." + (f"\n{listed}" if listed else "")
    )


def focus_ticker(settings: Settings, metrics: pl.DataFrame) -> str:
    tickers = sorted(metrics["ticker"].unique().to_list())
    wanted = settings.evaluate.focus_ticker
    if wanted is not None and wanted in tickers:
        return wanted
    if not tickers:
        raise ValueError("the backtests hold no ticker")
    return tickers[0]


def build_tables(
    settings: Settings, metrics: pl.DataFrame, per_seed_portfolios: pl.DataFrame | None = None
) -> dict[str, pl.DataFrame]:
    """The paper's tables; ``per_seed_portfolios``: each (variant, seed)'s equal-weight portfolio summary (the
    per-seed table's Sharpe; None: "-")."""
    ev = settings.evaluate
    focus = focus_ticker(settings, metrics)
    return {
        "absolute_performance": tables.absolute_performance(metrics, ev.report_tau, ev.report_cost_bps),
        "risk_adjusted": tables.risk_adjusted(metrics, ev.report_tau, ev.report_cost_bps),
        "liquidation_equilibrium": tables.liquidation_equilibrium(metrics, ev.report_tau, ev.report_cost_bps, focus),
        "tau_sweep": tables.tau_sweep(metrics, focus, ev.report_cost_bps),
        "cost_sensitivity": tables.cost_sensitivity(metrics, FOCUS_VARIANT, ev.report_tau),
        "calibration": tables.calibration_summary(metrics, ev.report_tau, ev.report_cost_bps),
        "per_seed": tables.per_seed(metrics, ev.report_tau, ev.report_cost_bps, per_seed_portfolios),
        "paper_comparison": _paper_comparison(metrics)[0],
    }


def run_test_period(metrics: pl.DataFrame) -> tuple[dt.date | None, dt.date | None]:
    """First and last test day over every backtest row."""
    return metrics["first_date"].min(), metrics["last_date"].max()


def _paper_comparison(metrics: pl.DataFrame) -> tuple[pl.DataFrame, str]:
    """The side-by-side table (or the one-cell table saying why not comparable), and the explanation."""
    frame, why = paper.paper_comparison(metrics, run_test_period(metrics))
    return (paper.not_comparable_table(why) if frame is None else frame), why


def _training_period(settings: Settings) -> str:
    folds = settings.folds
    if len(folds) == 1:
        return f"{settings.data.start_date} .. {folds[0].train_end} (labels <= {folds[0].label_end})"
    return (
        f"{len(folds)} walk-forward folds (expanding, embargo {settings.split.embargo_sessions} sessions): "
        + "; ".join(
            f"{f.name}: train {settings.data.start_date} .. {f.train_end}, test {f.test_start} .. {f.test_end or 'end'}"
            for f in folds
        )
    )


def _context(settings: Settings, metrics: pl.DataFrame) -> dict[str, str]:
    ev, policies = settings.evaluate, metrics.filter(pl.col("variant") != BENCHMARK)
    fine_tuned = models(policies["variant"].unique().to_list())
    trained = policies.filter(pl.col("variant").is_in(fine_tuned)) if fine_tuned else policies
    seeds = sorted(trained["seed"].drop_nulls().unique().to_list())
    others = sorted(set(policies["seed"].drop_nulls().unique().to_list()) - set(seeds))
    return {
        "profile": settings.profile,
        "source": settings.data.source,
        "training period": _training_period(settings),
        "test period": f"{metrics['first_date'].min()} .. {metrics['last_date'].max()}",
        "test tickers": ", ".join(sorted(metrics["ticker"].unique().to_list())),
        "focus ticker (single-ticker tables)": focus_ticker(settings, metrics),
        "universe": _universe_line(settings),
        "main tables": f"tau = {ev.report_tau:g}, costs = {ev.report_cost_bps:g} bps per trade",
        "tau sweep": _tau_sweep_line(settings),
        "decision rules": f"the paper's tables under the paper's rule ({RULE_LABELS['paper']}) and the "
        f"{RULE_LABELS['calibrated']}, each Buy needing {buy_threshold(run_class_weights(settings))}; the margin "
        "rule in the decision-rules table and the verdict",
        "seeds": f"{len(seeds)} ({', '.join(map(str, seeds))})"
        + (" for the trained models" if fine_tuned else "")
        + (f" (rules and probes: seed {', '.join(map(str, others))})" if others else "")
        + (
            ": the profile trains one seed, so no spread over seeds is reported"
            if len(seeds) == 1
            else ": cells are the mean over seeds +- their sample std; the per-seed table lists each"
        ),
        "paper's published numbers": _paper_comparison(metrics)[1],
    }


def _tau_sweep_line(settings: Settings) -> str:
    """Which policies the tau sweep table holds: the run's grid (``split.tau_sweep_folds`` / ``_seeds``)."""
    split = settings.split
    others = [f"{t:g}" for t in settings.tokenize.taus if not same_tau(t, settings.evaluate.report_tau)]
    if split.tau_sweep_folds == "none" or not others:
        return "not run: the report's tau only (KP_TAU_SWEEP_FOLDS=last adds the other taus on the last fold)"
    where = "every fold" if split.tau_sweep_folds == "all" else "the last fold"
    return f"tau = {', '.join(others)} on {where}" + (", first seed only" if split.tau_sweep_seeds == "first" else "")


def _universe_line(settings: Settings) -> str:
    """What the universe is, and what it is not (survivorship, hindsight), in one line of the report's context."""
    if settings.data.source == "synthetic":
        return "synthetic tickers (none delisted: no survivorship to correct)"
    members = (
        f"each fold keeps the names added on or before its first test day ({settings.evaluate.membership_file})"
        if settings.evaluate.membership_file
        else "every ticker of the source, member on the day or not (no KP_MEMBERSHIP_FILE)"
    )
    return (
        "the source's tickers; a list of today's index members holds no name delisted or dropped since "
        f"(survivorship bias), and the paper chose its six test tickers with hindsight; {members}"
    )


def materialize_paper_tables(settings: Settings) -> tuple[dict[str, pl.DataFrame], Path, pl.DataFrame]:
    """Write every table (``tables/<name>.md|.parquet``), their context and ``tables.md``; returns the
    tables, the path of ``tables.md`` and the metrics they were built from. Pinned, last, to the evaluation files'
    digest taken before any is read and to the run's policies: ``report`` reads the tables only while both hold."""
    inputs = evaluation_digest(settings.warehouse)
    check_inputs_current(settings)  # no table of backtests whose model was replaced since
    built = {"verdict": read_verdict(settings)}
    paper_tables, metrics = rule_tables(settings)  # the pooled records, checked against their inputs
    built |= paper_tables
    oracle = oracle_rule_table(settings, read_view(settings, PREDICTIONS))
    if oracle is not None:
        built["oracle_rules"] = oracle
    built |= evidence_tables(settings, metrics)
    training = training_table(settings)
    if training is not None:
        built[TRAINING_TABLE] = training
    learnability = learnability_table(settings)
    if learnability is not None:
        built[LEARNABILITY_TABLE] = learnability
    budget_test = budget_test_table(settings)
    if budget_test is not None:
        built[BUDGET_TEST_TABLE] = budget_test
    on_test_days = learnability_test_table(settings)
    if on_test_days is not None:
        built[LEARNABILITY_TEST_TABLE] = on_test_days
    if walk_forward_run(settings):
        built["per_fold"] = per_fold_table(settings)
    tasks = read_task_tables(settings)  # the run's other tasks' evidence, as the verdict computed it (checked above)
    built |= tasks
    headings = table_headings(settings)
    out = settings.warehouse.report_tables_dir
    out.mkdir(parents=True, exist_ok=True)
    sections = []
    for name, frame in built.items():
        if name != "verdict" and name not in tasks:  # the verdict asset's own files
            write_text_atomic(out / f"{name}.md", markdown_table(frame) + "\n")
            settings.warehouse.write(frame, out / f"{name}.parquet")
        title, caption = headings[name]
        sections.append(f"### {title}\n\n" + (f"{caption}\n\n" if caption else "") + f"{markdown_table(frame)}\n")
    context = _context(settings, metrics)
    write_text_atomic(out / CONTEXT_FILE, json.dumps(context, indent=1))
    lines = "\n".join(f"- {k}: {v}" for k, v in context.items())
    path = settings.warehouse.tables_file
    text = f"## The paper's tables ({settings.profile} profile)\n\n{lines}\n\n" + "\n".join(sections)
    text += f"\n## Conventions\n\n{report_conventions(settings.evaluate, convention_notes(settings))}\n"
    write_text_atomic(path, text, settings.warehouse.durable)
    pin_evaluation(settings.warehouse, out / TABLES_PIN_FILE, inputs, run_keys_digest(settings))
    return built, path, metrics


def _window_days(settings: Settings, predictions: pl.DataFrame, ticker: str) -> list[dt.date]:
    days = predictions.filter(pl.col("ticker") == ticker)["date"].unique().sort().to_list()
    return days[-settings.evaluate.figure_days :]


def load_bars_and_kinematics(settings: Settings, ticker: str, days: list[dt.date]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Raw bars and end-of-window spline kinematics of one ticker on ``days`` (from the shards)."""
    wh, bars, kin = settings.warehouse, [], []
    for day in days:
        raw = exact.read_parquet(wh.verified_shards(RAW_OHLCV, [day])[0]).filter(pl.col("ticker") == ticker)
        bars.append(raw.select("ticker", "date", "open", "high", "low", "close", "volume"))
        tokens = exact.read_parquet(
            wh.verified_shards(SPLINE.tokens_asset, [day])[0], columns=["ticker", "date", "tokens"]
        ).filter(pl.col("ticker") == ticker)
        if tokens.height:
            state = window_end_kinematics(tokens["tokens"].to_numpy())
            kin.append(
                pl.DataFrame(
                    {"ticker": [ticker], "date": [day], **{c: state[:, j] for j, c in enumerate(KINEMATIC_COLUMNS)}}
                )
            )
    empty_kin = pl.DataFrame(
        schema={"ticker": pl.String, "date": pl.Date, **{c: pl.Float64 for c in KINEMATIC_COLUMNS}}
    )
    return (
        pl.concat(bars) if bars else pl.DataFrame(),
        pl.concat(kin) if kin else empty_kin,
    )


def training_curves(settings: Settings) -> dict[tuple[str, str], list[list[dict]]]:
    """The learning curves (``curves.csv``) of every foundation and of every adapter at the report's tau, per
    variant and stage, over the folds and seeds (those trained so far)."""
    out = {}
    for variant, stage, _, folder in model_runs(settings):
        rows = read_curves(folder)
        if rows:
            out.setdefault((variant, stage), []).append(rows)
    return out


def materialize_figures(settings: Settings) -> dict[str, Path]:
    ev = settings.evaluate
    metrics = load_metrics(settings)
    predictions = read_view(settings, PREDICTIONS)
    equity = read_pooled(settings, EQUITY_CURVES)
    focus = focus_ticker(settings, metrics)
    out = settings.warehouse.figures_dir
    out.mkdir(parents=True, exist_ok=True)
    names = ("equity_curves", "diagnostics", "sweeps", "kinematic_manifold", "responsiveness", "decision_rules")
    paths = {name: out / f"{name}.png" for name in (*names, "training_curves")}
    figures.training_curves_png(training_curves(settings), paths["training_curves"])
    figures.equity_curves_png(equity, ev.report_tau, ev.report_cost_bps, paths["equity_curves"])
    figures.diagnostics_png(predictions, focus, ev.report_tau, paths["diagnostics"])
    figures.sweeps_png(metrics, focus, paths["sweeps"])
    figures.decision_rules_png(
        metrics, pooled_margin_metrics(settings), ev.report_tau, ev.report_cost_bps, paths["decision_rules"]
    )
    days = _window_days(settings, predictions, focus)
    bars, kin = load_bars_and_kinematics(settings, focus, days)
    cut = settings.folds[-1].train_end
    start, end = (days[0], days[-1]) if days else (cut, cut)
    kinematic_figures.kinematic_manifold_png(bars, kin, focus, start, end, paths["kinematic_manifold"])
    resp = ev.responsiveness_ticker if ev.responsiveness_ticker in set(metrics["ticker"].to_list()) else focus
    if resp != focus:
        days = _window_days(settings, predictions, resp)
        bars, kin = load_bars_and_kinematics(settings, resp, days)
        start, end = (days[0], days[-1]) if days else (start, end)
    kinematic_figures.responsiveness_png(
        bars, kin, predictions, resp, FOCUS_VARIANT, ev.report_tau, start, end, paths["responsiveness"]
    )
    return paths | volatility_figures(settings, focus, out)  # none without a reported volatility task


def materialize_report(settings: Settings, extra_context: dict[str, str] | None = None) -> Path:
    """``report.md`` from what ``paper_tables`` and ``figures`` wrote (nothing is recomputed), once the tables are
    checked against the evaluation files and the run's policies they were built from (``StalePairError`` naming
    ``paper_tables`` otherwise: a report is never rewritten from old tables), and the evaluation files against the
    model files on disk now, as ``paper_tables`` checks them (``StalePairError`` naming the replaced model file and
    the predictions to re-make: a model replaced since its predictions were made leaves the tables' pin intact)."""
    wh = settings.warehouse
    tables_dir = wh.report_tables_dir
    if not (tables_dir / CONTEXT_FILE).exists():
        raise FileNotFoundError(f"no tables under {tables_dir}: materialize paper_tables first")
    check_evaluation(wh, tables_dir / TABLES_PIN_FILE, TABLES_ASSET, run_keys_digest(settings))
    check_inputs_current(settings)  # no report of backtests whose model was replaced since
    headings = table_headings(settings)
    built = {
        name: exact.read_parquet(tables_dir / f"{name}.parquet")
        for name in headings
        if name not in optional_tables(settings) or (tables_dir / f"{name}.parquet").exists()
    }
    figure_paths = {p.stem: p for p in sorted(wh.figures_dir.glob("*.png"))}
    text = document.render_report(
        f"Kinematic Tokenization: backtest report ({settings.profile} profile)",
        {**json.loads((tables_dir / CONTEXT_FILE).read_text()), **(extra_context or {})},
        built,
        figure_paths,
        report_conventions(settings.evaluate, convention_notes(settings)),
        relative_to=wh.reports_dir,
        lead=("verdict",),  # ALL_TITLES' name of the verdict table
        table_headings=headings,
        figure_headings=FIGURE_HEADINGS,
        answers=answer_lines(built["verdict"]) if "verdict" in built else None,
        sections={"Next-week volatility": ("task_vol", "volatility_")},  # the volatility task's tables and figures
    )
    path = wh.report_file
    write_text_atomic(path, text, wh.durable)
    return path


def headline(metrics: pl.DataFrame, tau: float, cost_bps: float) -> pl.DataFrame:
    """Mean Sharpe and return per variant at the report's tau and cost (for metadata)."""
    rows = metrics.filter((pl.col("cost_bps") == cost_bps) & (at_tau(tau) | pl.col("tau").is_null()))
    return (
        rows.group_by("variant")
        .agg(
            pl.col("sharpe").filter(pl.col("sharpe").is_not_nan()).mean().alias("mean_sharpe"),
            pl.col("total_return").mean().alias("mean_return"),
            pl.col("liquidation_equilibrium").mean().alias("share_liquidated"),
            pl.len().alias("tickers"),
        )
        .sort("variant")
        .with_columns(pl.col("mean_sharpe").fill_nan(None))
    )
