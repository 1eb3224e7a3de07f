"""Pretrain and finetune stages: a foundation model per variant and seed, its adapters per (seed, tau).

Each variant's chain is its own: its foundation reads its token asset's window store (and that tokenization's
corpus statistics when it normalizes), its adapters their foundation, the store and the labels. Training is
imported inside the bodies: loading the definitions stays light (no torch, Lightning or PEFT).
"""

import dagster as dg

from kinematic_pipeline.code_versions import CODE_VERSIONS
from kinematic_pipeline.config import Settings
from kinematic_pipeline.orchestration.metadata import class_weights_text, dagster_metadata
from kinematic_pipeline.orchestration.partitions import (
    context_policy,
    fit_partitions,
    foundation_of_policy,
    policy_partitions,
    warm_start_parents,
)
from kinematic_pipeline.variants import variant as lookup_variant
from kinematic_pipeline.warehouse import LABELS
from kinematic_pipeline.warehouse.atomic import digest

# Every training step (a foundation, an adapter) claims a slot of this Dagster concurrency pool: an instance
# limits how many train at once (deploy/: one per GPU), while the grid's other steps run beside them.
TRAINING_POOL = "kinematic_pipeline/training"


def data_version(result) -> dg.DataVersion:
    """A trained model's Dagster data version: the sha256 of its files. A retrained foundation with other bytes
    marks its adapters (and their evaluation) stale in the UI; loading refuses the pair (``model_pins.check_pair``)."""
    return dg.DataVersion(digest([result.files_sha256[k] for k in sorted(result.files_sha256)]))


def training_inputs(variant: str) -> list[dg.AssetDep]:
    """What a variant's training reads besides its own models: its window store, its corpus statistics."""
    spec = lookup_variant(variant)
    deps = [dg.AssetDep(spec.tokenization.window_store_asset)]
    if spec.normalized:
        deps.append(dg.AssetDep(spec.tokenization.corpus_stats_asset))
    return deps


def foundation_asset(settings: Settings, variant: str) -> dg.AssetsDefinition:
    spec = lookup_variant(variant)
    warm_budget = settings.train.warm_start_steps or settings.train.pretrain_steps

    @dg.asset(
        name=spec.asset("foundation"),
        group_name="pretrain",
        code_version=CODE_VERSIONS["models"],
        deps=training_inputs(variant),
        partitions_def=fit_partitions(settings),
        kinds={"pytorch"},
        pool=TRAINING_POOL,
        description=f"{spec.title}: pretrained on uniform samples of the training windows of {spec.token_asset} "
        f"(Lightning; AdamW, warmup then cosine {settings.train.lr:g} -> 0, clip {settings.train.grad_clip:g}) to "
        "its best validation loss within train.pretrain_steps, one per fold and seed (partition). Checkpoint and "
        "curves.csv under $KP_WAREHOUSE/models/<variant>/.../foundation/."
        + (
            " Rolling warm starts (train.warm_start): each fold after the first starts from the previous fold's "
            "partition of this asset (same seed: "
            + ", ".join(f"{k} <- {p}" for k, p in warm_start_parents(settings, variant).items())
            + f") and continues on its own training days for {warm_budget} steps; parent.json pins that parent. "
            "Materialize the partitions in fold order (python -m kinematic_pipeline materialize does)."
            if warm_start_parents(settings, variant)
            else ""
        ),
    )
    def foundation(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        from kinematic_pipeline.training.run import pretrain

        result = pretrain(settings, context_policy(context, variant, settings))
        parent = f", warm-started from {result.parent_foundation}" if result.parent_foundation else ""
        context.log.info(f"{result.policy}: {result.params_total:,} parameters, {result.seconds:.0f} s{parent}")
        return dg.MaterializeResult(
            metadata=dagster_metadata(result.metadata(settings)), data_version=data_version(result)
        )

    return foundation


def adapter_asset(settings: Settings, variant: str) -> dg.AssetsDefinition:
    spec = lookup_variant(variant)

    @dg.asset(
        name=spec.asset("adapter"),
        group_name="finetune",
        code_version=CODE_VERSIONS["models"],
        partitions_def=policy_partitions(settings),
        deps=[
            dg.AssetDep(spec.asset("foundation"), partition_mapping=foundation_of_policy(settings)),
            *training_inputs(variant),
            dg.AssetDep(LABELS, partition_mapping=dg.AllPartitionMapping()),  # those on or before train_end
        ],
        kinds={"pytorch"},
        pool=TRAINING_POOL,
        description=f"{spec.title}: Buy/Sell/Hold head ({spec.head.description}), weighted CE "
        f"{class_weights_text(settings)}, the head started at the prior ln(w * pi); trained to the best de-weighted "
        "validation log loss within train.finetune_steps; one per (fold, seed, tau) (partition).",
    )
    def adapter(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        from kinematic_pipeline.training.run import finetune

        result = finetune(settings, context_policy(context, variant, settings))
        return dg.MaterializeResult(
            metadata=dagster_metadata(result.metadata(settings)), data_version=data_version(result)
        )

    return adapter


def build_model_assets(settings: Settings) -> list[dg.AssetsDefinition]:
    assets = []
    for variant in settings.train.variants:
        assets += [foundation_asset(settings, variant), adapter_asset(settings, variant)]
    return assets
