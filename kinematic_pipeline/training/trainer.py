"""The Lightning Trainer as training runs it: threads, expected warnings, loggers, checkpoints, ranks.

No dagster here; ``training/run.py`` builds a Trainer with ``build_trainer`` for pretraining and fine-tuning.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import io
import logging
import math
import os
import shutil
import warnings
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

from kinematic_pipeline.config import TrainConfig
from kinematic_pipeline.config.machine import usable_cores
from kinematic_pipeline.training.curves import CURVE_COLUMNS, CURVES_FILE
from kinematic_pipeline.training.data import EpochSeed
from kinematic_pipeline.warehouse import exact_paths as exact
from kinematic_pipeline.warehouse.atomic import inside_warehouse, write_text_atomic

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


class BestState(L.Callback):
    """Train to the best validation loss: validate before the first step (the initial state, e.g. a head at the
    prior, is a candidate) and every ``eval_every`` steps, keep a copy of the trainable parameters at the best
    ``val/loss``; after ``patience`` validations without a better one (0: never) start the decay of a wsd schedule
    (the module's ``lr_schedule``, ``modules.LRSchedule``) or stop (a cosine's); stop where the wsd schedule has
    annealed to 0; restore the best state when training ends, and write the learning curve (``curves.csv``: one row
    per validation, with the mean training loss since the previous one and the rate's fraction of its peak) beside
    the weights. ``val/loss`` is synchronized across DDP ranks, so every rank keeps the same step."""

    def __init__(self, out_dir: Path, patience: int) -> None:
        self.out_dir, self.patience = Path(out_dir), patience
        self.best_loss, self.best_step, self.bad = math.inf, 0, 0
        self.state: dict[str, torch.Tensor] | None = None
        self.optimizer_state: dict | None = None  # AdamW's at the best step (what a warm start continues)
        self.rows: list[dict] = []
        self._losses: list[float] = []
        self._windows = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        self._losses.append(float(loss.detach()))
        self._windows += len(batch[1] if isinstance(batch, (tuple, list)) else batch)

    def on_validation_end(self, trainer, pl_module) -> None:
        metrics = trainer.callback_metrics
        if "val/loss" not in metrics:
            return
        val = float(metrics["val/loss"])
        optimizers = trainer.optimizers
        lr = optimizers[0].param_groups[0]["lr"] if optimizers and trainer.global_step else 0.0
        schedule, step = getattr(pl_module, "lr_schedule", None), trainer.global_step
        row = dict(
            step=step,
            epoch=trainer.current_epoch,
            windows=self._windows * trainer.world_size,
            lr=lr,
            lr_fraction=schedule(step) if schedule is not None and step else math.nan,
            train_loss=sum(self._losses) / len(self._losses) if self._losses else math.nan,
            val_loss=val,
            val_weighted_loss=float(metrics.get("val/weighted_loss", math.nan)),
            val_acc=float(metrics.get("val/acc", math.nan)),
            best=False,
        )
        self._losses = []
        self.rows.append(row)
        if val < self.best_loss:
            self.best_loss, self.best_step, self.bad = val, trainer.global_step, 0
            self.state = {n: p.detach().clone() for n, p in pl_module.named_parameters() if p.requires_grad}
            if step and trainer.optimizers:  # at step 0 nothing has moved: the optimizer it started from stands
                self.optimizer_state = copy.deepcopy(trainer.optimizers[0].state_dict())
        else:
            self.bad += 1
            if self.patience and self.bad >= self.patience:
                if schedule is not None and schedule.kind == "wsd":
                    schedule.start_decay(step)  # anneal from here to 0, then end
                else:
                    trainer.should_stop = True
        if schedule is not None and schedule.kind == "wsd" and step >= schedule.end:
            trainer.should_stop = True

    def on_train_end(self, trainer, pl_module) -> None:
        if self.state is not None:
            with torch.no_grad():
                for name, param in pl_module.named_parameters():
                    if name in self.state:
                        param.copy_(self.state[name])
        for row in self.rows:
            row["best"] = row["step"] == self.best_step
        if trainer.is_global_zero:
            out = io.StringIO(newline="")
            writer = csv.DictWriter(out, fieldnames=CURVE_COLUMNS, lineterminator="\n")
            writer.writeheader()
            writer.writerows(self.rows)
            write_text_atomic(self.out_dir / CURVES_FILE, out.getvalue())


def training_threads(train=None) -> int:
    """Torch's intra-op threads in a training step: ``train.threads``, else the usable cores shared between the
    ``train.processes`` steps that run at once (never more: 2 cores are easy to oversubscribe). A fit's bytes
    depend on it (a reduction's order), so it follows from the settings alone, never from how many fits a run has."""
    if train is None:  # a benchmark's process: every core
        return usable_cores()
    return train.process_threads


def configure_threads(train=None) -> None:
    """Torch's threads, and the BLAS and OpenMP pools' (a probe's lbfgs, scikit-learn), at ``training_threads``."""
    from threadpoolctl import threadpool_limits

    threads = training_threads(train)
    torch.set_num_threads(threads)
    threadpool_limits(threads)


INDUCTOR_CACHE = ".inductor"  # <warehouse>/.inductor/: the compiled blocks' code, shared by a run's processes


def compile_blocks(model: torch.nn.Module, cfg: TrainConfig, steps: int, warehouse_root: Path) -> bool:
    """Regional compilation (``train.compile`` "regional"): each repeated block of ``model`` (the GPT's ``blocks``,
    PatchTST's ``layers``) compiled in place by ``nn.Module.compile`` (parameter names unchanged: the saved state is
    the eager model's) when the run trains at least ``compile_min_steps`` steps; Inductor's cache is the warehouse's
    (``TORCHINDUCTOR_CACHE_DIR`` unless set), so that a run's processes compile the block's code once. On 2 cores at
    real's size a step is 1.18x faster and the tracing (~12 s a process with a warm cache) is paid after ~215 steps
    (docs/results/2026-12-04.md); shorter runs stay eager. Whether it compiled."""
    if cfg.compile != "regional" or steps < cfg.compile_min_steps:
        return False
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(warehouse_root) / INDUCTOR_CACHE))
    blocks = [block for name in ("blocks", "layers") for block in getattr(model, name, ())]
    for block in blocks:
        block.compile()
    return bool(blocks)


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


