"""Pooled out-of-sample records: every fold's test days of a policy, backtested as one record.

With walk-forward folds (``folds.py``) each (variant, seed, tau) has one predictions shard per fold, each on its
own fold's test days (disjoint and consecutive). Pooling concatenates them in date order and runs the same
sweep over the whole out-of-sample period (one equity curve, one tax ledger, one bootstrap), so every table
reads one record per policy, 2019-2022 on ``real``; the per-fold backtests stay in the ``backtests`` view
(column ``fold``) for the per-fold breakdown. The margin rule is pooled alike: each fold's actions use the m
chosen on that fold's validation days. A policy evaluated on fewer folds (the tau sweep on the last fold
only) is pooled over the folds it has; ``folds`` says how many. With a single fold the views are the record.

The pooled frames are the ``pooled_backtests`` asset (``reports/pooled/``), pinned to the evaluation files they were
pooled from (``pins.check_evaluation``): the verdict, the tables and the figures read them back only while those
files are unchanged.

Three decision rules read the same predictions: the paper's (the argmax of the model's own softmax, exactly as the
paper trades; ``paper_rule_backtests``), the calibrated argmax (the argmax of the calibrated class-weighted softmax:
the ``backtests`` views and their pooled records) and the margin rule (``margin_backtests``). The paper's rule is
backtested here, from the predictions, for single and walk-forward runs alike. No dagster here.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from kinematic_pipeline.backtest.portfolio import portfolio_summary, ticker_excess
from kinematic_pipeline.backtest.sweep import run_sweep
from kinematic_pipeline.config import Settings
from kinematic_pipeline.model_pins import check_predictions_model, run_class_weights
from kinematic_pipeline.pins import check_backtests_current, check_evaluation, evaluation_digest, pin_evaluation
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.run_keys import keep_run_policies, run_keys_digest
from kinematic_pipeline.tasks.buy_sell_hold import at_tau
from kinematic_pipeline.tasks.rules import MarginRule, PaperArgmax
from kinematic_pipeline.variants import BENCHMARK
from kinematic_pipeline.warehouse import BACKTESTS, EQUITY_CURVES, MARGIN_BACKTESTS, PREDICTIONS
from kinematic_pipeline.warehouse import exact_paths as exact
from kinematic_pipeline.warehouse.layout import POOLED_ASSET, POOLED_PIN_FILE

POLICY_KEYS = ("variant", "tau", "seed")
MARGIN_EQUITY_CURVES = "margin_equity_curves"  # the margin rule's pooled equity: the verdict's second rule
PAPER_BACKTESTS = "paper_rule_backtests"  # the paper's rule (argmax of the model's own softmax), pooled
PAPER_EQUITY_CURVES = "paper_rule_equity_curves"
POOLED = (BACKTESTS, EQUITY_CURVES, MARGIN_BACKTESTS, MARGIN_EQUITY_CURVES, PAPER_BACKTESTS, PAPER_EQUITY_CURVES)
VIEWS = (BACKTESTS, EQUITY_CURVES, MARGIN_BACKTESTS)  # a single fold's pooled records are these views themselves


def read_view(settings: Settings, view: str) -> pl.DataFrame:
    """The rows of an asset's catalog view that belong to the run's policies (``run_keys``: a seed, tau or variant
    of an earlier run is left out; Buy & Hold stays); FileNotFoundError naming the asset when it has none yet. The
    backtests' views are checked against the predictions they were swept from (``check_backtests_current``)."""
    frame = settings.warehouse.read_view(view) if settings.warehouse.catalog_path.exists() else pl.DataFrame()
    frame = keep_run_policies(settings, frame)
    if frame.height == 0:
        raise FileNotFoundError(f"no {view} rows in {settings.warehouse.catalog_path}: materialize {view} first")
    if view in SWEPT:
        check_backtests_current(settings, frame)
    return frame


SWEPT = (BACKTESTS, EQUITY_CURVES, MARGIN_BACKTESTS)  # the views materialize_backtests sweeps from the predictions


def margin_metrics(settings: Settings) -> pl.DataFrame:
    """The margin rule's backtests (view ``margin_backtests``); an empty frame before any exists."""
    try:
        return read_view(settings, MARGIN_BACKTESTS)
    except FileNotFoundError:
        return pl.DataFrame()


