"""backtests and margin_backtests: one policy's stored predictions swept over every cost, under both rules; a
forecast's (the volatility task's) volatility-targeted backtests in its backtests partition instead.

The calibrated argmax (the argmax of the calibrated class-weighted probabilities, the ``action`` column of the
predictions) and the margin rule (trade beyond a margin m of the stored de-weighted p, m chosen on validation days) are
backtested with the run's costs, tax and bootstrap; Buy & Hold rides along. The paper's rule (the argmax of the
network's own softmax) is backtested on the pooled records (``stages.pooled``). Every output row's provenance is
written beside it (``lineage.py``). No dagster here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from kinematic_pipeline.backtest.sweep import (
    EQUITY_SCHEMA,
    METRICS_SCHEMA,
    TRADES_SCHEMA,
    SweepResult,
    run_sweep,
)
from kinematic_pipeline.backtest.volatility_targeting import POLICY_TARGETING_SCHEMA, policy_targeting
from kinematic_pipeline.config import EvalConfig, Settings
from kinematic_pipeline.lineage import PROVENANCE_SCHEMA, provenance_frame
from kinematic_pipeline.model_pins import check_predictions_model, predictions_class_weights
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.predictors.families import predictor
from kinematic_pipeline.report.markdown import Markdown, markdown_table
from kinematic_pipeline.stages.task_evidence import raw_bars
from kinematic_pipeline.tasks.buy_sell_hold import PREDICTIONS_SCHEMA
from kinematic_pipeline.tasks.rules import MarginRule
from kinematic_pipeline.variants import BENCHMARK
from kinematic_pipeline.warehouse import (
    BACKTESTS,
    EQUITY_CURVES,
    MARGIN_BACKTESTS,
    PREDICTIONS,
    PROVENANCE,
    RAW_OHLCV,
    TARGETING_BACKTESTS,
    TRADES,
)
from kinematic_pipeline.warehouse import exact_paths as exact
from kinematic_pipeline.warehouse.layout import VALIDATION_PREDICTIONS

MARGIN_METRICS_SCHEMA = {**METRICS_SCHEMA, "margin": pl.Float64, "validation_rows": pl.Int64}
FOLD = {"fold": pl.String}  # every evaluation row names its walk-forward fold (folds.Fold.label)
EVALUATION_SCHEMAS: dict[str, dict[str, pl.DataType]] = {
    PREDICTIONS: PREDICTIONS_SCHEMA | FOLD,  # Buy/Sell/Hold's view, as stages.predict refreshes it
    BACKTESTS: METRICS_SCHEMA | FOLD,
    MARGIN_BACKTESTS: MARGIN_METRICS_SCHEMA | FOLD,
    EQUITY_CURVES: EQUITY_SCHEMA | FOLD,
    TRADES: TRADES_SCHEMA | FOLD,
    PROVENANCE: PROVENANCE_SCHEMA,
    TARGETING_BACKTESTS: POLICY_TARGETING_SCHEMA,
}
MAIN_METRICS = (  # the columns the backtests asset shows at the report's cost
    "variant",
    "ticker",
    "total_return",
    "sharpe",
    "sharpe_ci_low",
    "sharpe_ci_high",
    "sortino",
    "max_drawdown",
    "action_rate",
    "turnover_annual",
    "liquidation_equilibrium",
)


def margin_rule_backtests(settings: Settings, predictions: pl.DataFrame, validation: pl.DataFrame) -> pl.DataFrame:
    """The margin rule, backtested like the calibrated argmax: Buy / Sell when p_buy - p_sell of the stored
    (de-weighted) p exceeds +m / falls below -m, m chosen on the ``validation``-day predictions only
    (``tasks.rules.choose_margin``: balanced accuracy over a fixed grid). Metrics rows with ``m`` beside."""
    rule = MarginRule()
    margin, rows = rule.margin(validation)
    actions = pl.Series("action", rule.at(predictions, margin), dtype=pl.Int8)
    sweep = run_sweep(predictions.with_columns(actions), settings.evaluate.backtest, benchmark=False)
    return sweep.metrics.with_columns(
        pl.lit(margin).alias("margin"), pl.lit(rows).cast(pl.Int64).alias("validation_rows")
    )


@dataclass(frozen=True)
class Backtests:
    policy: Policy
    sweep: SweepResult  # the calibrated argmax, with Buy & Hold
    margin: pl.DataFrame  # MARGIN_METRICS_SCHEMA
    paths: dict[str, Path]  # asset -> the file written

    def metadata(self, ev: EvalConfig) -> dict:
        main = self.sweep.metrics.filter(pl.col("cost_bps") == ev.report_cost_bps).select(MAIN_METRICS)
        own = self.sweep.metrics.filter(pl.col("variant") == self.policy.variant.name)
        return {
            "backtests": own.height,
            "costs_bps": ", ".join(f"{c:g}" for c in ev.backtest.costs_bps),
            f"metrics_at_{ev.report_cost_bps:g}_bps": Markdown(markdown_table(main)),
            "liquidation_equilibrium": bool(own["liquidation_equilibrium"].all()) if own.height else False,
            "margin_m": float(self.margin["margin"][0]) if self.margin.height else float("nan"),
            **{f"{name}_path": path for name, path in self.paths.items()},
            "lineage_command": f"python -m kinematic_pipeline lineage {self.policy.lineage_args}",
        }


def materialize_backtests(settings: Settings, policy: Policy, code_versions: dict[str, str]) -> Backtests:
    """Sweep the policy's stored predictions over every cost under both rules; write metrics, equity, trades,
    the margin rule's metrics and the provenance; refresh their views.

    Buy & Hold depends only on the test tickers' closes, not on the policy: its rows go to one shard per
    asset and fold (``buy_and_hold.parquet``, ``buy_and_hold_fold2019.parquet``) that every policy of the fold
    writes with the same bytes, so each view holds them once.
    """
    ev, wh = settings.evaluate, settings.warehouse
    if not policy.task.rules:
        return materialize_targeting(settings, policy, code_versions)
    predictions_file = wh.predictions_file(policy)
    if not predictions_file.exists():
        key = policy.key
        raise FileNotFoundError(
            f"{predictions_file} is missing: materialize {policy.variant.name}_predictions partition {key}"
        )
    check_predictions_model(settings, policy)  # made by the adapter (foundation, probe) on disk now
    predictions = exact.read_parquet(predictions_file)
    # the class weights the stored p were de-weighted with are the model's (a StalePairError otherwise); Brier and
    # ECE score the stored p as they are
    predictions_class_weights(settings, policy)
    sweep = run_sweep(predictions, ev.backtest)
    fold = pl.lit(policy.fold.label).alias("fold")
    paths = {}
    for asset, frame in ((BACKTESTS, sweep.metrics), (EQUITY_CURVES, sweep.equity), (TRADES, sweep.trades)):
        is_benchmark, frame = pl.col("variant") == BENCHMARK, frame.with_columns(fold)
        wh.write(frame.filter(is_benchmark), wh.benchmark_file(asset, policy.fold.name))
        paths[asset] = wh.evaluation_file(asset, policy)
        wh.write(frame.filter(~is_benchmark), paths[asset])
    validation = exact.read_parquet(wh.predictions_extra(VALIDATION_PREDICTIONS, policy))
    margin = margin_rule_backtests(settings, predictions, validation).with_columns(fold)
    paths[MARGIN_BACKTESTS] = wh.evaluation_file(MARGIN_BACKTESTS, policy)
    wh.write(margin, paths[MARGIN_BACKTESTS])
    provenance = provenance_frame(
        settings, policy, predictor(policy.variant), outputs=paths, code_versions=code_versions
    )
    paths[PROVENANCE] = wh.evaluation_file(PROVENANCE, policy)
    wh.write(provenance, paths[PROVENANCE])
    for asset in paths:
        wh.refresh_view(asset, EVALUATION_SCHEMAS[asset])
    return Backtests(policy, sweep, margin, paths)


@dataclass(frozen=True)
class Targeting:
    """A forecast policy's volatility-targeted backtests (``policy_targeting``): what its backtests partition holds."""

    policy: Policy
    metrics: pl.DataFrame  # POLICY_TARGETING_SCHEMA
    paths: dict[str, Path]
    margin = pl.DataFrame(schema=MARGIN_METRICS_SCHEMA)  # a forecast has no margin rule

    def metadata(self, ev: EvalConfig) -> dict:
        at = self.metrics.filter(pl.col("cost_bps") == ev.report_cost_bps)
        columns = ["ticker", "days", "sigma_target", "sharpe", "buy_and_hold_sharpe", "mean_weight", "turnover"]
        return {
            "backtests": self.metrics.height,
            "rule": "volatility targeting: weight min(1, sigma_target / the forecast daily volatility)",
            f"metrics_at_{ev.report_cost_bps:g}_bps": Markdown(markdown_table(at.select(columns))),
            **{f"{name}_path": path for name, path in self.paths.items()},
            "lineage_command": f"python -m kinematic_pipeline lineage {self.policy.lineage_args}",
        }


