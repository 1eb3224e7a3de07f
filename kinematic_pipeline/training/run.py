"""What the pretrain and finetune assets call: build, fit with Lightning, save, hash, report.

No dagster here. ``pretrain`` writes the policy's foundation folder (``model.pt``: a plain state_dict and its
backbone's config); ``finetune`` writes the head the variant's head kind saves in its adapter folder (PEFT's
``adapter/`` for the GPT variants, ``head.pt`` for the PatchTST probe: ``models.heads.HEADS``);
``load_classifier`` is the inverse of that saving, for prediction. Lightning checkpoints (for resuming), CSV
logs and ``shards_used.parquet`` (what was served) live in the same folders.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import lightning as L
import polars as pl
import torch
from torch import nn

from kinematic_pipeline.config import Settings
from kinematic_pipeline.model_pins import (
    PARENT_FILE,
    check_pair,
    check_parent,
    parent_foundation,
    pin_foundation,
    pin_parent,
)
from kinematic_pipeline.models import HEADS, build_model, count_parameters
from kinematic_pipeline.pins import StalePairError
from kinematic_pipeline.policy import Foundation, Policy
from kinematic_pipeline.report.markdown import Markdown, embedded_image, markdown_table
from kinematic_pipeline.report.training_figures import curve_table, loss_curves_png
from kinematic_pipeline.training.curves import CURVES_FILE, budget_steps, pretrain_budget, read_curves
from kinematic_pipeline.training.data import WindowDataModule, write_shards_used
from kinematic_pipeline.training.modules import FinetuneModule, PretrainModule
from kinematic_pipeline.training.trainer import (
    BestState,
    build_trainer,
    compile_blocks,
    configure_threads,
    loss_curves,
    quiet_lightning,
    ranks,
)
from kinematic_pipeline.warehouse.atomic import digest, file_sha256, write_bytes_atomic
from kinematic_pipeline.warehouse.layout import LOSS_PLOT_FILE, MODEL_FILE, SHARDS_USED_SCHEMA
from kinematic_pipeline.warehouse.verified import verify_model_folder, write_model_manifest


@dataclass(frozen=True)
class TrainingResult:
    """One training run: a foundation (a ``Foundation``: no task) or an adapter (a ``Policy``)."""

    policy: Policy | Foundation
    out_dir: Path
    files_sha256: dict[str, str]  # saved file (relative to out_dir) -> sha256
    params_total: int
    params_trainable: int
    train_loss_curve: list[tuple[int, float]]  # (global step, loss) as logged
    val_loss_curve: list[tuple[int, float]]  # (global step, validation loss)
    seconds: float
    windows_seen: int
    shards_used: list[dict]  # training/data.py: the store and every day shard, with the windows served
    metrics_csv: Path
    foundation_sha256: str | None = None  # adapters: the foundation they were fine-tuned from
    target_summary: dict = field(default_factory=dict)  # adapters: Task.summary of the training split (Buy/Sell/Hold's)
    budget_steps: int = 0  # the step budget (per rank)
    steps: int = 0  # optimizer steps run (fewer than the budget when validation stopped the run)
    best_step: int = 0  # the step whose state was saved (0: the initial state)
    best_val_loss: float = float("nan")
    curves: list[dict] = field(default_factory=list)  # trainer.CURVE_COLUMNS, one row per validation
    parent_foundation: str | None = None  # a warm-started foundation: its parent's model.pt (relative to the warehouse)
    parent_sha256: str | None = None  # ... and that file's sha256 (model_pins.PARENT_FILE records both)

    @property
    def checkpoint_path(self) -> Path:
        """The foundation's ``model.pt`` or the adapter's head (file or folder)."""
        head = self.policy.variant.head
        return self.out_dir / MODEL_FILE if self.policy.task is None else head.path(self.out_dir)

    @property
    def loss_curves(self) -> dict[str, list[tuple[float, float]]]:
        """One point per validation: the mean training loss since the previous one and the validation loss (for an
        adapter the de-weighted log loss it stopped on, with the weighted loss it trained on beside it)."""
        rows = self.curves
        curves = {
            "train": [(r["step"], r["train_loss"]) for r in rows if r["step"] > 0],
            "validation": [(r["step"], r["val_loss"]) for r in rows],
        }
        if self.policy.task is not None:
            curves["validation (weighted CE)"] = [(r["step"], r["val_weighted_loss"]) for r in rows]
        return curves

    def metadata(self, settings: Settings) -> dict:
        """Its metadata (plain values: ``orchestration.metadata.dagster_metadata`` shows them): its identity,
        parameters, the files it saved with their hashes, what it was served (per split and asset), its loss
        curves."""
        result, policy = self, self.policy
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
        kind = policy.training
        curves = result.loss_curves
        png = (result.out_dir / LOSS_PLOT_FILE).read_bytes()  # written with the model (``_result``)
        values = {
            "seed": policy.seed,
            **({} if policy.task is None else {"task": policy.task.key}),
            "params_total": result.params_total,
            "params_trainable": result.params_trainable,
            "checkpoint_path": result.checkpoint_path,
            "windows_seen": result.windows_seen,
            "wall_seconds": round(result.seconds, 1),
            "token_asset": policy.variant.token_asset,
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
            "schedule": settings.train.schedule,
            "lr_fraction_at_stop": (read_curves(result.out_dir) or [{"lr_fraction": float("nan")}])[-1]["lr_fraction"],
            "curves_path": result.out_dir / "curves.csv",
            "final_train_loss": float(curves["train"][-1][1]) if curves["train"] else float("nan"),
            "final_val_loss": float(curves["validation"][-1][1]) if curves["validation"] else float("nan"),
        }
        if policy.task is None:
            values["checkpoint_sha256"] = result.files_sha256[MODEL_FILE]
            values["model_config"] = json.loads(json.dumps(settings.model.record(policy.variant.backbone)))
            values["warm_started"] = result.parent_foundation is not None
            if result.parent_foundation is not None:
                values["parent_foundation"] = result.parent_foundation
                values["parent_sha256"] = result.parent_sha256
        else:
            values["adapter_files_sha256"] = dict(result.files_sha256)
            values["foundation_checkpoint"] = settings.warehouse.foundation_checkpoint(policy)
            values["foundation_sha256"] = result.foundation_sha256
            values["training_label_distribution"] = dict(result.target_summary)
        return values


def _fit(
    settings: Settings, module_for, out_dir: Path, data: WindowDataModule, budget: int, progress: bool, callbacks=()
):
    """Fit ``module_for(total_steps)`` (the caller seeded and built the model first) on ``data`` for at most
    ``budget`` optimizer steps, to the best validation loss; (data, window counter, metrics CSV, steps, budget)."""
    cfg = settings.train
    out_dir.mkdir(parents=True, exist_ok=True)
    total = budget_steps(cfg, budget)
    module = module_for(total)
    has_val = data.has_validation
    trainer, counter, metrics_csv = build_trainer(cfg, out_dir, total, has_val, progress, cfg.patience, callbacks)
    trainer.fit(module, datamodule=data)
    best = next(c for c in trainer.callbacks if isinstance(c, BestState))
    # the optimizer state at the kept step (a warm start's parent's when it kept that): what a next fold continues
    optimizer_state = best.optimizer_state or getattr(module, "optimizer_state", None)
    return data, counter, metrics_csv, trainer.global_step, total, optimizer_state


def _data(settings: Settings, policy: Policy, num_workers: int) -> WindowDataModule:
    data = WindowDataModule(settings, policy, num_workers=num_workers)
    data.setup()
    return data


def _result(settings, policy, out_dir, files, model, fitted, started, **extra) -> TrainingResult:
    data, counter, csv, steps, budget, _ = fitted
    total, trainable = count_parameters(model)
    train_curve, val_curve = loss_curves(csv)
    curves = read_curves(out_dir)
    # the steps run: the last validation's (every run ends on one: budgets are whole validation intervals, and an
    # early stop follows a validation); a ddp_spawn run's main process never sees the ranks' step counter
    steps = curves[-1]["step"] if curves else steps
    best = next((r for r in curves if r["best"]), None)
    shards_used = data.shards_used(steps=steps, evaluations=len(curves), parts=ranks(settings.train))
    write_shards_used(settings, out_dir, shards_used)
    write_model_manifest(out_dir, files)  # what a load verifies first (verified.verify_model_folder)
    files = [*files, out_dir / CURVES_FILE] if curves else files
    result = TrainingResult(
        policy=policy,
        out_dir=out_dir,
        files_sha256={str(p.relative_to(out_dir)): file_sha256(p) for p in files},
        params_total=total,
        params_trainable=trainable,
        train_loss_curve=train_curve,
        val_loss_curve=val_curve,
        seconds=time.perf_counter() - started,
        windows_seen=counter.windows,
        shards_used=shards_used,
        metrics_csv=csv,
        budget_steps=budget,
        steps=steps,
        best_step=best["step"] if best else steps,
        best_val_loss=best["val_loss"] if best else float("nan"),
        curves=curves,
        **extra,
    )
    kind = policy.training
    loss_curves_png(result.loss_curves, f"{policy.variant.name} {kind}", out_dir / LOSS_PLOT_FILE)
    return result


def _parent_state(settings: Settings, policy: Policy) -> tuple[Path, str, dict, dict | None] | None:
    """(model.pt, sha256, state_dict, AdamW state or None) of the foundation ``policy``'s continues from (its previous
    fold's, with ``train.warm_start``), checked as a load checks it (its bytes, its own parent); None when it trains
    from scratch."""
    parent = parent_foundation(settings, policy)
    if parent is None:
        return None
    path = settings.warehouse.foundation_checkpoint(parent)
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: materialize {parent.variant.name}_foundation partition {parent.fit_key} first (fold "
            f"{policy.fold.name}'s foundation continues from fold {parent.fold.name}'s: train.warm_start, KP_WARM_START=0 turns "
            "it off)"
        )
    saved, sha = _read_checked(settings, parent, path)  # the hash of the bytes loaded: what the child pins
    return path, sha, saved["state_dict"], saved.get("optimizer")


def pretrain(
    settings: Settings, policy: Policy, out_dir: Path | None = None, progress: bool = True, num_workers: int = 0
) -> TrainingResult:
    """Self-supervised pretraining of the policy's backbone on uniform samples of the training windows, into
    its foundation folder (``out_dir`` overrides it). With ``train.warm_start`` a walk-forward fold after the first
    starts from the previous fold's foundation (same variant and seed) and continues on its own training days for
    ``pretrain_budget`` steps; its folder records that parent (``model_pins.PARENT_FILE``)."""
    policy = policy.foundation
    out_dir = Path(out_dir or settings.warehouse.foundation_dir(policy))
    started = time.perf_counter()
    configure_threads(settings.train)
    parent = _parent_state(settings, policy)  # before seeding: loading it draws nothing from this run's streams
    with quiet_lightning(progress):
        L.seed_everything(policy.seed, workers=True, verbose=False)
        model = build_model(policy.variant.name, settings.model)
        if parent is not None:
            model.load_state_dict(parent[2])

        def module_for(total_steps: int) -> PretrainModule:
            continued = None if parent is None else parent[3]  # the parent's AdamW state (train.warm_start_rate)
            return PretrainModule(model, settings.train, total_steps, policy.seed, continued)

        data = _data(settings, policy, num_workers)
        budget = pretrain_budget(settings, policy)
        compile_blocks(model, settings.train, budget, settings.warehouse.root)  # train.compile: long runs only
        fitted = _fit(settings, module_for, out_dir, data, budget, progress)
    path = out_dir / MODEL_FILE
    pin_parent(settings.warehouse, out_dir, None, None)  # the old record goes before the new weights come
    optimizer = fitted[5] if settings.train.warm_start_rate is not None else None  # what the next fold continues
    save_foundation(settings, policy, {k: v.detach().cpu() for k, v in model.state_dict().items()}, path, optimizer)
    extra = {}
    if parent is not None:
        pin_parent(settings.warehouse, out_dir, parent[0], parent[1])  # loads check it (model_pins.check_parent)
        extra = {
            "parent_foundation": json.loads((out_dir / PARENT_FILE).read_text())["parent"],
            "parent_sha256": parent[1],
        }
    return _result(settings, policy, out_dir, [path], model, fitted, started, **extra)


def save_foundation(
    settings: Settings, policy: Foundation, state: dict[str, torch.Tensor], path: Path, optimizer: dict | None = None
) -> None:
    """``model.pt``: the variant, the config of its backbone alone (what ``load_foundation`` checks; another
    backbone's sizes are not its concern), the weights and, given, the AdamW state at the kept step (``optimizer``:
    what the next fold's warm start continues)."""
    config = settings.model.record(policy.variant.backbone)
    buffer = io.BytesIO()  # saved in memory, written whole: a rename over ``path``, never through a link
    saved = {"variant": policy.variant.name, "model_config": config, "state_dict": state}
    torch.save(saved if optimizer is None else {**saved, "optimizer": optimizer}, buffer)
    write_bytes_atomic(path, buffer.getvalue(), settings.warehouse.durable)


def read_foundation(settings: Settings, policy: Policy, path: Path | None = None) -> tuple[nn.Module, str]:
    """The pretrained backbone of ``policy`` (``model.pt``) and the sha256 of the very bytes it was built from: the
    file is read once into memory, those bytes checked against the folder's record and loaded, so that whatever
    pins the hash pins what was used, even if another run replaces the file meanwhile. The config of its backbone
    must be the settings' one (another backbone's config is not its concern)."""
    saved, sha = _read_checked(settings, policy, path)
    model = build_model(policy.variant.name, settings.model)
    model.load_state_dict(saved["state_dict"])
    return model, sha


def _read_checked(settings: Settings, policy: Policy, path: Path | None = None) -> tuple[dict, str]:
    """What ``model.pt`` holds (``save_foundation``'s dict) and the sha256 of the bytes read, checked as
    ``read_foundation`` says."""
    path = Path(path or settings.warehouse.foundation_checkpoint(policy))
    fix = f"re-materialize {policy.variant.name}_foundation partition {policy.fit_key}"
    recorded = verify_model_folder(path.parent, fix)  # the bytes its files.json records, or one line naming the file
    check_parent(settings, policy, path.parent)  # warm-started: from the parent on disk now (model_pins.PARENT_FILE)
    data = path.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    if sha != recorded.get(path.name):  # replaced since its folder was verified
        raise StalePairError(f"{path} changed while it was loaded: retry")
    saved = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    if saved["variant"] != policy.variant.name:
        raise ValueError(f"{path} holds a {saved['variant']} backbone, not {policy.variant.name}")
    differences = settings.model.differences(policy.variant.backbone, saved["model_config"])
    if differences:
        raise ValueError(f"{path} was trained with {', '.join(differences)}: {fix}")
    return saved, sha


def load_foundation(settings: Settings, policy: Policy, path: Path | None = None) -> nn.Module:
    """The pretrained backbone of ``policy`` (``read_foundation``, without its hash)."""
    return read_foundation(settings, policy, path)[0]


def build_classifier(settings: Settings, policy: Policy, backbone: nn.Module, summary: dict | None = None) -> nn.Module:
    """The variant's head kind on ``backbone``: LoRA + a head as wide as the task's, or PatchTST's linear probe; with
    ``summary`` (``Task.summary`` of the training split) the head starts at its task's prior (``Task.prior``)."""
    prior = None if summary is None else policy.task.prior(summary)
    return HEADS[policy.variant.head.kind].build(backbone, settings.train, policy.task.head_width, prior)


def finetune(
    settings: Settings,
    policy: Policy,
    out_dir: Path | None = None,
    foundation: Path | None = None,
    progress: bool = True,
    num_workers: int = 0,
    callbacks=(),
) -> TrainingResult:
    """Fine-tuning of ``policy`` on its task from its foundation, into its adapter folder (``callbacks``:
    Lightning callbacks run beside the run's own, e.g. a benchmark's snapshot of every validated state)."""
    out_dir = Path(out_dir or settings.warehouse.adapter_dir(policy))
    foundation = Path(foundation or settings.warehouse.foundation_checkpoint(policy))
    head = HEADS[policy.variant.head.kind]
    started = time.perf_counter()
    configure_threads(settings.train)
    with quiet_lightning(progress):
        L.seed_everything(policy.seed, workers=True, verbose=False)
        data = _data(settings, policy, num_workers)
        summary = data.target_summary()
        backbone, loaded = read_foundation(settings, policy, foundation)  # the sha256 of the bytes trained from
        classifier = build_classifier(settings, policy, backbone, summary)

        def module_for(total_steps: int) -> FinetuneModule:
            return FinetuneModule(classifier, policy.task, settings.train, total_steps)

        budget = settings.train.steps_for(policy.variant.name, "finetune")
        fitted = _fit(settings, module_for, out_dir, data, budget, progress, callbacks)
        if file_sha256(foundation) != loaded:  # another run retrained it meanwhile: nothing saved, the old pair kept
            raise StalePairError(
                f"{foundation} changed while {policy.variant.name}_adapter partition {policy.key} was fine-tuned "
                "from it: retry"
            )
        classifier.eval()
        files = head.save(classifier, out_dir, policy.variant.name, policy.task.key)
    extra = {"foundation_sha256": loaded, "target_summary": summary}
    # the task's record (Buy/Sell/Hold's class weights: what its probabilities mean) beside the foundation's hash
    pin_foundation(settings.warehouse, out_dir, foundation, loaded, policy.task.record)  # loads check it
    return _result(settings, policy, out_dir, files, classifier, fitted, started, **extra)


def load_classifier(settings: Settings, policy: Policy) -> nn.Module:
    """The fine-tuned classifier of ``policy`` in eval mode: its foundation's weights + its saved head, once the
    adapter's record of its foundation (``foundation.json``) is checked against the foundation on disk."""
    foundation, adapter = settings.warehouse.policy_files(policy)
    # a damaged foundation is named as such before the pair check would call it retrained
    verify_model_folder(
        foundation.parent, f"re-materialize {policy.variant.name}_foundation partition {policy.fit_key}"
    )
    check_pair(settings.warehouse, policy)  # the adapter was fine-tuned from this very foundation
    fix = f"re-materialize {policy.variant.name}_adapter partition {policy.key}"
    verify_model_folder(adapter, fix)
    head = HEADS[policy.variant.head.kind]
    head.check(adapter, settings.train, fix)  # its own record of its settings: finite, and the settings' values
    return head.load(load_foundation(settings, policy, foundation), adapter, policy.task.head_width).eval()
