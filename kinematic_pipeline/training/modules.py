"""LightningModules: the losses, metrics, optimizer and schedule around the pure-torch models.

The models (``kinematic_pipeline.models``) know nothing of Lightning; each module here shares one
``model_step`` between training and validation (lightning-hydra-template). Paper "Training Stability":
AdamW, a linear warmup and a decay to 0 (``LRSchedule``: the paper's cosine over the budget, or warmup-stable-decay,
whose decay starts when validation stalls), gradient clipping at norm 1 (set on the Trainer). Fine-tuning optimizes only the trainable parameters (LoRA + head, or the linear probe), the head
at its own learning rate, and validates on the de-weighted log loss: the unweighted negative log likelihood of
p = (q/w)/sum(q/w), the probabilities every table scores (the class-weighted loss it trains on rewards Sell
ten times over and cannot say which state predicts best).
"""

from __future__ import annotations

import dataclasses
import math

import lightning as L
import torch
from torch import nn

from kinematic_pipeline.config import TrainConfig
from kinematic_pipeline.tasks.base import Task


class LRSchedule:
    """The learning rate's fraction of its peak after each optimizer step: a linear warmup over ``warmup`` steps,
    then

    - "cosine" (the paper's): a cosine from 1 to 0 at ``total``;
    - "wsd" (warmup-stable-decay): 1 until ``decay_start``, then linear to 0 over ``decay`` steps, reached at
      ``end``. ``decay_start`` is ``total - decay`` unless the run's validation stalls first (``start_decay``, called
      by ``trainer.BestState``): every run anneals to 0 within its budget, however early it stops improving.

    ``peak`` scales it all (a warm start continuing at a fraction of the rate: ``train.warm_start_rate``). A callable
    of the step (``LambdaLR``'s), with the state a callback moves; no torch."""

    def __init__(self, total: int, warmup: int = 0, kind: str = "cosine", decay: int = 0, peak: float = 1.0) -> None:
        self.peak = float(peak)
        self.total = max(1, int(total))
        self.warmup = max(0, min(int(warmup), self.total - 1))
        self.kind = kind
        self.decay = max(1, min(int(decay), self.total)) if kind == "wsd" else 0
        self.decay_start = self.total - self.decay

    @property
    def end(self) -> int:
        """The step at which the rate reaches 0 and the run ends (a cosine's: the budget)."""
        return self.decay_start + self.decay if self.kind == "wsd" else self.total

    def start_decay(self, step: int) -> None:
        """Validation stalled at ``step``: a wsd schedule decays from there (never later than planned)."""
        if self.kind == "wsd":
            self.decay_start = min(self.decay_start, max(0, int(step)))

    def __call__(self, step: int) -> float:
        return self._fraction(step) if self.peak == 1.0 else self.peak * self._fraction(step)

    def _fraction(self, step: int) -> float:
        ramp = (step + 1) / (self.warmup + 1) if step < self.warmup else 1.0
        if self.kind == "wsd":
            return max(0.0, min(ramp, (self.end - step) / self.decay))
        if step < self.warmup:
            return ramp
        span = self.total - self.warmup
        return 0.5 * (1.0 + math.cos(math.pi * min(step - self.warmup, span) / span))


def lr_schedule(cfg: TrainConfig, total_steps: int, continued: bool = False) -> LRSchedule:
    """A run's schedule from its settings: ``train.schedule``, its warmup, and a wsd decay of ``decay_fraction`` of
    the budget in whole validation intervals (so the run's last step is validated); a ``continued`` warm start has no
    warmup and peaks at ``train.warm_start_rate`` of the rate."""
    every = cfg.eval_every
    decay = max(every, round(cfg.decay_fraction * total_steps / every) * every)
    if continued:
        return LRSchedule(total_steps, 0, cfg.schedule, decay, peak=cfg.warm_start_rate or 1.0)
    return LRSchedule(total_steps, warmup_steps(cfg, total_steps), cfg.schedule, decay)


def follows_schedule(curves: list[dict], cfg: TrainConfig, total_steps: int, continued: bool = False) -> bool:
    """Whether a learning curve (``curves.csv``'s rows) was trained under ``lr_schedule(cfg, total_steps,
    continued)``: each validated step's recorded rate fraction is the schedule's, replayed as ``trainer.BestState``
    moves it (a wsd decay starts where ``cfg.patience`` validations in a row brought no better loss). A run of another
    budget differs in its warmup or its decay's length, so its curve does not follow this one's."""
    schedule = lr_schedule(cfg, total_steps, continued)
    best, bad = math.inf, 0
    for row in curves:
        if row["step"] and not math.isclose(row["lr_fraction"], schedule(row["step"]), rel_tol=1e-9, abs_tol=1e-12):
            return False
        if row["val_loss"] < best:
            best, bad = row["val_loss"], 0
        else:
            bad += 1
            if cfg.patience and bad >= cfg.patience:
                schedule.start_decay(row["step"])
    return True


