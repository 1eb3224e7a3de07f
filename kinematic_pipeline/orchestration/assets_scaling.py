"""The data-scaling curves (group ``scaling``): test skill and rank IC against the training windows a fine-tuning saw.

One unpartitioned asset, ``scaling_curves``, off the whole-DAG materialize unless ``evaluate.scaling_in_dag``
(``python -m kinematic_pipeline materialize --select scaling_curves`` runs it; the report shows it when it exists).
It reads the foundation of the first fold and seed of SplineGPT and RawGPT-FD, their window stores (and corpus
statistics), their token shards (the test period), the features of their tokens (the LR probes), the labels and the
raw bars. The stage imports training, scikit-learn and matplotlib inside its functions.
"""

import dagster as dg

from kinematic_pipeline.code_versions import CODE_VERSIONS
from kinematic_pipeline.config import Settings
from kinematic_pipeline.orchestration.assets_baselines import baseline_inputs
from kinematic_pipeline.orchestration.assets_models import training_inputs
from kinematic_pipeline.orchestration.metadata import dagster_metadata
from kinematic_pipeline.policy import Foundation
from kinematic_pipeline.stages.scaling import materialize_scaling_curves, probe_of, scaling_variants
from kinematic_pipeline.variants import variant as lookup_variant
from kinematic_pipeline.warehouse import LABELS, RAW_OHLCV

SCALING_GROUP, SCALING_ASSET = "scaling", "scaling_curves"


def scaling_deps(settings: Settings) -> list[dg.AssetDep]:
    """The first fold's first-seed foundation partition of each scaled model, its training inputs, its token shards
    (the test days it predicts), the features of its tokens (when the definitions have that asset), the labels and
    the raw bars of every day (the predictions read their closes)."""
    fold, seed = settings.folds[0], settings.train.seeds[0]
    features = {baseline_inputs(v) for v in settings.evaluate.baselines}  # the features assets the run defines
    every = dg.AllPartitionMapping()
    deps = []
    for variant in scaling_variants(settings):
        key = Foundation(variant, seed, fold).fit_key
        deps.append(
            dg.AssetDep(
                lookup_variant(variant).asset("foundation"),
                partition_mapping=dg.SpecificPartitionsPartitionMapping([key]),
            )
        )
        deps += training_inputs(variant)
        deps.append(dg.AssetDep(lookup_variant(variant).token_asset, partition_mapping=every))
        inputs = baseline_inputs(probe_of(variant))
        deps += [dg.AssetDep(inputs)] if inputs in features else []
    deps += [dg.AssetDep(LABELS, partition_mapping=every), dg.AssetDep(RAW_OHLCV, partition_mapping=every)]
    unique = {}
    for dep in deps:  # a window store two variants share is declared once
        unique.setdefault(dep.asset_key, dep)
    return list(unique.values())


def scaling_curves_asset(settings: Settings) -> dg.AssetsDefinition:
    @dg.asset(
        name=SCALING_ASSET,
        group_name=SCALING_GROUP,
        code_version=CODE_VERSIONS["scaling"],
        deps=scaling_deps(settings),
        kinds={"pytorch", "matplotlib"},
        description="Would more data help? On the first fold and seed at the report's tau: SplineGPT and RawGPT-FD "
        "fine-tuned from their foundations on exactly n distinct training windows for each n of "
        "evaluate.scaling_windows, under one step cap for every n (train.finetune_steps; the largest n once more at "
        "twice it), each to its best validation loss (scratch adapters under $KP_WAREHOUSE/scaling/), their tokens' LR probe on as many rows and on every row; the test period's "
        "rank IC and log-loss skill on the universe (calibrated on validation days). Not in the whole-DAG "
        "materialize unless evaluate.scaling_in_dag: `materialize --select scaling_curves`. "
        "$KP_WAREHOUSE/reports/tables/scaling_curves.parquet, reports/figures/scaling_curves.png.",
    )
    def scaling_curves(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        summary = materialize_scaling_curves(settings, log=context.log.info)
        return dg.MaterializeResult(metadata=dagster_metadata(summary.metadata()))

    return scaling_curves


def build_scaling_assets(settings: Settings) -> list[dg.AssetsDefinition]:
    """The scaling_curves asset when the run trains SplineGPT or RawGPT-FD (none otherwise)."""
    return [scaling_curves_asset(settings)] if scaling_variants(settings) else []


def off_dag_groups(settings: Settings) -> tuple[str, ...]:
    """The groups the whole-DAG materialize leaves out: ``scaling`` unless ``evaluate.scaling_in_dag``."""
    return () if settings.evaluate.scaling_in_dag else (SCALING_GROUP,)


def report_waits_for_scaling(settings: Settings) -> list[dg.AssetDep]:
    """The report's dependency on scaling_curves when the whole DAG runs it (so that its section is there)."""
    return [dg.AssetDep(SCALING_ASSET)] if settings.evaluate.scaling_in_dag and scaling_variants(settings) else []
