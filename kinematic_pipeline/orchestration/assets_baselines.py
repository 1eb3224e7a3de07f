"""Baselines beside the models: each tokenization's decision-time features, and one fitted probe per (0, tau).

``<tokenization>_features`` (group ``corpus``) reads the tokenization's window store (training period), its
test-period token shards (the whole universe), raw_ohlcv and the labels; ``<probe>_probe`` (group
``baselines``) fits a probe on it at each tau. Their predictions and backtests are the evaluation assets of
``assets_evaluate`` (``<variant>_predictions``, ``<variant>_backtesting``), in the same group. The stage
modules import scikit-learn and LightGBM inside their functions: loading the definitions stays light.
"""

import dagster as dg

from kinematic_pipeline.code_versions import CODE_VERSIONS
from kinematic_pipeline.config import Settings
from kinematic_pipeline.orchestration.metadata import class_weights_text, dagster_metadata
from kinematic_pipeline.orchestration.partitions import context_policy, policy_partitions
from kinematic_pipeline.stages.baselines import materialize_probe
from kinematic_pipeline.stages.features import materialize_features
from kinematic_pipeline.stages.probe_learners import LEARNERS
from kinematic_pipeline.tokenizations import Tokenization, chosen
from kinematic_pipeline.variants import probes
from kinematic_pipeline.variants import variant as lookup_variant
from kinematic_pipeline.warehouse import LABELS, RAW_OHLCV

BASELINES_GROUP = "baselines"


def baseline_inputs(variant: str) -> str:
    """The features asset a probe or rule reads."""
    return lookup_variant(variant).features_asset


def features_asset(settings: Settings, tok: Tokenization) -> dg.AssetsDefinition:
    every_day = dg.AllPartitionMapping()

    @dg.asset(
        name=tok.features_asset,
        group_name="corpus",
        code_version=CODE_VERSIONS["features"],
        deps=[
            dg.AssetDep(tok.window_store_asset),
            dg.AssetDep(tok.tokens_asset, partition_mapping=every_day),
            dg.AssetDep(RAW_OHLCV, partition_mapping=every_day),
            dg.AssetDep(LABELS, partition_mapping=every_day),
        ],
        kinds={"numpy", "parquet"},
        description=f"Decision-time features of every {tok.tokens_asset} window (the last five tokens, anchored, and "
        "each channel's window std; the raw tokens' also the last return, 20-day volatility and 20-day return): "
        "the training period from the window store (train / validation days), the test period for the whole "
        "universe; with the close and every label. What the probes and rules read. "
        f"$KP_WAREHOUSE/features/{tok.name}/ (training.parquet, test.parquet, inputs.parquet).",
    )
    def features(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        summary = materialize_features(settings, tok)
        context.log.info(f"{summary.path}: {summary.rows} rows in {summary.seconds:.0f} s")
        return dg.MaterializeResult(metadata=dagster_metadata(summary.metadata()))

    return features


def probe_asset(settings: Settings, variant: str) -> dg.AssetsDefinition:
    spec = lookup_variant(variant)

    @dg.asset(
        name=spec.asset("probe"),
        group_name=BASELINES_GROUP,
        code_version=CODE_VERSIONS["probes"],
        partitions_def=policy_partitions(settings, variant),
        deps=[dg.AssetDep(baseline_inputs(variant))],
        kinds={LEARNERS[spec.learner].dagster_kind},
        description=f"{spec.title}; z-scored with the training rows' statistics, class weights "
        + class_weights_text(settings)
        + LEARNERS[spec.learner].described
        + ". One per tau (seed 0). Saved as data, never a pickle: "
        "model.json (classes, coefficients, intercepts) or model.txt (LightGBM's text model), and fit.json with the "
        "model file's sha256, checked on every read. $KP_WAREHOUSE/models/<variant>/seed=0/probe/tau=<tau>/.",
    )
    def probe(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        fit = materialize_probe(settings, context_policy(context, variant, settings))
        return dg.MaterializeResult(metadata=dagster_metadata(fit.metadata()))

    return probe


def baseline_features_assets(settings: Settings) -> list[dg.AssetsDefinition]:
    """The features assets the configured baselines read (none without baselines)."""
    needed = {baseline_inputs(v) for v in settings.evaluate.baselines}
    return [features_asset(settings, t) for t in chosen(settings.tokenize.tokenizations) if t.features_asset in needed]


def build_baseline_assets(settings: Settings) -> list[dg.AssetsDefinition]:
    fitted = [probe_asset(settings, v) for v in probes(settings.evaluate.baselines)]
    return [*baseline_features_assets(settings), *fitted]


__all__ = ["BASELINES_GROUP", "baseline_inputs", "build_baseline_assets"]
