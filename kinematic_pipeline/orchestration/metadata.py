"""Small helpers that turn stage summaries and frames into Dagster metadata."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import polars as pl

from kinematic_pipeline.atomic_files import digest
from kinematic_pipeline.layout import LOSS_PLOT_FILE, MODEL_FILE, SHARDS_USED_SCHEMA
from kinematic_pipeline.report.markdown import Markdown
from kinematic_pipeline.report.markdown import embedded_image as embedded_image
from kinematic_pipeline.report.markdown import markdown_table as markdown_table


def dagster_metadata(values: dict) -> dict:
    """A stage summary's plain metadata as Dagster's: Markdown renders, paths link, dicts and lists show
    as JSON; numbers, strings and booleans as they are."""

    def convert(value):
        if isinstance(value, Markdown):
            return dg.MetadataValue.md(str(value))
        if isinstance(value, Path):
            return dg.MetadataValue.path(str(value))
        if isinstance(value, (dict, list)):
            return dg.MetadataValue.json(value)
        return value

    return {key: convert(value) for key, value in values.items()}


def loss_curve_png(curves: dict[str, list[tuple[float, float]]], title: str, path: Path) -> bytes:
    """Plot named (x, loss) curves to ``path`` (PNG) and return its bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3), dpi=100)
    for name, points in curves.items():
        if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, marker="o" if len(points) < 20 else None, label=name)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)
    return path.read_bytes()


def curve_table(curves: dict[str, list[tuple[float, float]]], max_rows: int = 12) -> pl.DataFrame:
    """Long format (curve, x, loss), thinned to at most ``max_rows`` points per curve, for Markdown."""
    rows = []
    for name, points in curves.items():
        stride = max(1, -(-len(points) // max_rows))
        kept = points[::stride] + ([points[-1]] if points and (len(points) - 1) % stride else [])
        rows.extend({"curve": name, "x": float(x), "loss": float(y)} for x, y in kept)
    return pl.DataFrame(rows, schema={"curve": pl.String, "x": pl.Float64, "loss": pl.Float64})


def training_metadata(result, settings) -> dict:
    """A foundation's or adapter's metadata (``training.run.TrainingResult``): its identity, parameters, the
    files it saved with their hashes, what it was served (per split and asset), its loss curves."""

    policy = result.policy
    used = pl.DataFrame(result.shards_used, schema=SHARDS_USED_SCHEMA)
    per_split = (
        used.group_by("asset", "split")
        .agg(
            pl.len().alias("shards"),
            (pl.col("served") > 0).sum().alias("served from"),
            pl.col("served").sum().alias("windows served"),
            pl.col("date").min().alias("first"),
            pl.col("date").max().alias("last"),
        )
        .sort("asset", "split")
    )
    kind = "pretraining" if policy.tau is None else f"fine-tuning, tau={policy.tau_key}"
    # one point per validation: the mean training loss since the previous one and the validation loss (for an
    # adapter the de-weighted log loss it stopped on, with the weighted loss it trained on beside it)
    rows = result.curves
    curves = {
        "train": [(r["step"], r["train_loss"]) for r in rows if r["step"] > 0],
        "validation": [(r["step"], r["val_loss"]) for r in rows],
    }
    if policy.tau is not None:
        curves["validation (weighted CE)"] = [(r["step"], r["val_weighted_loss"]) for r in rows]
    png = loss_curve_png(curves, f"{policy.variant} {kind}", result.out_dir / LOSS_PLOT_FILE)
    values = {
        "seed": policy.seed,
        **({} if policy.tau is None else {"tau": policy.tau}),
        "params_total": result.params_total,
        "params_trainable": result.params_trainable,
        "checkpoint_path": result.checkpoint_path,
        "windows_seen": result.windows_seen,
        "wall_seconds": round(result.seconds, 1),
        "token_asset": policy.spec.token_asset,
        "training_shards": Markdown(markdown_table(per_split)),
        "windows_served": int(used.filter(pl.col("split") == "store")["served"].sum()),
        "training_shards_digest": digest(used["content_hash"].fill_null("").to_list()),
        "loss_curves": Markdown(embedded_image(png, kind) + "\n\n" + markdown_table(curve_table(curves))),
        "loss_plot_path": result.out_dir / LOSS_PLOT_FILE,
        "budget_steps": result.budget_steps,
        "steps": result.steps,
        "best_step": result.best_step,
        "best_val_loss": result.best_val_loss,
        "stopped_early": result.steps < result.budget_steps,
        "curves_path": result.out_dir / "curves.csv",
        "final_train_loss": float(curves["train"][-1][1]) if curves["train"] else float("nan"),
        "final_val_loss": float(curves["validation"][-1][1]) if curves["validation"] else float("nan"),
    }
    if policy.tau is None:
        values["checkpoint_sha256"] = result.files_sha256[MODEL_FILE]
        values["model_config"] = json.loads(json.dumps(settings.model.__dict__))
    else:
        values["adapter_files_sha256"] = dict(result.files_sha256)
        values["foundation_checkpoint"] = settings.warehouse.foundation_checkpoint(policy)
        values["foundation_sha256"] = result.foundation_sha256
        values["training_label_distribution"] = dict(result.class_counts)
    return dagster_metadata(values)
