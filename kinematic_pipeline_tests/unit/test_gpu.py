"""The paper-size models on a CUDA device: the same numbers as on the CPU, causal there too, and trainable in the
mixed precision the paper profile uses (``train.precision = "bf16-mixed"`` on a GPU).

Marked ``gpu`` (deselected by default; run with ``-m gpu``) and skipped where no CUDA device is present, as
lightning-hydra-template's ``RunIf(min_gpus=1)`` does: a skip, not a silent pass.
"""

from __future__ import annotations

import math

import pytest
import torch

from kinematic_pipeline.config import GPTConfig, PatchTSTConfig
from kinematic_pipeline.models import PatchTST, SequenceClassifier, inject_lora
from kinematic_pipeline.models.gpt import KinematicGPT
from kinematic_pipeline.tasks.buy_sell_hold import weighted_cross_entropy

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

PAPER = GPTConfig(dropout=0.0)  # the paper's shape (512 wide, 4 layers, 8 heads, 64 tokens), deterministic


@pytest.fixture(autouse=True)
def exact_float32():
    """fp32 matmuls in full precision (no TF32) while a test runs, so that the CPU comparison is meaningful."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def _tokens(batch: int, channels: int = PAPER.n_channels, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, PAPER.context, channels, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    ("backbone", "cfg", "channels"),
    [(KinematicGPT, PAPER, PAPER.n_channels), (PatchTST, PatchTSTConfig(dropout=0.0), 2)],
)
def test_a_paper_size_backbone_gives_the_cpus_numbers_on_the_gpu(backbone, cfg, channels):
    """The GPT's outputs, PatchTST's patch embeddings (ln close, ln volume windows)."""
    torch.manual_seed(0)
    model = backbone(cfg).eval()
    run = model if backbone is KinematicGPT else model.encode
    x = _tokens(16, channels)
    with torch.no_grad():
        cpu = run(x)
        model.cuda()
        gpu = run(x.cuda()).cpu()
    torch.testing.assert_close(gpu, cpu, rtol=1e-4, atol=1e-4)


def test_the_gpt_is_causal_on_the_gpu_in_bf16():
    torch.manual_seed(0)
    model, x = KinematicGPT(PAPER).eval().cuda(), _tokens(8).cuda()
    t = PAPER.context // 2
    changed = x.clone()
    changed[:, t + 1 :] = torch.randn_like(changed[:, t + 1 :]) * 5
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        a, b = model(x), model(changed)
    torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1], rtol=0, atol=0)
    assert not torch.equal(a[:, t + 1 :], b[:, t + 1 :])


def test_bf16_mixed_fine_tuning_of_lora_lowers_the_loss_on_a_fixed_batch():
    torch.manual_seed(0)
    model = inject_lora(SequenceClassifier(KinematicGPT(PAPER), 3), rank=8, alpha=16, dropout=0.0).cuda()
    x = _tokens(64, seed=1).cuda()
    labels = torch.randint(0, 3, (64,), generator=torch.Generator().manual_seed(2)).cuda()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)

    def loss() -> torch.Tensor:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return weighted_cross_entropy(model(x).float(), labels)

    first = loss().item()
    for _ in range(60):
        opt.zero_grad()
        step = loss()
        step.backward()
        opt.step()
    last = loss().item()
    assert math.isfinite(last) and last < 0.5 * first, (first, last)