def walk_forward_run(settings: Settings) -> bool:
    return len(settings.folds) > 1


def _fold_counts(predictions: pl.DataFrame) -> pl.DataFrame:
    return predictions.group_by(POLICY_KEYS).agg(pl.col("fold").n_unique().alias("folds"))


def _by_fold_set(predictions: pl.DataFrame) -> list[pl.DataFrame]:
    """The predictions split into groups of policies tested on the same folds (the same days): the sweep's Buy &
    Hold needs one set of days per ticker; the group with the most folds first."""
    sets = predictions.group_by(POLICY_KEYS).agg(pl.col("fold").unique().sort().str.join(",").alias("fold_set"))
    frame = predictions.join(sets, on=POLICY_KEYS, how="left")
    groups = sorted(frame["fold_set"].unique().to_list(), key=lambda s: -len(s.split(",")))
    return [frame.filter(pl.col("fold_set") == g).drop("fold_set") for g in groups]


def _pool(settings: Settings, predictions: pl.DataFrame, benchmark: bool) -> list:
    """Sweeps of the pooled predictions, one per fold set (Buy & Hold with the widest only)."""
    out, backtest = [], settings.evaluate.backtest
    for k, group in enumerate(_by_fold_set(predictions)):
        group = group.sort("variant", "tau", "seed", "ticker", "date")
        out.append(run_sweep(group, backtest, benchmark=benchmark and k == 0))
    return out


def _paper_rule(settings: Settings, predictions: pl.DataFrame) -> pl.DataFrame:
    """The predictions under the paper's rule: the argmax of the network's softmax, its p that softmax de-weighted
    with the run's class weights."""
    return PaperArgmax(run_class_weights(settings)).decide(predictions)


def _margin_actions(predictions: pl.DataFrame, margins: pl.DataFrame) -> pl.DataFrame:
    """The predictions with the margin rule's actions: each fold's rows thresholded at that fold's m."""
    m = margins.select(*POLICY_KEYS, "fold", "margin").unique(subset=[*POLICY_KEYS, "fold"])
    frame = predictions.join(m, on=[*POLICY_KEYS, "fold"], how="inner")
    rule, margin = MarginRule(), frame["margin"].to_numpy()
    actions = np.empty(frame.height, dtype=np.int8)
    for value in np.unique(margin):
        rows = margin == value
        actions[rows] = rule.at(frame.filter(pl.Series(rows)), float(value))
    return frame.with_columns(pl.Series("action", actions, dtype=pl.Int8)).drop("margin")


def check_inputs_current(settings: Settings) -> None:
    """Every evaluated policy's predictions (and so its backtests) were made by the model files on disk now (the
    check ``lineage`` and the backtests make); a ``StalePairError`` naming the policy's file, both hashes and the
    partition to re-materialize otherwise: a report rebuilt after a foundation or adapter was replaced must not
    present the old backtests as current."""
    rows = settings.warehouse.query("SELECT DISTINCT variant, tau, seed, fold FROM predictions ORDER BY ALL")
    for row in keep_run_policies(settings, rows).iter_rows(named=True):  # the run's policies only
        check_predictions_model(settings, Policy.from_row(row, settings.folds, settings.tasks))


def materialize_pooled_backtests(settings: Settings) -> dict[str, pl.DataFrame]:
    """The ``pooled_backtests`` asset: once every policy's predictions are checked against the model files on disk
    now, ``pooled_evaluation``."""
    check_inputs_current(settings)
    return pooled_evaluation(settings)


