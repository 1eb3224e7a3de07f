"""One config per backbone (nanoGPT's ``GPTConfig``): ``GPTConfig`` builds ``models/gpt.py``'s KinematicGPT,
``PatchTSTConfig`` ``models/patchtst.py``'s PatchTST, and ``ModelConfig`` holds one of each, a field per backbone
name of the registry (``variants.ModelVariant.backbone``; ``models.build_model`` passes a variant's backbone its own).

A foundation records and is checked against its own backbone's config alone (``training.run.load_foundation``), so a
PatchTST size changed leaves the GPT foundations loadable. Torch-free (the settings load without it): the configs
live here rather than in the model modules, which import torch. Paper values by default (Tables "Hyperparameters"
and "Model Specifications").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from kinematic_pipeline.windows import N_CHANNELS, N_TOKENS

_ABSENT = object()  # a field one side of a comparison lacks


@dataclass(frozen=True)
class GPTConfig:
    """KinematicGPT, the backbone of SplineGPT, RawGPT-FD and RawGPT."""

    d_model: int = 512  # embedding width ("short & wide")
    n_layers: int = 4  # decoder blocks
    n_heads: int = 8  # attention heads
    d_ff: int = 2048  # MLP width (GELU)
    context: int = N_TOKENS  # tokens per window (windows.py: the window geometry's one home)
    n_channels: int = N_CHANNELS  # 4 price + 5 volume coefficients per token
    dropout: float = 0.1
    rope_base: float = 10000.0  # rotary position embedding frequency base
    # The pretraining target: position t regresses token t + pretrain_horizon (1: the paper's next token). A
    # spline token's successor is nearly its own continuation (pretraining validation loss 0.05 on ci against
    # RawGPT-FD's 0.32), so a longer horizon asks what continuity alone cannot answer (an option; the paper's is
    # the default).
    pretrain_horizon: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.pretrain_horizon < self.context:
            raise ValueError(
                f"model.gpt.pretrain_horizon={self.pretrain_horizon!r}: expected a number of tokens ahead in "
                f"[1, {self.context - 1}] (1: the next token)"
            )


@dataclass(frozen=True)
class PatchTSTConfig:
    """PatchTST, the external baseline: channel independent, RevIN, patch 16 / stride 8, d_model 256, 4 heads.
    Its objective is its masked patches."""

    d_model: int = 256
    n_heads: int = 4
    n_layers: int = 4
    d_ff: int = 5328  # sized so PatchTST has ~12.0 M parameters, the paper's matched capacity
    context: int = N_TOKENS  # points per window
    dropout: float = 0.1
    patch_len: int = 16
    patch_stride: int = 8
    mask_ratio: float = 0.4  # share of patches masked in self-supervised pretraining


@dataclass(frozen=True)
class ModelConfig:
    """Every backbone's config, a field per backbone name (``of`` reads one by name)."""

    gpt: GPTConfig = field(default_factory=GPTConfig)
    patchtst: PatchTSTConfig = field(default_factory=PatchTSTConfig)

    def of(self, backbone: str) -> GPTConfig | PatchTSTConfig:
        """The config of ``backbone`` (a registry name: "gpt", "patchtst")."""
        names = [f.name for f in dataclasses.fields(self)]
        if backbone not in names:
            raise ValueError(f"backbone {backbone!r}: expected one of {', '.join(map(repr, names))}")
        return getattr(self, backbone)

    def record(self, backbone: str) -> dict:
        """What a foundation of ``backbone`` pins of the settings: its own config, as plain values."""
        return dataclasses.asdict(self.of(backbone))

    def differences(self, backbone: str, recorded: dict) -> list[str]:
        """The fields of ``backbone``'s config that differ from ``recorded`` (a foundation's ``record``), each as
        ``model.<backbone>.<field>=<recorded> (settings: <now>)``; empty when they agree."""
        now = self.record(backbone)
        return [
            f"model.{backbone}.{name}={recorded.get(name, 'absent')!r} (settings: {now.get(name, 'absent')!r})"
            for name in sorted(now.keys() | recorded.keys())
            if recorded.get(name, _ABSENT) != now.get(name, _ABSENT)
        ]
