"""PatchTST (Nie et al. 2023), the external patching baseline of the paper's "Model Specifications".

Follows the official implementation where the paper is silent: channel independence (every channel of
a window is a separate univariate series through one shared encoder), RevIN with per-window mean and
biased std (detached), patching by ``unfold(patch_len, stride)`` after padding the end with the last
value repeated ``stride`` times (64 points -> 8 patches), a shared linear patch embedding, a learned
positional embedding and pre-norm transformer encoder layers. Attention is bidirectional inside a
window, which only holds the past. Self-supervised pretraining masks ``mask_ratio`` of the
patches (their values are zeroed before the embedding, as in the official code) and reconstructs
their RevIN-normalized values; the downstream use is a frozen linear probe (``heads.PatchTSTClassifier``).

Two departures from the official code make the masked objective learnable in this project's budgets
(a few hundred AdamW steps, where the official recipe trains for epochs; issue 28):

- The positional embedding starts at the scale of the patch embeddings (N(0, ``POS_INIT_STD``^2) per
  entry; the official ``uniform(-0.02, 0.02)`` is ~50x smaller). A masked patch enters the encoder as
  the embedding's bias plus its position, so with a tiny positional embedding every masked token looks
  alike and cannot find its neighbours: the loss sat at the predict-zero level (~1.0, the standardized
  target's variance) until Adam had grown the embedding, which took longer than the whole budget.
- In pretraining no token attends to a masked one (a key padding mask): a masked token holds no values,
  only its position, and reads the seen patches (as MAE's encoder sees only them). ``encode`` masks nothing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from kinematic_pipeline.config import PatchTSTConfig

POS_INIT_STD = 0.5  # the positional embedding's initial std: the patch embeddings' scale (~0.65 per entry)


class RevIN(nn.Module):
    """Reversible instance normalization over the time axis of each window and channel."""

    def __init__(self, n_vars: int, eps: float = 1e-5, affine: bool = True):
        super().__init__()
        self.eps = eps
        self.affine = affine
        if affine:
            self.weight = nn.Parameter(torch.ones(n_vars))
            self.bias = nn.Parameter(torch.zeros(n_vars))

    def standardize(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, L, C) -> zero mean, unit (biased) std per window and channel, statistics detached."""
        mean = x.mean(dim=1, keepdim=True).detach()  # (B, 1, C)
        std = torch.sqrt(x.var(dim=1, keepdim=True, unbiased=False) + self.eps).detach()  # (B, 1, C)
        return (x - mean) / std

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.standardize(x)  # (B, L, C)
        return z * self.weight + self.bias if self.affine else z


class PatchTST(nn.Module):
    """Channel-independent patch transformer encoder with a masked-patch reconstruction head."""

    def __init__(self, cfg: PatchTSTConfig, n_vars: int = 2, revin_affine: bool = True):
        super().__init__()
        assert cfg.d_model % cfg.n_heads == 0, "d_model must be a multiple of n_heads"
        assert 0.0 < cfg.mask_ratio < 1.0, "the mask ratio must leave some patches masked and some seen"
        self.cfg = cfg
        self.n_vars = n_vars  # input channels (ln close, ln volume)
        self.patch_len, self.stride = cfg.patch_len, cfg.patch_stride
        self.n_patches = (cfg.context - cfg.patch_len) // cfg.patch_stride + 2  # +1 from the end padding
        d = cfg.d_model
        self.revin = RevIN(n_vars, affine=revin_affine)
        self.patch_embed = nn.Linear(cfg.patch_len, d)  # shared across channels and patches
        self.pos_embed = nn.Parameter(POS_INIT_STD * torch.randn(self.n_patches, d))  # module docstring
        self.dropout = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(
                d_model=d,
                nhead=cfg.n_heads,
                dim_feedforward=cfg.d_ff,
                dropout=cfg.dropout,
                activation="gelu",
                batch_first=True,
                norm_first=True,
            )
            for _ in range(cfg.n_layers)
        )
        self.ln_f = nn.LayerNorm(d)
        self.recon_head = nn.Linear(d, cfg.patch_len)  # pretraining only: embedding -> patch values

    def _patches(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, L, C) -> (RevIN input patches, standardized target patches), each (B, C, N, patch_len)."""
        B, L, C = x.shape
        assert L == self.cfg.context, f"expected windows of {self.cfg.context} points, got {L}"
        assert C == self.n_vars, f"expected {self.n_vars} channels, got {C}"

        def patchify(z: torch.Tensor) -> torch.Tensor:
            z = z.transpose(1, 2)  # (B, C, L)
            z = torch.cat((z, z[..., -1:].expand(B, C, self.stride)), dim=-1)  # (B, C, L + stride)
            return z.unfold(-1, self.patch_len, self.stride)  # (B, C, N, patch_len)

        patches = patchify(self.revin(x))
        target = patchify(self.revin.standardize(x))  # no affine: the target cannot be shrunk away
        assert patches.shape[2] == self.n_patches
        return patches, target

    def _encode_patches(self, patches: torch.Tensor, masked: torch.Tensor | None = None) -> torch.Tensor:
        """(B, C, N, patch_len) -> (B, C, N, d): every channel is an independent sequence of N patches.

        ``masked`` (B, C, N), pretraining only: patches no token attends to (each sequence keeps some seen)."""
        B, C, N, P = patches.shape
        h = self.patch_embed(patches.reshape(B * C, N, P)) + self.pos_embed  # (B*C, N, d)
        h = self.dropout(h)
        key_padding = None if masked is None else masked.reshape(B * C, N)  # True: not attended to
        for layer in self.layers:
            h = layer(h, src_key_padding_mask=key_padding)  # (B*C, N, d)
        return self.ln_f(h).reshape(B, C, N, -1)  # (B, C, N, d)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Windows (B, L, C) -> patch embeddings (B, C, n_patches, d_model)."""
        patches, _ = self._patches(x)
        return self._encode_patches(patches)

    def pretrain_loss(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Masked-patch reconstruction MSE, on the masked patches only (official random masking)."""
        patches, target = self._patches(x)  # (B, C, N, P) each
        B, C, N, _ = patches.shape
        n_keep = int(N * (1 - self.cfg.mask_ratio))
        assert 0 < n_keep < N, f"mask ratio {self.cfg.mask_ratio} leaves no patch to mask or to keep"
        noise = torch.rand(B, C, N, generator=generator, device=generator.device if generator is not None else x.device)
        rank = noise.to(x.device).argsort(dim=-1).argsort(dim=-1)  # (B, C, N): rank of each patch's noise
        masked = rank >= n_keep  # (B, C, N), N - n_keep patches per channel
        h = self._encode_patches(patches.masked_fill(masked[..., None], 0.0), masked)  # (B, C, N, d)
        recon = self.recon_head(h)  # (B, C, N, P)
        return F.mse_loss(recon[masked], target[masked])
