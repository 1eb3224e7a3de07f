"""Training (no dagster): window samples from the store, LightningModules, and the pretrain/finetune entry points."""

from __future__ import annotations

from kinematic_pipeline.folds import split_days
from kinematic_pipeline.training.data import SampledWindows, WindowDataModule
from kinematic_pipeline.training.modules import FinetuneModule, PretrainModule
from kinematic_pipeline.training.run import TrainingResult, finetune, load_classifier, pretrain

__all__ = [
    "FinetuneModule",
    "PretrainModule",
    "SampledWindows",
    "TrainingResult",
    "WindowDataModule",
    "finetune",
    "load_classifier",
    "pretrain",
    "split_days",
]