def build_trainer(
    cfg: TrainConfig, out_dir: Path, max_steps: int, has_val: bool, progress: bool, patience: int, callbacks=()
):
    """A Trainer for ``max_steps`` optimizer steps (epochs follow: each draws a new sample), validating every
    ``cfg.eval_every`` steps and before the first (the initial state is a candidate) when there are validation
    windows, stopping after ``patience`` validations without improvement and restoring the best state; ``callbacks``
    run after the run's own (a benchmark's probes: ``benchmarks/bench_learnability.py``)."""
    inside_warehouse(out_dir)  # Lightning's logger and checkpoint write in place: never in a folder linked out
    for sub in ("checkpoints", "logs"):  # a re-run starts clean: no stale checkpoints or curves
        if (out_dir / sub).is_symlink():  # a link planted there is removed, never followed
            (out_dir / sub).unlink()
        shutil.rmtree(out_dir / sub, ignore_errors=True)
    (out_dir / CURVES_FILE).unlink(missing_ok=True)
    loggers = [CSVLogger(out_dir, name="logs", version=0)]
    with contextlib.suppress(ImportError):
        import tensorboard  # noqa: F401
        from lightning.pytorch.loggers import TensorBoardLogger

        loggers.append(TensorBoardLogger(out_dir, name="logs", version=0, sub_dir="tensorboard"))
    checkpoint = ModelCheckpoint(  # for resuming: the last state (the weights saved are the best: BestState)
        dirpath=out_dir / "checkpoints",
        filename="last-step{step:05d}",
        save_top_k=0,
        save_last=True,
        auto_insert_metric_name=False,
    )
    on_gpu = cfg.accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    if on_gpu:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    counter = WindowCounter()
    best = BestState(out_dir, patience if has_val else 0)
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
        max_epochs=-1,
        max_steps=max_steps,
        val_check_interval=min(cfg.eval_every, max_steps),
        check_val_every_n_epoch=None,
        gradient_clip_val=cfg.grad_clip,
        deterministic="warn" if on_gpu else True,  # some CUDA kernels have no deterministic twin
        logger=loggers,
        callbacks=[checkpoint, EpochSeed(), counter, best, *callbacks],
        enable_progress_bar=progress,
        enable_model_summary=progress,
        log_every_n_steps=max(1, min(50, cfg.eval_every // 2)),
        limit_val_batches=None if has_val else 0,
        num_sanity_val_steps=-1 if has_val else 0,  # the whole validation sample at step 0: BestState's first point
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
    """(step, train loss) and (step, val loss) from the CSV log."""
    if not metrics_csv.exists():
        return [], []
    frame = exact.read_csv(metrics_csv, infer_schema_length=None)

    def pairs(x: str, y: str) -> list[tuple[int, float]]:
        if y not in frame.columns:
            return []
        rows = frame.select(x, y).drop_nulls()
        return [(int(a), float(b)) for a, b in rows.iter_rows()]

    train = pairs("step", "train/loss_step") or pairs("epoch", "train/loss_epoch")
    return train, pairs("step", "val/loss")
