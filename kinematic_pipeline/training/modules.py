"""LightningModules: the losses, metrics, optimizer and schedule around the pure-torch models.

The models (``kinematic_pipeline.models``) know nothing of Lightning; each module here shares one
``model_step`` between training and validation (lightning-hydra-template). Paper "Training Stability":
AdamW, cosine decay from lr to 0 over every step of every epoch, gradient clipping at norm 1 (set on
the Trainer). Fine-tuning optimizes only the trainable parameters (LoRA + head, or the linear probe).
"""

from __future__ import annotations

import dataclasses
import math

import lightning as L
import torch
from torch import nn

from kinematic_pipeline.config import TrainConfig
from kinematic_pipeline.models import weighted_cross_entropy


def adamw_with_cosine(
    params: list[tuple[str, nn.Parameter]], lr: float, weight_decay: float, total_steps: int
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW with weight decay on matrices only (not biases, norms) and a per-step cosine from lr to 0."""
    trainable = [(n, p) for n, p in params if p.requires_grad]
    if not trainable:
        raise ValueError("no trainable parameters")
    groups = [
        {"params": [p for _, p in trainable if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for _, p in trainable if p.dim() < 2], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW([g for g in groups if g["params"]], lr=lr)
    total = max(1, int(total_steps))

    def cosine(step: int) -> float:
        return 0.5 * (1.0 + math.cos(math.pi * min(step, total) / total))

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, cosine)


class PretrainModule(L.LightningModule):
    """Self-supervised pretraining of a backbone with the objective it owns (``pretrain_loss``: next-token MSE
    for KinematicGPT, masked patches for PatchTST)."""

    def __init__(self, model: nn.Module, train_cfg: TrainConfig, total_steps: int, seed: int = 0) -> None:
        super().__init__()
        self.model = model
        self.train_cfg = train_cfg
        self.total_steps = total_steps
        self.seed = seed  # validation draws (PatchTST's masks) from it: the same every epoch
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
        self.log("val/loss", loss, on_epoch=True, prog_bar=True, batch_size=len(batch))

    def configure_optimizers(self):
        cfg = self.train_cfg
        optimizer, schedule = adamw_with_cosine(
            list(self.model.named_parameters()), cfg.lr, cfg.weight_decay, self.total_steps
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class FinetuneModule(L.LightningModule):
    """Buy/Sell/Hold fine-tuning of a classifier with the paper's weighted cross entropy."""

    def __init__(self, classifier: nn.Module, train_cfg: TrainConfig, total_steps: int) -> None:
        super().__init__()
        self.classifier = classifier
        self.train_cfg = train_cfg
        self.total_steps = total_steps
        self.save_hyperparameters({"train": dataclasses.asdict(train_cfg), "total_steps": total_steps})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(x)

    def model_step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, y = batch  # (B, T, C), (B,)
        logits = self.classifier(x)  # (B, 3)
        loss = weighted_cross_entropy(logits, y, self.train_cfg.class_weights)
        return loss, logits.argmax(dim=-1), y

    def _log_step(self, stage: str, batch) -> torch.Tensor:
        loss, preds, y = self.model_step(batch)
        acc = (preds == y).float().mean()
        self.log(f"{stage}/loss", loss, on_step=stage == "train", on_epoch=True, prog_bar=True, batch_size=len(y))
        self.log(f"{stage}/acc", acc, on_step=False, on_epoch=True, prog_bar=True, batch_size=len(y))
        return loss

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        return self._log_step("train", batch)

    def validation_step(self, batch, batch_idx: int) -> None:
        self._log_step("val", batch)

    def configure_optimizers(self):
        cfg = self.train_cfg
        optimizer, schedule = adamw_with_cosine(
            list(self.classifier.named_parameters()), cfg.finetune_lr, cfg.weight_decay, self.total_steps
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