def pooled_evaluation(settings: Settings) -> dict[str, pl.DataFrame]:
    """{backtests, equity_curves, margin_backtests, margin_equity_curves}: one pooled record per policy (and Buy &
    Hold), with the number of folds pooled (``folds``); for a single fold the views themselves, and the margin
    rule's equity curves (no view holds them). Written under ``reports/pooled/``, with the digest of the evaluation
    files they were pooled from (taken before they are read)."""
    folder, inputs = settings.warehouse.pooled_dir, evaluation_digest(settings.warehouse)
    policies = run_keys_digest(settings)
    if not walk_forward_run(settings):
        frames = {BACKTESTS: read_view(settings, BACKTESTS), EQUITY_CURVES: read_view(settings, EQUITY_CURVES)}
        frames[MARGIN_BACKTESTS] = margins = margin_metrics(settings)
        frames[MARGIN_EQUITY_CURVES] = pl.DataFrame()
        if margins.height:
            sweeps = _pool(settings, _margin_actions(read_view(settings, PREDICTIONS), margins), False)
            frames[MARGIN_EQUITY_CURVES] = pl.concat([s.equity for s in sweeps])
        paper = _pool(settings, _paper_rule(settings, read_view(settings, PREDICTIONS)), False)
        frames[PAPER_BACKTESTS] = pl.concat([s.metrics for s in paper])
        frames[PAPER_EQUITY_CURVES] = pl.concat([s.equity for s in paper])
        for name in (MARGIN_EQUITY_CURVES, PAPER_BACKTESTS, PAPER_EQUITY_CURVES):
            settings.warehouse.write(frames[name], folder / f"{name}.parquet")
        pin_evaluation(settings.warehouse, folder / POOLED_PIN_FILE, inputs, policies)
        return frames
    predictions = read_view(settings, PREDICTIONS)
    counts = _fold_counts(predictions)
    sweeps = _pool(settings, predictions, benchmark=True)
    n_folds = len(settings.folds)

    def with_folds(frame: pl.DataFrame) -> pl.DataFrame:
        joined = frame.join(counts, on=POLICY_KEYS, how="left", nulls_equal=True)
        is_benchmark = pl.col("variant") == BENCHMARK
        return joined.with_columns(pl.when(is_benchmark).then(n_folds).otherwise(pl.col("folds")).alias("folds"))

    frames = {
        BACKTESTS: with_folds(pl.concat([s.metrics for s in sweeps])),
        EQUITY_CURVES: with_folds(pl.concat([s.equity for s in sweeps])),
    }
    margins = margin_metrics(settings)
    if margins.height:
        thresholded = _margin_actions(predictions, margins)
        margin_sweeps = _pool(settings, thresholded, benchmark=False)
        summary = margins.group_by(POLICY_KEYS).agg(
            pl.col("margin").mean().alias("margin"), pl.col("validation_rows").sum().alias("validation_rows")
        )
        pooled = pl.concat([s.metrics for s in margin_sweeps]).join(summary, on=POLICY_KEYS, how="left")
        frames[MARGIN_BACKTESTS] = with_folds(pooled)
        frames[MARGIN_EQUITY_CURVES] = with_folds(pl.concat([s.equity for s in margin_sweeps]))
    else:
        frames[MARGIN_BACKTESTS] = frames[MARGIN_EQUITY_CURVES] = margins
    paper = _pool(settings, _paper_rule(settings, predictions), benchmark=False)
    frames[PAPER_BACKTESTS] = with_folds(pl.concat([s.metrics for s in paper]))
    frames[PAPER_EQUITY_CURVES] = with_folds(pl.concat([s.equity for s in paper]))
    for name, frame in frames.items():
        settings.warehouse.write(frame, folder / f"{name}.parquet")
    pin_evaluation(settings.warehouse, folder / POOLED_PIN_FILE, inputs, policies)
    return frames


def read_pooled(settings: Settings, name: str) -> pl.DataFrame:
    """A pooled frame of the ``pooled_backtests`` asset, once checked against the evaluation files it was pooled
    from (``pins.check_evaluation``); the view itself for a single fold."""
    if not walk_forward_run(settings) and name in VIEWS:
        return margin_metrics(settings) if name == MARGIN_BACKTESTS else read_view(settings, name)
    folder = settings.warehouse.pooled_dir
    check_evaluation(settings.warehouse, folder / POOLED_PIN_FILE, POOLED_ASSET, run_keys_digest(settings))
    return exact.read_parquet(folder / f"{name}.parquet")


