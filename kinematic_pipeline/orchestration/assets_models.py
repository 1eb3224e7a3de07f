"""Pretrain and finetune stages: a foundation model per variant, and its adapters partitioned by tau.

Training is imported inside the bodies: loading the definitions stays light (no torch, Lightning or PEFT).
"""

import json

import dagster as dg
import polars as pl

from kinematic_pipeline.config import Settings
from kinematic_pipeline.orchestration.metadata import curve_table, embedded_image, loss_curve_png, markdown_table
from kinematic_pipeline.storage import CORPUS_STATS, LABELS, SHARDS_USED_SCHEMA, Warehouse, digest, tau_key
from kinematic_pipeline.variants import variant as lookup_variant
from kinematic_pipeline.window_store import window_store_asset

MODELS_CODE_VERSION = "models-1"


def tau_partitions(settings: Settings) -> dg.StaticPartitionsDefinition:
    """One partition per label threshold: keys ``0.0025``, ``0.005``, ``0.01``, ``0.02``."""
    return dg.StaticPartitionsDefinition([tau_key(t) for t in settings.tokenize.taus])


def seed_partitions(settings: Settings) -> dg.StaticPartitionsDefinition:
    """One partition per training seed (``train.seeds``): each seed's model is materialized on its own."""
    return dg.StaticPartitionsDefinition([str(s) for s in settings.train.seeds])


def adapter_partitions(settings: Settings) -> dg.MultiPartitionsDefinition:
    """One adapter per (tau, seed): keys like ``0.01|1234``."""
    return dg.MultiPartitionsDefinition({"tau": tau_partitions(settings), "seed": seed_partitions(settings)})


def _shards_summary(shards: list[dict]) -> dict:
    """Lineage of a training run: how many shards per split and asset, their dates, one digest of all hashes."""
    frame = pl.DataFrame(shards, schema=SHARDS_USED_SCHEMA)
    per_split = (
        frame.group_by("asset", "split")
        .agg(
            pl.len().alias("shards"),
            (pl.col("served") > 0).sum().alias("served from"),
            pl.col("served").sum().alias("windows served"),
            pl.col("date").min().alias("first"),
            pl.col("date").max().alias("last"),
        )
        .sort("asset", "split")
    )
    return {
        "training_shards": dg.MetadataValue.md(markdown_table(per_split)),
        "windows_served": int(frame.filter(pl.col("split") == "store")["served"].sum()),
        "training_shards_digest": digest(frame["content_hash"].fill_null("").to_list()),
    }


def _curves_metadata(result, title: str, png_path) -> dict:
    curves = {"train": list(result.train_loss_curve), "validation": list(result.val_loss_curve)}
    png = loss_curve_png(curves, title, png_path)
    return {
        "loss_curves": dg.MetadataValue.md(embedded_image(png, title) + "\n\n" + markdown_table(curve_table(curves))),
        "loss_plot_path": dg.MetadataValue.path(str(png_path)),
        "final_train_loss": float(curves["train"][-1][1]) if curves["train"] else float("nan"),
        "final_val_loss": float(curves["validation"][-1][1]) if curves["validation"] else float("nan"),
    }


def foundation_asset(settings: Settings, variant: str) -> dg.AssetsDefinition:
    spec = lookup_variant(variant)

    @dg.asset(
        name=f"{variant}_foundation",
        group_name="pretrain",
        code_version=MODELS_CODE_VERSION,
        # every seed's foundation samples the training period's windows from its token asset's store
        deps=[dg.AssetDep(window_store_asset(spec.token_asset)), dg.AssetDep(CORPUS_STATS)],
        partitions_def=seed_partitions(settings),
        kinds={"pytorch"},
        description=f"{spec.title}: pretrained on {spec.token_asset} of the training period "
        "(Lightning; AdamW, cosine 6e-4 -> 0, clip 1.0), one per seed (partition). Checkpoint under "
        "$KP_WAREHOUSE/models/<variant>/seed=<seed>/.",
    )
    def foundation(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        from kinematic_pipeline.training.run import pretrain

        seed = int(context.partition_key)
        out_dir = Warehouse(settings.warehouse).foundation_dir(variant, seed)
        result = pretrain(settings.for_seed(seed), variant, out_dir)
        context.log.info(f"{variant} seed {seed}: {result.params_total:,} parameters, {result.seconds:.0f} s")
        return dg.MaterializeResult(
            metadata={
                "seed": seed,
                "params_total": result.params_total,
                "params_trainable": result.params_trainable,
                "checkpoint_path": dg.MetadataValue.path(str(result.checkpoint_path)),
                "checkpoint_sha256": result.checkpoint_sha256,
                "windows_seen": result.windows_seen,
                "wall_seconds": round(result.seconds, 1),
                "token_asset": spec.token_asset,
                **_shards_summary(result.shards_used),
                **_curves_metadata(result, f"{variant} pretraining", out_dir / "loss.png"),
                "model_config": dg.MetadataValue.json(json.loads(json.dumps(settings.model.__dict__))),
            }
        )

    return foundation


def adapter_asset(settings: Settings, variant: str) -> dg.AssetsDefinition:
    spec = lookup_variant(variant)

    @dg.asset(
        name=f"{variant}_adapter",
        group_name="finetune",
        code_version=MODELS_CODE_VERSION,
        partitions_def=adapter_partitions(settings),
        # windows from the store; every label day on or before train_end may feed the adapter
        deps=[
            dg.AssetDep(window_store_asset(spec.token_asset)),
            dg.AssetDep(
                f"{variant}_foundation",
                partition_mapping=dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name="seed"),
            ),
            dg.AssetDep(LABELS, partition_mapping=dg.AllPartitionMapping()),
        ],
        kinds={"pytorch"},
        description=f"{spec.title}: Buy/Sell/Hold head ({spec.head_description}), weighted CE [2, 10, 1]; "
        "one per (tau, seed) (partition).",
    )
    def adapter(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        from kinematic_pipeline.training.run import finetune

        key = context.partition_key.keys_by_dimension  # a MultiPartitionKey
        wh, tau, seed = Warehouse(settings.warehouse), float(key["tau"]), int(key["seed"])
        foundation = wh.foundation_checkpoint(variant, seed)
        if not foundation.exists():
            raise FileNotFoundError(f"{foundation} is missing: materialize {variant}_foundation partition {seed}")
        out_dir = wh.adapter_dir(variant, key["tau"], seed)
        result = finetune(settings.for_seed(seed), variant, tau, foundation, out_dir)
        return dg.MaterializeResult(
            metadata={
                "tau": tau,
                "seed": seed,
                "params_total": result.params_total,
                "params_trainable": result.params_trainable,
                "adapter_path": dg.MetadataValue.path(str(result.adapter_path)),
                "adapter_files_sha256": dg.MetadataValue.json(dict(result.artifact_sha256)),
                "foundation_checkpoint": dg.MetadataValue.path(str(foundation)),
                "foundation_sha256": result.foundation_sha256,
                "training_label_distribution": dg.MetadataValue.json(dict(result.class_counts)),
                "windows_seen": result.windows_seen,
                "wall_seconds": round(result.seconds, 1),
                **_shards_summary(result.shards_used),
                **_curves_metadata(result, f"{variant} fine-tuning, tau={tau:g}", out_dir / "loss.png"),
            }
        )

    return adapter


def build_model_assets(settings: Settings) -> list[dg.AssetsDefinition]:
    assets = []
    for variant in settings.train.variants:
        assets += [foundation_asset(settings, variant), adapter_asset(settings, variant)]
    return assets