def adamw_with_cosine(
    params: list[tuple[str, nn.Parameter]],
    lr: float,
    weight_decay: float,
    total_steps: int,
    warmup_steps: int = 0,
    group_lr: dict[str, float] | None = None,
    schedule: LRSchedule | None = None,
    state: dict | None = None,
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW with weight decay on matrices only (not biases, norms) and each group's rate times ``schedule`` (by
    default a linear warmup over ``warmup_steps`` and a cosine to 0 at ``total_steps``). ``group_lr`` maps a name
    fragment to its own rate (e.g. ``{"cls_head": 3e-3}``): parameters whose name holds it form their own groups.
    ``state``: an earlier run's ``optimizer.state_dict()`` of the same parameters (a warm start's parent's), whose
    moments and step counts are continued; the rates and the schedule are this run's."""
    trainable = [(n, p) for n, p in params if p.requires_grad]
    if not trainable:
        raise ValueError("no trainable parameters")
    group_lr = group_lr or {}

    def rate(name: str) -> float:
        return next((r for fragment, r in group_lr.items() if fragment in name), lr)

    groups = []
    for value in sorted({rate(n) for n, _ in trainable}, reverse=True):
        mine = [(n, p) for n, p in trainable if rate(n) == value]
        groups += [
            {"params": [p for _, p in mine if p.dim() >= 2], "weight_decay": weight_decay, "lr": value},
            {"params": [p for _, p in mine if p.dim() < 2], "weight_decay": 0.0, "lr": value},
        ]
    optimizer = torch.optim.AdamW([g for g in groups if g["params"]], lr=lr)
    if state is not None:
        rates = [g["lr"] for g in optimizer.param_groups]
        optimizer.load_state_dict(state)  # its groups' hyperparameters too: this run's rates back, fresh for LambdaLR
        for group, rate in zip(optimizer.param_groups, rates):
            group["lr"] = rate
            group.pop("initial_lr", None)
    schedule = schedule or LRSchedule(total_steps, warmup_steps)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)


def warmup_steps(cfg: TrainConfig, total_steps: int) -> int:
    return int(round(cfg.warmup_fraction * total_steps))


class PretrainModule(L.LightningModule):
    """Self-supervised pretraining of a backbone with the objective it owns (``pretrain_loss``: next-token MSE
    for KinematicGPT, masked patches for PatchTST). ``optimizer_state``: a warm start's parent's AdamW state, continued
    at ``train.warm_start_rate`` of the rate with no warmup (``lr_schedule``)."""

    def __init__(
        self, model: nn.Module, train_cfg: TrainConfig, total_steps: int, seed: int = 0, optimizer_state=None
    ) -> None:
        super().__init__()
        self.model = model
        self.train_cfg = train_cfg
        self.total_steps = total_steps
        self.seed = seed  # validation draws (PatchTST's masks) from it: the same every epoch
        self.optimizer_state = optimizer_state
        continued = optimizer_state is not None and train_cfg.warm_start_rate is not None
        self.lr_schedule = lr_schedule(train_cfg, total_steps, continued)  # what BestState starts the decay of
        self.save_hyperparameters({"train": dataclasses.asdict(train_cfg), "total_steps": total_steps})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def model_step(self, batch: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        return self.model.pretrain_loss(batch, generator=generator)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        loss = self.model_step(batch)
        self.log("train/loss", loss, on_step=True, on_epoch=True, prog_bar=True, batch_size=len(batch))
        return loss

    def validation_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        # the same draws every epoch (PatchTST's masks; GPTs draw nothing): validation losses are comparable
        generator = torch.Generator(device=batch.device).manual_seed(self.seed + batch_idx)
        loss = self.model_step(batch, generator)
        self.log("val/loss", loss, on_epoch=True, prog_bar=True, batch_size=len(batch), sync_dist=True)

    def configure_optimizers(self):
        cfg = self.train_cfg
        optimizer, schedule = adamw_with_cosine(
            list(self.model.named_parameters()),
            cfg.lr,
            cfg.weight_decay,
            self.total_steps,
            schedule=self.lr_schedule,
            state=self.optimizer_state if cfg.warm_start_rate is not None else None,
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class FinetuneModule(L.LightningModule):
    """Buy/Sell/Hold fine-tuning of a classifier with the paper's weighted cross entropy."""

    def __init__(self, classifier: nn.Module, task: Task, train_cfg: TrainConfig, total_steps: int) -> None:
        super().__init__()
        self.classifier = classifier
        self.task, self.train_cfg = task, train_cfg
        self.total_steps = total_steps
        self.lr_schedule = lr_schedule(train_cfg, total_steps)  # what BestState starts the decay of
        self.save_hyperparameters({"train": dataclasses.asdict(train_cfg), "total_steps": total_steps})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(x)

    def model_step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, y = batch  # (B, T, C), (B,)
        logits = self.classifier(x)  # (B, 3)
        loss = self.task.loss(logits, y)
        return loss, logits, y

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        loss, logits, y = self.model_step(batch)
        self.log("train/loss", loss, on_step=True, on_epoch=True, prog_bar=True, batch_size=len(y))
        return loss

    def validation_step(self, batch, batch_idx: int) -> None:
        # val/loss (what the run stops on and keeps the best state by) is the de-weighted log loss
        weighted, logits, y = self.model_step(batch)
        nll = self.task.val_loss(logits, y)
        acc = (logits.argmax(dim=-1) == y).float().mean()
        log = dict(on_epoch=True, batch_size=len(y), sync_dist=True)
        self.log("val/loss", nll, prog_bar=True, **log)
        self.log("val/weighted_loss", weighted, **log)
        self.log("val/acc", acc, **log)

    def configure_optimizers(self):
        cfg = self.train_cfg
        optimizer, schedule = adamw_with_cosine(
            list(self.classifier.named_parameters()),
            cfg.finetune_lr,
            cfg.weight_decay,
            self.total_steps,
            group_lr={"cls_head": cfg.head_lr},
            schedule=self.lr_schedule,
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
