"""Model code (pure torch, no I/O): the KinematicGPT backbone, PatchTST, heads, LoRA and the loss.

Three internal variants share one backbone and differ only in the tokens that feed it
(paper "Tokenization Ablations and External Baseline"); PatchTST reads raw ln close / ln volume windows.
"""

from __future__ import annotations

from torch import nn

from kinematic_pipeline.config import VARIANT_TOKEN_ASSET, ModelConfig
from kinematic_pipeline.models.gpt import KinematicGPT
from kinematic_pipeline.models.heads import (
    PatchTSTClassifier,
    SequenceClassifier,
    count_parameters,
    inject_lora,
    lora_target_modules,
    weighted_cross_entropy,
)
from kinematic_pipeline.models.patchtst import PatchTST

TOKEN_ASSET = VARIANT_TOKEN_ASSET  # the token asset each variant trains on
VARIANTS = tuple(TOKEN_ASSET)


def build_model(variant: str, cfg: ModelConfig) -> nn.Module:
    """The backbone of ``variant``: KinematicGPT for the three GPT variants, PatchTST for "patchtst"."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown model variant {variant!r}: expected one of {', '.join(VARIANTS)}")
    return PatchTST(cfg) if variant == "patchtst" else KinematicGPT(cfg)


__all__ = [
    "TOKEN_ASSET",
    "VARIANTS",
    "KinematicGPT",
    "PatchTST",
    "PatchTSTClassifier",
    "SequenceClassifier",
    "build_model",
    "count_parameters",
    "inject_lora",
    "lora_target_modules",
    "weighted_cross_entropy",
]
