"""Evaluate stage: predictions and backtests, partitioned by tau x policy (a model variant and its seed).

The stage module (torch, PEFT) is imported inside the bodies: loading the definitions stays light.
"""

import time

import dagster as dg
import polars as pl

from kinematic_pipeline import __version__
from kinematic_pipeline.config import Settings
from kinematic_pipeline.orchestration.assets_ingest import INGEST_CODE_VERSION
from kinematic_pipeline.orchestration.assets_models import MODELS_CODE_VERSION, tau_partitions
from kinematic_pipeline.orchestration.assets_tokenize import TOKENIZE_CODE_VERSION
from kinematic_pipeline.orchestration.metadata import markdown_table
from kinematic_pipeline.storage import (
    BACKTESTS,
    CORPUS_STATS,
    LABELS,
    PREDICTIONS,
    PROVENANCE,
    RAW_OHLCV,
    parse_policy_key,
    policy_key,
)
from kinematic_pipeline.variants import ACTION_KEYS
from kinematic_pipeline.variants import variant as lookup_variant

EVALUATE_CODE_VERSION = "evaluate-1"
MAIN_METRICS = (
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


def policy_partitions(settings: Settings) -> dg.StaticPartitionsDefinition:
    """One key per fine-tuned policy family: a variant and a seed, ``splinegpt@1234``."""
    return dg.StaticPartitionsDefinition(
        [policy_key(v, s) for v in settings.train.variants for s in settings.train.seeds]
    )


def evaluation_partitions(settings: Settings) -> dg.MultiPartitionsDefinition:
    """One partition per (tau, policy): keys like ``0.01|splinegpt@1234`` (Dagster allows two dimensions,
    so the variant and its seed share one)."""
    return dg.MultiPartitionsDefinition({"tau": tau_partitions(settings), "policy": policy_partitions(settings)})


def adapter_of_policy(settings: Settings) -> dg.MultiPartitionMapping:
    """An evaluation partition (tau, variant@seed) reads the adapter partition (tau, seed)."""
    # keyed by the upstream (adapter) dimension; each maps to the downstream (evaluation) dimension
    policies = {str(s): {policy_key(v, s) for v in settings.train.variants} for s in settings.train.seeds}
    return dg.MultiPartitionMapping(
        {
            "tau": dg.DimensionPartitionMapping("tau", dg.IdentityPartitionMapping()),
            "seed": dg.DimensionPartitionMapping("policy", dg.StaticPartitionMapping(policies)),
        }
    )


def _partition(context: dg.AssetExecutionContext) -> tuple[str, int, str]:
    key = context.partition_key.keys_by_dimension  # a MultiPartitionKey
    variant, seed = parse_policy_key(key["policy"])
    return variant, seed, key["tau"]


def predictions_asset(settings: Settings) -> dg.AssetsDefinition:
    same_tau_and_seed = adapter_of_policy(settings)
    every_day = dg.AllPartitionMapping()
    token_assets = sorted({lookup_variant(v).token_asset for v in settings.train.variants})

    @dg.asset(
        name=PREDICTIONS,
        group_name="evaluate",
        code_version=EVALUATE_CODE_VERSION,
        partitions_def=evaluation_partitions(settings),
        deps=[
            *[dg.AssetDep(f"{v}_adapter", partition_mapping=same_tau_and_seed) for v in settings.train.variants],
            *[dg.AssetDep(a, partition_mapping=every_day) for a in token_assets],
            dg.AssetDep(LABELS, partition_mapping=every_day),
            dg.AssetDep(RAW_OHLCV, partition_mapping=every_day),
            dg.AssetDep(CORPUS_STATS),
        ],
        kinds={"pytorch", "parquet"},
        description="Buy/Sell/Hold probabilities and the argmax action of one fine-tuned policy (tau x variant@seed) "
        "for every test ticker and test day (after data.train_end), each from the causal window ending that "
        "day (rolling protocol: no later bar enters). Realized labels ride along for evaluation only.",
    )
    def predictions(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        from kinematic_pipeline.stages.evaluate import run_predictions

        variant, seed, tau = _partition(context)
        started = time.perf_counter()
        result, path = run_predictions(settings.for_seed(seed), variant, tau)
        frame = result.frame
        if result.missing_tickers:
            context.log.warning(f"test tickers with no test-period window: {', '.join(result.missing_tickers)}")
        per_ticker = (
            frame.group_by("ticker")
            .agg(
                pl.len().alias("days"),
                pl.col("date").min().alias("first"),
                pl.col("date").max().alias("last"),
                *[(pl.col("action") == code).sum().alias(name) for code, name in enumerate(ACTION_KEYS)],
                pl.col("p_buy").mean().alias("mean_p_buy"),
            )
            .sort("ticker")
        )
        return dg.MaterializeResult(
            metadata={
                "variant": variant,
                "seed": seed,
                "tau": float(tau),
                "rows": frame.height,
                "test_days": frame["date"].n_unique() if frame.height else 0,
                "per_ticker": dg.MetadataValue.md(markdown_table(per_ticker)),
                "missing_test_tickers": ", ".join(result.missing_tickers) or "none",
                "path": dg.MetadataValue.path(str(path)),
                "wall_seconds": round(time.perf_counter() - started, 2),
            }
        )

    return predictions


def backtests_asset(settings: Settings) -> dg.AssetsDefinition:
    @dg.asset(
        name=BACKTESTS,
        group_name="evaluate",
        code_version=EVALUATE_CODE_VERSION,
        partitions_def=evaluation_partitions(settings),
        deps=[dg.AssetDep(PREDICTIONS)],
        kinds={"numba", "parquet", "duckdb"},
        description="Tax-aware long/cash backtests of the predictions at every cost in evaluate.costs_bps, with "
        "Buy & Hold, metrics and bootstrap Sharpe intervals; equity curves and trades; and the provenance of "
        "every row (adapter, foundation, training and test shards with hashes, raw partitions, code versions).",
    )
    def backtests(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        from kinematic_pipeline.stages.evaluate import code_revision, run_backtests

        variant, seed, tau = _partition(context)
        code = {
            "kinematic_pipeline": __version__,
            "git": code_revision(),
            "ingest": INGEST_CODE_VERSION,
            "tokenize": TOKENIZE_CODE_VERSION,
            "models": MODELS_CODE_VERSION,
            "evaluate": EVALUATE_CODE_VERSION,
            "dagster_run_id": context.run_id,
        }
        sweep, paths = run_backtests(settings.for_seed(seed), variant, tau, code)
        ev = settings.evaluate
        main = sweep.metrics.filter(pl.col("cost_bps") == ev.report_cost_bps).select(MAIN_METRICS)
        policy = sweep.metrics.filter(pl.col("variant") == variant)
        return dg.MaterializeResult(
            metadata={
                "variant": variant,
                "seed": seed,
                "tau": float(tau),
                "backtests": policy.height,
                "costs_bps": ", ".join(f"{c:g}" for c in ev.costs_bps),
                f"metrics_at_{ev.report_cost_bps:g}_bps": dg.MetadataValue.md(markdown_table(main)),
                "liquidation_equilibrium": bool(policy["liquidation_equilibrium"].all()) if policy.height else False,
                "provenance_rows": pl.read_parquet(paths[PROVENANCE]).height,
                **{f"{name}_path": dg.MetadataValue.path(str(p)) for name, p in paths.items()},
                "lineage_command": f"python -m kinematic_pipeline lineage --model {variant} --tau {tau} --seed {seed}",
            }
        )

    return backtests


def build_evaluate_assets(settings: Settings) -> list[dg.AssetsDefinition]:
    return [predictions_asset(settings), backtests_asset(settings)]
