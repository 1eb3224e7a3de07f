"""What the pretrain and finetune assets call: build, fit with Lightning, save, hash, report.

No dagster here. ``pretrain`` writes ``out_dir/model.pt`` (a plain state_dict and the ModelConfig);
``finetune`` writes PEFT's own ``out_dir/adapter`` (GPT variants: LoRA + cls_head) or the PatchTST
probe ``out_dir/head.pt``; ``load_classifier`` is the inverse of that saving, for prediction.
Lightning checkpoints (for resuming) and CSV logs live under ``out_dir`` too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import peft
import polars as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from torch import nn

from kinematic_pipeline.config import ModelConfig, Settings, TrainConfig
from kinematic_pipeline.models import (
    PatchTSTClassifier,
    SequenceClassifier,
    build_model,
    count_parameters,
    inject_lora,
)
from kinematic_pipeline.storage import file_sha256, write_shards_used
from kinematic_pipeline.training.data import EpochSeed, WindowDataModule
from kinematic_pipeline.training.modules import FinetuneModule, PretrainModule
from kinematic_pipeline.variants import variant as lookup_variant

# Expected here, not problems: streaming needs no workers on 2 cores; tiny profiles log rarely;
# re-materializing an asset reuses its folder.
_EXPECTED_WARNINGS = (
    r".*does not have many workers.*",
    r".*number of training batches .* is smaller than the logging interval.*",
    r".*Checkpoint directory .* exists and is not empty.*",
    r".*Experiment logs directory .* exists and is not empty.*",
    r".*Total length of .* across ranks is zero.*",
    r".*could not find a config file in.*",  # PEFT: the base model is ours, not a Hub model
    r".*module\(s\) in eval mode at the start of training.*",  # the PatchTST probe's frozen encoder
    r".*isinstance\(treespec, LeafSpec\)` is deprecated.*",  # inside Lightning, with torch 2.13
)


@dataclass(frozen=True)
class PretrainResult:
    variant: str
    checkpoint_path: Path  # out_dir/model.pt: {"variant", "model_config", "state_dict"}
    checkpoint_sha256: str
    params_total: int
    params_trainable: int
    train_loss_curve: list[tuple[int, float]]  # (global step, loss); per epoch when too few steps were logged
    val_loss_curve: list[tuple[int, float]]  # (epoch, loss)
    seconds: float
    windows_seen: int
    shards_used: list[dict]
    metrics_csv: Path


@dataclass(frozen=True)
class FinetuneResult:
    variant: str
    tau: float
    adapter_path: Path  # GPT: out_dir/adapter (PEFT); PatchTST: out_dir/head.pt
    artifact_sha256: dict[str, str]  # file name -> sha256 of each saved file
    foundation_sha256: str
    params_total: int
    params_trainable: int
    train_loss_curve: list[tuple[int, float]]
    val_loss_curve: list[tuple[int, float]]
    class_counts: dict[str, int]  # Buy/Sell/Hold over the training split
    seconds: float
    windows_seen: int
    shards_used: list[dict]
    metrics_csv: Path


class _WindowCounter(L.Callback):
    def __init__(self) -> None:
        self.windows = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.windows += len(batch[1] if isinstance(batch, (tuple, list)) else batch)


def configure_threads() -> None:
    """One intra-op thread per core we may use (never more: 2 cores are easy to oversubscribe)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    torch.set_num_threads(max(1, cores))


@contextlib.contextmanager
def quiet_lightning(progress: bool):
    loggers = [logging.getLogger(n) for n in ("lightning.pytorch", "lightning.fabric")]
    levels = [lg.level for lg in loggers]
    deterministic = torch.are_deterministic_algorithms_enabled()
    with warnings.catch_warnings():
        for pattern in _EXPECTED_WARNINGS:
            warnings.filterwarnings("ignore", message=pattern)
        if not progress:
            for lg in loggers:
                lg.setLevel(logging.WARNING)
        try:
            yield
        finally:
            for lg, level in zip(loggers, levels):
                lg.setLevel(level)
            torch.use_deterministic_algorithms(deterministic)  # the Trainer sets it process-wide


