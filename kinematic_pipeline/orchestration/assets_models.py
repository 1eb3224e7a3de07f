"""Pretrain and finetune stages: a foundation model per variant, and its adapters partitioned by tau."""

import hashlib
import json

import dagster as dg
import polars as pl

from kinematic_pipeline.config import VARIANT_TOKEN_ASSET, Settings
from kinematic_pipeline.orchestration.metadata import curve_table, embedded_image, loss_curve_png, markdown_table
from kinematic_pipeline.orchestration.resources import PipelineSettings
from kinematic_pipeline.storage import adapter_dir, foundation_checkpoint, model_dir

MODELS_CODE_VERSION = "models-1"
VARIANT_TITLES = {
    "splinegpt": "SplineGPT (continuous spline tokens)",
    "rawgpt_fd": "RawGPT-FD (finite-difference tokens, same backbone)",
    "rawgpt": "RawGPT (raw values and first differences, same backbone)",
    "patchtst": "PatchTST (channel-independent patches, RevIN, masked-patch pretraining)",
}


def tau_key(tau: float) -> str:
    return f"{tau:g}"


def models_dir(settings: Settings, variant: str):
    return model_dir(settings.warehouse, variant)


def _shards_summary(shards: list[dict]) -> dict:
    """Lineage of a training run: how many shards per split and asset, their dates, one digest of all hashes."""
    frame = pl.DataFrame(
        shards, schema={"asset": pl.String, "split": pl.String, "date": pl.String, "content_hash": pl.String}
    )
    per_split = (
        frame.group_by("asset", "split")
        .agg(pl.len().alias("shards"), pl.col("date").min().alias("first"), pl.col("date").max().alias("last"))
        .sort("asset", "split")
    )
    return {
        "training_shards": dg.MetadataValue.md(markdown_table(per_split)),
        "training_shards_digest": hashlib.sha256("".join(frame["content_hash"].fill_null("")).encode()).hexdigest(),
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


def build_model_assets(settings: Settings) -> list[dg.AssetsDefinition]:
    tau_partitions = dg.StaticPartitionsDefinition([tau_key(t) for t in settings.tokenize.taus])
    assets = []
    for variant in settings.train.variants:
        assets.append(_foundation_asset(variant))
        assets.append(_adapter_asset(variant, tau_partitions))
    return assets


def _foundation_asset(variant: str) -> dg.AssetsDefinition:
    token_asset = VARIANT_TOKEN_ASSET[variant]

    @dg.asset(
        name=f"{variant}_foundation",
        group_name="pretrain",
        code_version=MODELS_CODE_VERSION,
        deps=[dg.AssetDep(token_asset), dg.AssetDep("corpus_stats")],
        kinds={"pytorch"},
        description=f"{VARIANT_TITLES[variant]}: pretrained on {token_asset} of the training period "
        "(Lightning; AdamW, cosine 6e-4 -> 0, clip 1.0). Checkpoint under $KP_WAREHOUSE/models/.",
    )
    def foundation(context: dg.AssetExecutionContext, settings: PipelineSettings) -> dg.MaterializeResult:
        from kinematic_pipeline.training.run import pretrain

        cfg = settings.resolve()
        out_dir = models_dir(cfg, variant) / "foundation"
        result = pretrain(cfg, variant, out_dir)
        context.log.info(f"{variant}: {result.params_total:,} parameters, {result.seconds:.0f} s")
        return dg.MaterializeResult(
            metadata={
                "params_total": result.params_total,
                "params_trainable": result.params_trainable,
                "checkpoint_path": dg.MetadataValue.path(str(result.checkpoint_path)),
                "checkpoint_sha256": result.checkpoint_sha256,
                "windows_seen": result.windows_seen,
                "wall_seconds": round(result.seconds, 1),
                "token_asset": token_asset,
                **_shards_summary(result.shards_used),
                **_curves_metadata(result, f"{variant} pretraining", out_dir / "loss.png"),
                "model_config": dg.MetadataValue.json(json.loads(json.dumps(cfg.model.__dict__))),
            }
        )

    return foundation


def _adapter_asset(variant: str, tau_partitions: dg.StaticPartitionsDefinition) -> dg.AssetsDefinition:
    how = "linear probe on the frozen backbone" if variant == "patchtst" else "PEFT LoRA on layers 1, 2 and 4"

    @dg.asset(
        name=f"{variant}_adapter",
        group_name="finetune",
        code_version=MODELS_CODE_VERSION,
        partitions_def=tau_partitions,
        # every label day may feed the adapter (the DataModule keeps those on or before train_end)
        deps=[dg.AssetDep(f"{variant}_foundation"), dg.AssetDep("labels", partition_mapping=dg.AllPartitionMapping())],
        kinds={"pytorch"},
        description=f"{VARIANT_TITLES[variant]}: Buy/Sell/Hold head ({how}), weighted CE [2, 10, 1]; "
        "one per tau (partition).",
    )
    def adapter(context: dg.AssetExecutionContext, settings: PipelineSettings) -> dg.MaterializeResult:
        from kinematic_pipeline.training.run import finetune

        cfg = settings.resolve()
        tau = float(context.partition_key)
        foundation = foundation_checkpoint(cfg.warehouse, variant)
        if not foundation.exists():
            raise FileNotFoundError(f"{foundation} is missing: materialize {variant}_foundation first")
        out_dir = adapter_dir(cfg.warehouse, variant, context.partition_key)
        result = finetune(cfg, variant, tau, foundation, out_dir)
        return dg.MaterializeResult(
            metadata={
                "tau": tau,
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


def model_summary(settings: Settings) -> pl.DataFrame:
    """Which checkpoints and adapters exist in the warehouse (for the CLI summary)."""
    rows = []
    for variant in settings.train.variants:
        root = models_dir(settings, variant)
        rows.append(
            {
                "variant": variant,
                "foundation": (root / "foundation" / "model.pt").exists(),
                "adapters": len(list((root / "adapters").glob("tau=*"))) if (root / "adapters").exists() else 0,
            }
        )
    return pl.DataFrame(rows)
