"""Model code (pure torch, no I/O): the KinematicGPT backbone, PatchTST, heads, LoRA and the loss.

Three internal variants share one backbone and differ only in the tokens that feed it
(paper "Tokenization Ablations and External Baseline"); PatchTST reads raw ln close / ln volume windows.
"""

from __future__ import annotations

from torch import nn

from kinematic_pipeline.config import ModelConfig
from kinematic_pipeline.models.gpt import KinematicGPT, lora_target_modules
from kinematic_pipeline.models.heads import (
    HEADS,
    PatchTSTClassifier,
    SequenceClassifier,
    count_parameters,
    init_head_at_prior,
    inject_lora,
)
from kinematic_pipeline.models.patchtst import PatchTST
from kinematic_pipeline.variants import variant as lookup_variant

BACKBONES = {"gpt": KinematicGPT, "patchtst": PatchTST}  # the registry's ``backbone`` names, ModelConfig's fields


def build_model(variant: str, cfg: ModelConfig) -> nn.Module:
    """The backbone of ``variant`` (the registry's ``backbone``) built from its own config (``cfg.of``); each owns
    its ``pretrain_loss``."""
    backbone = lookup_variant(variant).backbone
    return BACKBONES[backbone](cfg.of(backbone))


__all__ = [
    "BACKBONES",
    "HEADS",
    "KinematicGPT",
    "PatchTST",
    "PatchTSTClassifier",
    "SequenceClassifier",
    "build_model",
    "count_parameters",
    "init_head_at_prior",
    "inject_lora",
    "lora_target_modules",
]
