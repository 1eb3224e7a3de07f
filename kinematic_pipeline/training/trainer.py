"""The Lightning Trainer as training runs it: threads, expected warnings, loggers, checkpoints, ranks.

No dagster here; ``training/run.py`` builds a Trainer with ``build_trainer`` for pretraining and fine-tuning.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import warnings
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

from kinematic_pipeline import exact_paths as exact
from kinematic_pipeline.config import TrainConfig
from kinematic_pipeline.training.data import EpochSeed

# Expected here, not problems: streaming needs no workers on 2 cores; tiny profiles log rarely;
# re-materializing an asset reuses its folder.
EXPECTED_WARNINGS = (
    r".*does not have many workers.*",
    r".*number of training batches .* is smaller than the logging interval.*",
    r".*Checkpoint directory .* exists and is not empty.*",
    r".*Experiment logs directory .* exists and is not empty.*",
    r".*Total length of .* across ranks is zero.*",
    r".*could not find a config file in.*",  # PEFT: the base model is ours, not a Hub model
    r".*module\(s\) in eval mode at the start of training.*",  # the PatchTST probe's frozen encoder
    r".*isinstance\(treespec, LeafSpec\)` is deprecated.*",  # inside Lightning, with torch 2.13
)


class WindowCounter(L.Callback):
    """Windows the training steps saw (every rank counts its own)."""

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
        for pattern in EXPECTED_WARNINGS:
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


def build_trainer(cfg: TrainConfig, out_dir: Path, epochs: int, steps_per_epoch: int, has_val: bool, progress: bool):
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
    counter = WindowCounter()
    strategy = cfg.strategy
    if strategy == "auto" and ranks(cfg) > 1:
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


def ranks(cfg: TrainConfig) -> int:
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


def loss_curves(metrics_csv: Path) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """(step, train loss) and (epoch, val loss) from the CSV log."""
    if not metrics_csv.exists():
        return [], []
    frame = exact.read_csv(metrics_csv, infer_schema_length=None)

    def pairs(x: str, y: str) -> list[tuple[int, float]]:
        if y not in frame.columns:
            return []
        rows = frame.select(x, y).drop_nulls()
        return [(int(a), float(b)) for a, b in rows.iter_rows()]

    train = pairs("step", "train/loss_step") or pairs("epoch", "train/loss_epoch")
    return train, pairs("epoch", "val/loss")
