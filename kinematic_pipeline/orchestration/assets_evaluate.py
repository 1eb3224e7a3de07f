"""Evaluate stage: each variant's predictions, backtests and margin-rule backtests, partitioned like its
adapters (one fine-tuned policy per (seed, tau) partition).

An evaluation asset holds one variant's results and has exactly that variant's chain upstream: its adapter,
its foundation, its own token asset and statistics, labels, raw_ohlcv. The stage modules import torch and PEFT
inside their functions: loading the definitions stays light.
"""

import time

import dagster as dg

from kinematic_pipeline.code_versions import CODE_VERSIONS, code_versions
from kinematic_pipeline.config import Settings
from kinematic_pipeline.orchestration.metadata import dagster_metadata
from kinematic_pipeline.orchestration.partitions import context_policy, decision_partitions, policy_partitions
from kinematic_pipeline.stages.backtests import materialize_backtests
from kinematic_pipeline.stages.predict import materialize_predictions
from kinematic_pipeline.variants import variant as lookup_variant
from kinematic_pipeline.warehouse import BACKTESTS, MARGIN_BACKTESTS, PREDICTIONS

EVALUATION_ASSETS = (PREDICTIONS, BACKTESTS, MARGIN_BACKTESTS)  # one of each per variant: <variant>_<asset>


def evaluation_asset(variant: str, asset: str) -> str:
    """The name of a variant's evaluation asset: ``splinegpt_predictions``."""
    return lookup_variant(variant).asset(asset)


def evaluation_group(variant: str) -> str:
    """The models' evaluation assets are group ``evaluate``; the probes' and rules' group ``baselines``."""
    return lookup_variant(variant).group


def _prediction_inputs(variant: str) -> tuple[list[dg.AssetDep], str]:
    """What a variant's predictions read, and what does the predicting (for the description)."""
    spec, every_day = lookup_variant(variant), dg.AllPartitionMapping()
    deps = [dg.AssetDep(a, partition_mapping=every_day) if daily else dg.AssetDep(a) for a, daily in spec.inputs()]
    return deps, spec.made_by


def predictions_asset(settings: Settings, variant: str) -> dg.AssetsDefinition:
    spec = lookup_variant(variant)
    deps, what = _prediction_inputs(variant)

    @dg.asset(
        name=evaluation_asset(variant, PREDICTIONS),
        group_name=evaluation_group(variant),
        code_version=CODE_VERSIONS["evaluate"],
        partitions_def=policy_partitions(settings, variant),
        deps=deps,
        kinds={spec.compute_kind, "parquet"},
        description=f"{spec.display_name}: Buy/Sell/Hold probabilities and the argmax action of one {what} "
        "(seed, tau) for every test ticker and test day (after split.train_end), each from the causal window "
        "ending that day (rolling protocol: no later bar enters); on the validation days, where the margin "
        "rule's m is chosen; and at the report's tau on the universe (predictions/universe/: the IC and skill "
        "tables). Realized labels ride along for evaluation only. View: predictions.",
    )
    def predictions(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        policy, started = context_policy(context, variant, settings), time.perf_counter()
        result = materialize_predictions(settings, policy)
        if result.missing_tickers:
            context.log.warning(f"test tickers with no test-period window: {', '.join(result.missing_tickers)}")
        extra = {"wall_seconds": round(time.perf_counter() - started, 2)}
        return dg.MaterializeResult(metadata=dagster_metadata(result.metadata() | extra))

    return predictions


def backtests_asset(settings: Settings, variant: str) -> dg.AssetsDefinition:
    spec = lookup_variant(variant)
    name, margin = evaluation_asset(variant, BACKTESTS), evaluation_asset(variant, MARGIN_BACKTESTS)
    predictions = dg.AssetDep(evaluation_asset(variant, PREDICTIONS))  # the same (seed, tau) partition

    @dg.multi_asset(
        name=spec.asset("backtesting"),
        specs=[
            dg.AssetSpec(
                name,
                deps=[predictions],
                group_name=evaluation_group(variant),
                code_version=CODE_VERSIONS["evaluate"],
                kinds={"numba", "parquet", "duckdb"},
                description=f"{spec.display_name}: tax-aware long/cash backtests of the predictions (the "
                "calibrated argmax: the argmax of the calibrated class-weighted probabilities, the predictions' "
                "action; the paper's rule, the argmax of the network's own softmax, is backtested in the pooled "
                "records) at every cost in evaluate.backtest.costs_bps, with Buy & Hold, "
                "metrics and bootstrap Sharpe "
                "intervals; equity curves and trades; and the provenance of every row (adapter, foundation, window "
                "store, served training shards and test shards with hashes, code versions). A forecast's policy "
                "(the volatility task) holds its volatility-targeted backtests here instead: weight min(1, "
                "sigma_target / the forecast daily volatility), sigma_target from its fold's training bars, beside "
                "Buy & Hold. Views: backtests, equity_curves, trades, provenance, targeting_backtests.",
            ),
            dg.AssetSpec(
                margin,
                deps=[predictions],
                group_name=evaluation_group(variant),
                code_version=CODE_VERSIONS["evaluate"],
                kinds={"parquet"},
                description=f"{spec.display_name}: the margin rule's backtests (undo the class weights; Buy / Sell "
                "beyond a margin m chosen on the validation days), at every cost. View: margin_backtests.",
            ),
        ],
        partitions_def=decision_partitions(settings, variant),  # every backtested task's policies
    )
    def backtesting(context: dg.AssetExecutionContext):
        result = materialize_backtests(
            settings, context_policy(context, variant, settings), code_versions(context.run_id)
        )
        yield dg.MaterializeResult(asset_key=name, metadata=dagster_metadata(result.metadata(settings.evaluate)))
        m = result.margin
        yield dg.MaterializeResult(
            asset_key=margin,
            metadata={
                "m": float(m["margin"][0]) if m.height else float("nan"),
                "validation_rows": int(m["validation_rows"][0]) if m.height else 0,
            },
        )

    return backtesting


def build_evaluate_assets(settings: Settings) -> list[dg.AssetsDefinition]:
    return [f(settings, v) for v in settings.evaluated_variants for f in (predictions_asset, backtests_asset)]