def _trainer(cfg: TrainConfig, out_dir: Path, epochs: int, steps_per_epoch: int, has_val: bool, progress: bool):
    for sub in ("checkpoints", "logs"):  # a re-run starts clean: no stale checkpoints or curves
        shutil.rmtree(out_dir / sub, ignore_errors=True)
    loggers = [CSVLogger(out_dir, name="logs", version=0)]
    with contextlib.suppress(ImportError):
        import tensorboard  # noqa: F401
        from lightning.pytorch.loggers import TensorBoardLogger

        loggers.append(TensorBoardLogger(out_dir, name="logs", version=0, sub_dir="tensorboard"))
    checkpoint = ModelCheckpoint(
        dirpath=out_dir / "checkpoints",
        filename="epoch{epoch:02d}",
        monitor="val/loss" if has_val else None,
        save_last=True,
        auto_insert_metric_name=False,
    )
    on_gpu = cfg.accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    if on_gpu:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    counter = _WindowCounter()
    strategy = cfg.strategy
    if strategy == "auto" and _ranks(cfg) > 1:
        # Ranks spawned in-process: the default launcher re-runs sys.argv (Dagster's). CPU ranks
        # (KP_TRAIN_ACCELERATOR=cpu KP_TRAIN_DEVICES=2) take the same path with gloo: tested without a GPU.
        strategy = "ddp_spawn"
    trainer = L.Trainer(
        accelerator=cfg.accelerator,
        devices=cfg.devices,
        strategy=strategy,
        precision=cfg.precision,
        max_epochs=epochs,
        gradient_clip_val=cfg.grad_clip,
        deterministic="warn" if on_gpu else True,  # some CUDA kernels have no deterministic twin
        logger=loggers,
        callbacks=[checkpoint, EpochSeed(), counter],
        enable_progress_bar=progress,
        enable_model_summary=progress,
        log_every_n_steps=max(1, min(50, steps_per_epoch // 4)),
        limit_val_batches=None if has_val else 0,
        num_sanity_val_steps=0,
        default_root_dir=out_dir,
    )
    return trainer, counter, Path(loggers[0].log_dir) / "metrics.csv"


def _ranks(cfg: TrainConfig) -> int:
    """Processes the Trainer will train in: GPUs requested when on GPUs, ``devices`` CPU ranks with
    ``accelerator="cpu"``, else 1. Each rank takes 1/ranks of an epoch's batches (training/data.py)."""
    if cfg.accelerator == "cpu":
        text = str(cfg.devices).strip()
        return int(text) if text.isdigit() and int(text) > 0 else 1
    if cfg.accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available():
        return max(1, _gpus_requested(cfg.devices))
    return 1


def _gpus_requested(devices: str) -> int:
    """How many GPUs a Trainer ``devices`` setting asks for ("auto"/"-1": all visible; "2"; "0,1")."""
    text = str(devices).strip()
    if text in ("auto", "-1"):
        return torch.cuda.device_count()
    if "," in text:
        return len([d for d in text.split(",") if d.strip()])
    return int(text) if text.isdigit() else 1


def _curves(metrics_csv: Path) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """(step, train loss) and (epoch, val loss) from the CSV log."""
    if not metrics_csv.exists():
        return [], []
    frame = pl.read_csv(metrics_csv, infer_schema_length=None)

    def pairs(x: str, y: str) -> list[tuple[int, float]]:
        if y not in frame.columns:
            return []
        rows = frame.select(x, y).drop_nulls()
        return [(int(a), float(b)) for a, b in rows.iter_rows()]

    train = pairs("step", "train/loss_step") or pairs("epoch", "train/loss_epoch")
    return train, pairs("epoch", "val/loss")


def pretrain(
    settings: Settings, variant: str, out_dir: Path, progress: bool = True, num_workers: int = 0
) -> PretrainResult:
    """Self-supervised pretraining of ``variant``'s backbone on the training period's token shards."""
    lookup_variant(variant)
    cfg, out_dir = settings.train, Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    configure_threads()
    started = time.perf_counter()
    with quiet_lightning(progress):
        L.seed_everything(cfg.seed, workers=True, verbose=False)
        data = WindowDataModule(settings, variant, num_workers=num_workers)
        data.setup()
        model = build_model(variant, settings.model)
        steps = data.steps_per_epoch(_ranks(cfg))  # per rank: the schedule ends with the run
        module = PretrainModule(model, cfg, total_steps=steps * cfg.epochs)
        trainer, counter, metrics_csv = _trainer(cfg, out_dir, cfg.epochs, steps, data.has_validation, progress)
        trainer.fit(module, datamodule=data)
    path = out_dir / "model.pt"
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    torch.save({"variant": variant, "model_config": dataclasses.asdict(settings.model), "state_dict": state}, path)
    total, trainable = count_parameters(model)
    train_curve, val_curve = _curves(metrics_csv)
    shards_used = data.shards_used(cfg.epochs, _ranks(cfg))
    write_shards_used(out_dir, shards_used)
    return PretrainResult(
        variant=variant,
        checkpoint_path=path,
        checkpoint_sha256=file_sha256(path),
        params_total=total,
        params_trainable=trainable,
        train_loss_curve=train_curve,
        val_loss_curve=val_curve,
        seconds=time.perf_counter() - started,
        windows_seen=counter.windows,
        shards_used=shards_used,
        metrics_csv=metrics_csv,
    )


def load_foundation(settings: Settings, variant: str, foundation_path: Path) -> nn.Module:
    """The pretrained backbone from ``model.pt``; its ModelConfig must be the settings' one."""
    lookup_variant(variant)
    saved = torch.load(foundation_path, map_location="cpu", weights_only=True)
    if saved["variant"] != variant:
        raise ValueError(f"{foundation_path} holds a {saved['variant']} backbone, not {variant}")
    if ModelConfig(**saved["model_config"]) != settings.model:
        raise ValueError(f"{foundation_path} was trained with {saved['model_config']}, not {settings.model}")
    model = build_model(variant, settings.model)
    model.load_state_dict(saved["state_dict"])
    return model


def _classifier(settings: Settings, variant: str, backbone: nn.Module) -> nn.Module:
    if lookup_variant(variant).head == "probe":
        return PatchTSTClassifier(backbone)  # linear probe on the frozen encoder
    cfg = settings.train
    classifier = SequenceClassifier(backbone)
    return inject_lora(classifier, cfg.lora_rank, cfg.lora_alpha, cfg.lora_dropout, cfg.lora_layers)


def finetune(
    settings: Settings,
    variant: str,
    tau: float,
    foundation_path: Path,
    out_dir: Path,
    progress: bool = True,
    num_workers: int = 0,
) -> FinetuneResult:
    """Buy/Sell/Hold fine-tuning for one tau: LoRA on the GPT variants, a linear probe on PatchTST."""
    cfg, out_dir = settings.train, Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    configure_threads()
    started = time.perf_counter()
    with quiet_lightning(progress):
        L.seed_everything(cfg.seed, workers=True, verbose=False)
        classifier = _classifier(settings, variant, load_foundation(settings, variant, foundation_path))
        data = WindowDataModule(settings, variant, with_labels=True, tau=tau, num_workers=num_workers)
        data.setup()
        steps = data.steps_per_epoch(_ranks(cfg))
        module = FinetuneModule(classifier, cfg, total_steps=steps * cfg.finetune_epochs)
        epochs = cfg.finetune_epochs
        trainer, counter, metrics_csv = _trainer(cfg, out_dir, epochs, steps, data.has_validation, progress)
        trainer.fit(module, datamodule=data)
        classifier.eval()
        adapter_path = lookup_variant(variant).head_path(out_dir)
        if lookup_variant(variant).head == "probe":
            head = {n: p.detach().cpu() for n, p in classifier.named_parameters() if p.requires_grad}
            torch.save({"variant": variant, "tau": tau, "state_dict": head}, adapter_path)
            files = [adapter_path]
        else:
            shutil.rmtree(adapter_path, ignore_errors=True)
            classifier.save_pretrained(adapter_path)
            _sort_target_modules(adapter_path / "adapter_config.json")
            files = sorted(p for p in adapter_path.rglob("*") if p.is_file())
    total, trainable = count_parameters(classifier)
    train_curve, val_curve = _curves(metrics_csv)
    shards_used = data.shards_used(cfg.finetune_epochs, _ranks(cfg))
    write_shards_used(out_dir, shards_used)
    return FinetuneResult(
        variant=variant,
        tau=tau,
        adapter_path=adapter_path,
        artifact_sha256={str(p.relative_to(out_dir)): file_sha256(p) for p in files},
        foundation_sha256=file_sha256(Path(foundation_path)),
        params_total=total,
        params_trainable=trainable,
        train_loss_curve=train_curve,
        val_loss_curve=val_curve,
        class_counts=data.class_counts(),
        seconds=time.perf_counter() - started,
        windows_seen=counter.windows,
        shards_used=shards_used,
        metrics_csv=metrics_csv,
    )


def _sort_target_modules(config_path: Path) -> None:
    """PEFT keeps target_modules as a set and writes it in hash order, which changes from process to process
    (PYTHONHASHSEED): sort it, in PEFT's own JSON layout, so the same training gives the same bytes."""
    config = json.loads(config_path.read_text())
    if isinstance(config.get("target_modules"), list):
        config["target_modules"] = sorted(config["target_modules"])
        config_path.write_text(json.dumps(config, indent=2, sort_keys=True))


def load_classifier(settings: Settings, variant: str, foundation_path: Path, adapter_dir: Path) -> nn.Module:
    """The fine-tuned classifier in eval mode: foundation weights + PEFT adapter (or the PatchTST probe).

    ``adapter_dir`` is finetune's ``adapter_path`` or the ``out_dir`` that holds it.
    """
    backbone = load_foundation(settings, variant, foundation_path)
    adapter_dir = Path(adapter_dir)
    if lookup_variant(variant).head == "probe":
        head_path = adapter_dir / "head.pt" if adapter_dir.is_dir() else adapter_dir
        saved = torch.load(head_path, map_location="cpu", weights_only=True)
        classifier = PatchTSTClassifier(backbone)
        missing, unexpected = classifier.load_state_dict(saved["state_dict"], strict=False)
        if unexpected or set(saved["state_dict"]) & set(missing):
            raise ValueError(f"{head_path} does not fit a PatchTST probe: unexpected keys {unexpected}")
        return classifier.eval()
    if not (adapter_dir / "adapter_config.json").exists() and (adapter_dir / "adapter").is_dir():
        adapter_dir = adapter_dir / "adapter"
    with warnings.catch_warnings():
        for pattern in _EXPECTED_WARNINGS:
            warnings.filterwarnings("ignore", message=pattern)
        model = peft.PeftModel.from_pretrained(SequenceClassifier(backbone), adapter_dir)
    return model.eval()