def materialize_targeting(settings: Settings, policy: Policy, code_versions: dict[str, str]) -> Targeting:
    """A forecast policy's backtests: volatility targeting on its stored test-day forecasts at every cost, each
    ticker's target volatility from the raw bars of its fold's training days (``policy_targeting``), written with
    the provenance of every file behind it (the predictions' chain and those raw shards), so ``lineage`` traces its
    Sharpe as it does a rule's."""
    wh, fold = settings.warehouse, policy.fold
    predictions_file = wh.predictions_file(policy)
    if not predictions_file.exists():
        raise FileNotFoundError(
            f"{predictions_file} is missing: materialize {policy.variant.name}_predictions partition {policy.key}"
        )
    check_predictions_model(settings, policy)
    predictions = exact.read_parquet(predictions_file)
    tickers = predictions["ticker"].unique().sort().to_list()
    bars = raw_bars(settings, tickers, fold.train_end)
    metrics = policy_targeting(
        predictions, bars, policy.task.horizon, fold.train_end, fold.label, settings.evaluate.backtest
    )
    paths = {TARGETING_BACKTESTS: wh.evaluation_file(TARGETING_BACKTESTS, policy)}
    wh.write(metrics, paths[TARGETING_BACKTESTS])
    days = wh.shard_days(RAW_OHLCV, until=fold.train_end)
    sized_on = [(RAW_OHLCV, wh.shard(RAW_OHLCV, d), h, d) for d, h in zip(days, wh.content_hashes(RAW_OHLCV, days))]
    provenance = provenance_frame(
        settings, policy, predictor(policy.variant), outputs=paths, code_versions=code_versions, sized_on=sized_on
    )
    paths[PROVENANCE] = wh.evaluation_file(PROVENANCE, policy)
    wh.write(provenance, paths[PROVENANCE])
    for asset in paths:
        wh.refresh_view(asset, EVALUATION_SCHEMAS[asset])
    return Targeting(policy, metrics, paths)
