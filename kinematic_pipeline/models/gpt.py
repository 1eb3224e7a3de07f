"""KinematicGPT: the decoder-only causal transformer shared by SplineGPT, RawGPT-FD and RawGPT.

Paper "Model Architecture and Training": 4 pre-norm blocks, 8 heads, d_model 512, d_ff 2048, GELU,
rotary position embeddings, ~12.6 M parameters. A token is a 9-vector (4 price + 5 volume
channels); the three internal variants differ only in which tokens feed this backbone. The next-token
head regresses token t+1 from position t. Module names (``blocks.{i}.attn.qkv`` ...) are its LoRA targets
(``lora_targets``: what ``heads.inject_lora`` asks any backbone for).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from kinematic_pipeline.config import GPTConfig

LORA_LINEARS = ("attn.qkv", "attn.proj", "mlp.fc", "mlp.proj")  # every linear layer of a block


def lora_target_modules(cfg: GPTConfig, layers: Sequence[int] = (0, 1, 3)) -> list[str]:
    """Names of the linear layers of KinematicGPT that receive LoRA adapters, e.g. ``blocks.0.attn.qkv``."""
    bad = [i for i in layers if not 0 <= i < cfg.n_layers]
    if bad:
        raise ValueError(f"LoRA layers {bad} are outside the model's {cfg.n_layers} blocks (0-based)")
    return [f"blocks.{i}.{name}" for i in layers for name in LORA_LINEARS]


def rotary_cos_sin(positions: torch.Tensor, head_dim: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotation angles of RoPE (rotate-half layout) at integer ``positions`` (T,) -> two (T, head_dim)."""
    assert head_dim % 2 == 0, "RoPE rotates pairs of dimensions: head_dim must be even"
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32, device=positions.device) / head_dim)
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]  # (T, head_dim/2)
    angles = torch.cat((angles, angles), dim=-1)  # (T, head_dim)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair (x_i, x_{i+hd/2}) of x (..., T, hd) by its position's angle.

    Because rotations compose, <R(p) q, R(p') k> = <q, R(p' - p) k>: scores see only p' - p.
    """
    x1, x2 = x.chunk(2, dim=-1)  # (..., T, hd/2) each
    rotated_half = torch.cat((-x2, x1), dim=-1)  # (..., T, hd)
    return x * cos + rotated_half * sin


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        assert cfg.d_model % cfg.n_heads == 0, "d_model must be a multiple of n_heads"
        self.n_heads = cfg.n_heads
        self.head_dim = cfg.d_model // cfg.n_heads
        self.dropout = cfg.dropout
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        """(B, T, C) -> (B, T, C); ``last_only``: the output of the last position only, (B, 1, C), whose query sees
        every key (the other queries' scores, projections and outputs are not computed)."""
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)  # (B, T, C) each
        Q = 1 if last_only else T  # the queries computed
        q = q[:, T - Q :].reshape(B, Q, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, Q, hd)
        k = k.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, hd)
        v = v.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, hd)
        q, k = apply_rotary(q, cos[T - Q :], sin[T - Q :]), apply_rotary(k, cos, sin)  # position enters via q.k only
        y = F.scaled_dot_product_attention(  # causal; the last query alone sees every key, masked nothing
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=not last_only
        )  # (B, H, Q, hd)
        y = y.transpose(1, 2).contiguous().view(B, Q, C)  # (B, Q, C)
        return self.resid_dropout(self.proj(y))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, cfg.d_ff)
        self.gelu = nn.GELU()
        self.proj = nn.Linear(cfg.d_ff, cfg.d_model)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(self.gelu(self.fc(x))))  # (B, T, C) -> (B, T, d_ff) -> (B, T, C)


class Block(nn.Module):
    """Pre-norm decoder block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        """(B, T, C) -> (B, T, C), or with ``last_only`` the last position's (B, 1, C) (``CausalSelfAttention``)."""
        residual = x[:, -1:] if last_only else x
        x = residual + self.attn(self.ln_1(x), cos, sin, last_only)  # (B, T or 1, C)
        x = x + self.mlp(self.ln_2(x))  # (B, T or 1, C)
        return x


class KinematicGPT(nn.Module):
    """Input projection 9 -> d_model, ``n_layers`` RoPE decoder blocks, final LayerNorm, head d_model -> 9."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.input_proj = nn.Linear(cfg.n_channels, cfg.d_model)
        self.dropout = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layers)])
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.n_channels)
        # RoPE tables for every position of the context; derived, so not part of the checkpoint.
        cos, sin = rotary_cos_sin(torch.arange(cfg.context), cfg.d_model // cfg.n_heads, cfg.rope_base)
        self.register_buffer("rope_cos", cos, persistent=False)  # (context, hd)
        self.register_buffer("rope_sin", sin, persistent=False)  # (context, hd)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):  # GPT-2 initialization
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    def hidden(self, x: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        """Tokens (B, T, 9) -> final-norm hidden states (B, T, d_model); position t sees tokens <= t. ``last_only``:
        the last position's alone (B, d_model), with the last block run for that position only."""
        B, T, C = x.shape
        assert C == self.cfg.n_channels, f"expected {self.cfg.n_channels} channels per token, got {C}"
        assert T <= self.cfg.context, f"sequence of {T} tokens exceeds the context of {self.cfg.context}"
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]  # (T, hd)
        h = self.dropout(self.input_proj(x))  # (B, T, d_model)
        for i, block in enumerate(self.blocks):
            h = block(h, cos, sin, last_only and i == len(self.blocks) - 1)  # (B, T, d_model); last_only's end: 1
        return self.ln_f(h[:, -1]) if last_only else self.ln_f(h)

    def last_hidden(self, x: torch.Tensor) -> torch.Tensor:
        """``hidden(x)[:, -1]`` (B, d_model), the last block run for the last position alone (a classifier reads
        nothing else; ~25% of a fine-tuning step saved, ``benchmarks/bench_classifier_path.py``)."""
        return self.hidden(x, last_only=True)

    def lora_targets(self, layers: Sequence[int]) -> list[str]:
        """Its modules that receive LoRA adapters in ``layers`` (``lora_target_modules``): what a LoRA head asks a
        backbone for, with ``last_hidden``."""
        return lora_target_modules(self.cfg, layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Tokens (B, T, 9) -> predictions (B, T, 9); output t predicts token t+1."""
        return self.head(self.hidden(x))  # (B, T, 9)

    def pretrain_loss(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Self-supervised objective: MSE of the normalized token ``pretrain_horizon`` ahead, output t vs input t+h
        (h = 1, the paper's: the next token; ``generator`` is unused: the objective draws nothing; PatchTST's
        masks do)."""
        h = self.cfg.pretrain_horizon
        pred = self(x)  # (B, T, 9)
        return F.mse_loss(pred[:, :-h], x[:, h:])
