"""Classification heads, LoRA injection, the weighted loss and parameter counting.

Paper "Fine-Tuning via Low-Rank Adaptation": the pretrained KinematicGPT is frozen and LoRA adapters
go into layers 1, 2 and 4 (0-based 0, 1, 3) with a Buy/Sell/Hold head read from the last position;
"Training Objectives & Labeling": weighted cross entropy with w = [2, 10, 1]. PatchTST is adapted
by a linear probe on its frozen encoder instead ("Model Specifications"). ``HEADS`` gives each head kind of
the registry (``variants.HeadLayout``) its torch side: build on a backbone, save, load.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from kinematic_pipeline.config import TrainConfig
from kinematic_pipeline.models.gpt import KinematicGPT
from kinematic_pipeline.models.patchtst import PatchTST
from kinematic_pipeline.variants import LORA_HEAD, PROBE_HEAD
from kinematic_pipeline.warehouse.atomic import UMASK, write_bytes_atomic, write_text_atomic
from kinematic_pipeline.warehouse.verified import without_sidecars

if TYPE_CHECKING:
    import peft


class SequenceClassifier(nn.Module):
    """KinematicGPT backbone + linear head on the hidden state of the last token: (B, T, 9) -> (B, n_classes)."""

    def __init__(self, backbone: KinematicGPT, n_classes: int):
        super().__init__()
        self.backbone = backbone
        self.cls_head = nn.Linear(backbone.cfg.d_model, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.backbone.last_hidden(x)  # (B, d_model): the last position has seen the whole window
        return self.cls_head(h)  # (B, n_classes)


class PatchTSTClassifier(nn.Module):
    """Linear probe on a frozen PatchTST: the last patch embedding of every channel, concatenated."""

    def __init__(self, backbone: PatchTST, n_classes: int):
        super().__init__()
        self.backbone = backbone
        self.backbone.requires_grad_(False)
        self.backbone.eval()
        self.cls_head = nn.Linear(backbone.n_vars * backbone.cfg.d_model, n_classes)

    def train(self, mode: bool = True) -> PatchTSTClassifier:
        # A probe reads fixed features: the frozen encoder never runs with dropout.
        super().train(mode)
        self.backbone.eval()
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            z = self.backbone.encode(x)  # (B, C, N, d)
        features = z[:, :, -1, :].flatten(1)  # (B, C * d)
        return self.cls_head(features)  # (B, n_classes)


def init_head_at_prior(head: nn.Linear, logits: np.ndarray | None) -> None:
    """Zero weights and bias ``logits``: the head predicts the prior whatever its input, so a model that learns
    nothing scores a skill of exactly 0 against the base rates (a random head scores well below it)."""
    if logits is None:
        return
    with torch.no_grad():
        head.weight.zero_()
        head.bias.copy_(torch.as_tensor(logits, dtype=head.bias.dtype))


def inject_lora(
    classifier: SequenceClassifier,
    rank: int,
    alpha: float,
    dropout: float,
    layers: Sequence[int] = (0, 1, 3),
) -> peft.PeftModel:
    """Freeze the classifier's backbone and add LoRA adapters (W' = W + (alpha / r) B A) to ``layers``: the
    modules the backbone names (``lora_targets``; a backbone with ``last_hidden`` and ``lora_targets`` serves).

    Only the adapters and ``cls_head`` (a module PEFT saves in full) stay trainable. The result saves
    and loads with PEFT's own ``save_pretrained`` / ``PeftModel.from_pretrained``.
    """
    import peft  # imported here: it pulls in transformers, seconds that plain model use should not pay

    targets = [f"backbone.{name}" for name in classifier.backbone.lora_targets(layers)]  # the backbone's own
    config = peft.LoraConfig(
        r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, modules_to_save=["cls_head"]
    )
    model = peft.get_peft_model(classifier, config)
    for name, param in model.named_parameters():
        assert param.requires_grad == ("lora_" in name or "cls_head.modules_to_save" in name), name
    return model


class LoraHead:
    """PEFT LoRA on the GPT backbone's layers + a classification head, saved in PEFT's own format."""

    layout = LORA_HEAD

    def build(self, backbone: KinematicGPT, cfg: TrainConfig, width: int, prior: np.ndarray | None = None) -> nn.Module:
        classifier = SequenceClassifier(backbone, width)
        init_head_at_prior(classifier.cls_head, prior)  # before PEFT copies the head into modules_to_save
        return inject_lora(classifier, cfg.lora_rank, cfg.lora_alpha, cfg.lora_dropout, cfg.lora_layers)

    def save(self, classifier: nn.Module, adapter_dir: Path, variant: str, task: str) -> list[Path]:
        """PEFT writes a folder: staged beside the head's path and renamed in whole, so that a link planted at
        the path (or in the old folder) is replaced, never written through."""
        path = self.layout.path(adapter_dir)
        for stale in Path(adapter_dir).glob(f".{path.name}.*"):  # left by a save that was killed: repair
            shutil.rmtree(stale, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(dir=adapter_dir, prefix=f".{path.name}."))
        try:
            staging.chmod(0o777 & ~UMASK)  # mkdtemp's 0700 would become the folder's: the user's umask decides
            classifier.save_pretrained(staging)
            _sort_target_modules(staging / "adapter_config.json")
            if path.is_symlink():
                path.unlink()
            else:
                shutil.rmtree(path, ignore_errors=True)
            os.rename(staging, path)
        finally:
            shutil.rmtree(staging, ignore_errors=True)  # after the rename: nothing
        return without_sidecars(self.layout.files(adapter_dir))

    def check(self, adapter_dir: Path, cfg: TrainConfig, fix: str) -> None:
        """The adapter's own record of its LoRA (PEFT's ``adapter_config.json``: rank, alpha, dropout) against the
        settings it is loaded under: each finite and equal, or one ``ValueError`` naming the file, the values and
        ``fix`` (an alpha of 1e6 would scale every delta silently; NaN would fail in PEFT with an unrelated message)."""
        path = self.layout.path(adapter_dir) / "adapter_config.json"
        record = json.loads(path.read_text())
        expected = {"r": cfg.lora_rank, "lora_alpha": cfg.lora_alpha, "lora_dropout": cfg.lora_dropout}
        wrong = [
            f"{key}={record.get(key)!r} (the settings' {value!r})"
            for key, value in expected.items()
            if not (_finite_number(record.get(key)) and record[key] == value)
        ]
        if wrong:
            raise ValueError(f"{path} records {', '.join(wrong)}: {fix}")

    def load(self, backbone: KinematicGPT, adapter_dir: Path, width: int) -> nn.Module:
        import peft

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*could not find a config file in.*")  # our own base model
            return peft.PeftModel.from_pretrained(SequenceClassifier(backbone, width), self.layout.path(adapter_dir))


def for_inference(classifier: nn.Module) -> nn.Module:
    """A copy of ``classifier`` to predict with, in eval mode: a PEFT model's LoRA deltas merged into its base
    weights (W + BA once, not a second product per layer per batch: twice the windows a second on one thread,
    the same probabilities to float32 rounding); any other module as it is. The argument is left untouched."""
    import copy

    import peft

    if isinstance(classifier, peft.PeftModel):
        return copy.deepcopy(classifier).merge_and_unload().eval()
    return classifier.eval()


class ProbeHead:
    """A linear probe on the frozen PatchTST encoder; its trainable weights saved in one ``head.pt``."""

    layout = PROBE_HEAD

    def check(self, adapter_dir: Path, cfg: TrainConfig, fix: str) -> None:
        """Nothing to check beyond its file's hash: a probe's head has no settings of its own."""

    def build(self, backbone: PatchTST, cfg: TrainConfig, width: int, prior: np.ndarray | None = None) -> nn.Module:
        classifier = PatchTSTClassifier(backbone, width)
        init_head_at_prior(classifier.cls_head, prior)
        return classifier

    def save(self, classifier: nn.Module, adapter_dir: Path, variant: str, task: str) -> list[Path]:
        head = {n: p.detach().cpu() for n, p in classifier.named_parameters() if p.requires_grad}
        buffer = io.BytesIO()  # saved in memory, written whole: a rename over the path, never through a link
        torch.save({"variant": variant, "task": task, "state_dict": head}, buffer)
        write_bytes_atomic(self.layout.path(adapter_dir), buffer.getvalue())
        return without_sidecars(self.layout.files(adapter_dir))

    def load(self, backbone: PatchTST, adapter_dir: Path, width: int) -> nn.Module:
        path = self.layout.path(adapter_dir)
        saved = torch.load(path, map_location="cpu", weights_only=True)
        classifier = PatchTSTClassifier(backbone, width)
        missing, unexpected = classifier.load_state_dict(saved["state_dict"], strict=False)
        if unexpected or set(saved["state_dict"]) & set(missing):
            raise ValueError(f"{path} does not fit a PatchTST probe: unexpected keys {unexpected}")
        return classifier


def _finite_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# The registry's head kinds, by ``HeadLayout.kind``: each builds and loads a head ``width`` wide (``Task.head_width``).
HEADS = {"lora": LoraHead(), "probe": ProbeHead()}


def _sort_target_modules(config_path: Path) -> None:
    """PEFT keeps target_modules as a set and writes it in hash order, which changes from process to process
    (PYTHONHASHSEED): sort it, in PEFT's own JSON layout, so the same training gives the same bytes."""
    config = json.loads(config_path.read_text())
    if isinstance(config.get("target_modules"), list):
        config["target_modules"] = sorted(config["target_modules"])
        write_text_atomic(config_path, json.dumps(config, indent=2, sort_keys=True))


def count_parameters(module: nn.Module) -> tuple[int, int]:
    """(total, trainable) parameter counts."""
    params = list(module.parameters())
    return sum(p.numel() for p in params), sum(p.numel() for p in params if p.requires_grad)
