"""Evaluate stage: predictions and backtests, partitioned by model variant x tau."""

import time

import dagster as dg
import polars as pl

from kinematic_pipeline import __version__
from kinematic_pipeline.config import VARIANT_TOKEN_ASSET, Settings
from kinematic_pipeline.orchestration.assets_ingest import INGEST_CODE_VERSION
from kinematic_pipeline.orchestration.assets_models import MODELS_CODE_VERSION, tau_key
from kinematic_pipeline.orchestration.assets_tokenize import TOKENIZE_CODE_VERSION
from kinematic_pipeline.orchestration.metadata import markdown_table
from kinematic_pipeline.orchestration.resources import PipelineSettings
from kinematic_pipeline.stages.evaluate import (
    BACKTESTS_ASSET,
    PREDICTIONS_ASSET,
    PROVENANCE_ASSET,
    code_revision,
    run_backtests,
    run_predictions,
)

EVALUATE_CODE_VERSION = "evaluate-1"


def evaluation_partitions(settings: Settings) -> dg.MultiPartitionsDefinition:
    """One partition per (tau, variant): keys like ``0.01|splinegpt``."""
    return dg.MultiPartitionsDefinition(
        {
            "tau": dg.StaticPartitionsDefinition([tau_key(t) for t in settings.tokenize.taus]),
            "variant": dg.StaticPartitionsDefinition(list(settings.train.variants)),
        }
    )


def _partition(context: dg.AssetExecutionContext) -> tuple[str, str]:
    key = context.partition_key.keys_by_dimension  # a MultiPartitionKey
    return key["variant"], key["tau"]


def build_evaluate_assets(settings: Settings) -> list[dg.AssetsDefinition]:
    partitions = evaluation_partitions(settings)
    same_tau = dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name="tau")
    every_day = dg.AllPartitionMapping()
    token_assets = sorted({VARIANT_TOKEN_ASSET[v] for v in settings.train.variants})

    @dg.asset(
        name=PREDICTIONS_ASSET,
        group_name="evaluate",
        code_version=EVALUATE_CODE_VERSION,
        partitions_def=partitions,
        deps=[
            *[dg.AssetDep(f"{v}_adapter", partition_mapping=same_tau) for v in settings.train.variants],
            *[dg.AssetDep(a, partition_mapping=every_day) for a in token_assets],
            dg.AssetDep("labels", partition_mapping=every_day),
            dg.AssetDep("raw_ohlcv", partition_mapping=every_day),
            dg.AssetDep("corpus_stats"),
        ],
        kinds={"pytorch", "parquet"},
        description="Buy/Sell/Hold probabilities and the argmax action of one fine-tuned policy (variant x tau) "
        "for every test ticker and test day (after data.train_end), each from the causal window ending that "
        "day (rolling protocol: no later bar enters). Realized labels ride along for evaluation only.",
    )
    def predictions(context: dg.AssetExecutionContext, settings: PipelineSettings) -> dg.MaterializeResult:
        cfg = settings.resolve()
        variant, tau = _partition(context)
        started = time.perf_counter()
        result, path = run_predictions(cfg, variant, tau)
        frame = result.frame
        if result.missing_tickers:
            context.log.warning(f"test tickers with no test-period window: {', '.join(result.missing_tickers)}")
        per_ticker = (
            frame.group_by("ticker")
            .agg(
                pl.len().alias("days"),
                pl.col("date").min().alias("first"),
                pl.col("date").max().alias("last"),
                *[(pl.col("action") == k).sum().alias(name) for k, name in enumerate(("buy", "sell", "hold"))],
                pl.col("p_buy").mean().alias("mean_p_buy"),
            )
            .sort("ticker")
        )
        return dg.MaterializeResult(
            metadata={
                "variant": variant,
                "tau": float(tau),
                "rows": frame.height,
                "test_days": frame["date"].n_unique() if frame.height else 0,
                "per_ticker": dg.MetadataValue.md(markdown_table(per_ticker)),
                "missing_test_tickers": ", ".join(result.missing_tickers) or "none",
                "path": dg.MetadataValue.path(str(path)),
                "wall_seconds": round(time.perf_counter() - started, 2),
            }
        )

    @dg.asset(
        name=BACKTESTS_ASSET,
        group_name="evaluate",
        code_version=EVALUATE_CODE_VERSION,
        partitions_def=partitions,
        deps=[dg.AssetDep(PREDICTIONS_ASSET)],
        kinds={"numba", "parquet", "duckdb"},
        description="Tax-aware long/cash backtests of the predictions at every cost in evaluate.costs_bps, with "
        "Buy & Hold, metrics and bootstrap Sharpe intervals; equity curves and trades; and the provenance of "
        "every row (adapter, foundation, training and test shards with hashes, raw partitions, code versions).",
    )
    def backtests(context: dg.AssetExecutionContext, settings: PipelineSettings) -> dg.MaterializeResult:
        cfg = settings.resolve()
        variant, tau = _partition(context)
        code = {
            "kinematic_pipeline": __version__,
            "git": code_revision(),
            "ingest": INGEST_CODE_VERSION,
            "tokenize": TOKENIZE_CODE_VERSION,
            "models": MODELS_CODE_VERSION,
            "evaluate": EVALUATE_CODE_VERSION,
            "dagster_run_id": context.run_id,
        }
        sweep, paths = run_backtests(cfg, variant, tau, code)
        ev = cfg.evaluate
        main = sweep.metrics.filter(pl.col("cost_bps") == ev.report_cost_bps).select(
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
        policy = sweep.metrics.filter(pl.col("variant") == variant)
        return dg.MaterializeResult(
            metadata={
                "variant": variant,
                "tau": float(tau),
                "backtests": policy.height,
                "costs_bps": ", ".join(f"{c:g}" for c in ev.costs_bps),
                f"metrics_at_{ev.report_cost_bps:g}_bps": dg.MetadataValue.md(markdown_table(main)),
                "liquidation_equilibrium": bool(policy["liquidation_equilibrium"].all()) if policy.height else False,
                "provenance_rows": pl.read_parquet(paths[PROVENANCE_ASSET]).height,
                **{f"{name}_path": dg.MetadataValue.path(str(p)) for name, p in paths.items()},
                "lineage_command": f"python -m kinematic_pipeline lineage --model {variant} --tau {tau}",
            }
        )

    return [predictions, backtests]