def portfolio_summaries(settings: Settings, equity: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """``backtest.portfolio.portfolio_summary`` of ``equity`` curves at the report's tau and cost (Buy & Hold
    rows too): per ``by`` group, the bounded Sharpe of the equal-weight portfolio of its tickers (seeds averaged
    unless ``by`` holds the seed), its days in the market and the tickers never in it."""
    ev = settings.evaluate
    if equity.is_empty():
        return pl.DataFrame()
    rows = equity.filter(
        (pl.col("cost_bps") == ev.report_cost_bps) & (at_tau(ev.report_tau) | (pl.col("variant") == BENCHMARK))
    )
    return portfolio_summary(ticker_excess(rows, ev.backtest.rf_annual), by)


def per_fold_table(settings: Settings) -> pl.DataFrame:
    """Every fold's own backtests at the report's tau and cost: per variant and fold, the Sharpe of the
    equal-weight portfolio of the test tickers (cash credited with rf, ``backtest.portfolio``; seeds averaged),
    its days in the market and the total return averaged over tickers and seeds (Buy & Hold beside), with the
    test days of the fold."""
    ev = settings.evaluate
    rows = read_view(settings, BACKTESTS).filter(
        (pl.col("cost_bps") == ev.report_cost_bps) & (at_tau(ev.report_tau) | pl.col("tau").is_null())
    )
    ew = portfolio_summaries(settings, read_view(settings, EQUITY_CURVES), ["variant", "fold"])
    order = [f.label for f in settings.folds]
    per = (
        rows.group_by("variant", "fold")
        .agg(
            (pl.col("total_return").mean() * 100).round(1).alias("return_pct"),
            pl.col("first_date").min().alias("first"),
            pl.col("last_date").max().alias("last"),
        )
        .join(ew.select("variant", "fold", "sharpe", "days_in_market"), on=["variant", "fold"], how="left")
        .with_columns(
            pl.when(pl.col("sharpe").is_nan() | pl.col("sharpe").is_null())
            .then(pl.lit("N/A"))
            .otherwise(pl.col("sharpe").map_elements(lambda v: f"{v:.2f}", return_dtype=pl.String))
            .alias("sharpe"),
            pl.col("fold").replace_strict(order, list(range(len(order))), default=99).alias("_k"),
        )
    )
    values = ["sharpe", "days_in_market", "return_pct"]
    wide = per.pivot(on="fold", index="variant", values=values, sort_columns=False)
    folds = per.sort("_k").unique("fold", maintain_order=True)
    renamed = {}
    for f in folds.iter_rows(named=True):
        span = f"{f['fold']} ({f['first']}..{f['last']})"
        renamed[f"sharpe_{f['fold']}"] = f"Sharpe {span}"
        renamed[f"days_in_market_{f['fold']}"] = f"days in market {f['fold']}"
        renamed[f"return_pct_{f['fold']}"] = f"return % {f['fold']}"
    columns = ["variant"] + [c for f in folds["fold"] for c in (f"{v}_{f}" for v in values) if c in wide.columns]
    return wide.select(columns).rename(renamed).sort("variant")


def pooled_margin_metrics(settings: Settings) -> pl.DataFrame:
    """The margin rule's pooled record per policy (``stages.pooled``; the view itself for a single fold)."""
    return read_pooled(settings, MARGIN_BACKTESTS)


RULE_RECORDS = {  # rule -> its pooled (metrics, equity curves): stages.pooled's files
    "paper": (PAPER_BACKTESTS, PAPER_EQUITY_CURVES),
    "calibrated": (BACKTESTS, EQUITY_CURVES),
    "margin": (MARGIN_BACKTESTS, MARGIN_EQUITY_CURVES),
}


def rule_portfolios(settings: Settings) -> dict[str, pl.DataFrame]:
    """{rule: the equal-weight portfolio summary per variant} of each rule's pooled records."""
    return {
        rule: portfolio_summaries(settings, read_pooled(settings, equity), ["variant"])
        for rule, (_, equity) in RULE_RECORDS.items()
    }


def rule_records(settings: Settings, metrics: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """{rule: its pooled metrics}, the calibrated argmax's being ``metrics`` (read once by the caller)."""
    return {
        rule: metrics if rule == "calibrated" else read_pooled(settings, backtests)
        for rule, (backtests, _) in RULE_RECORDS.items()
    }
