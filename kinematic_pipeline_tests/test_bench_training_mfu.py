"""The MFU benchmark counts what it claims: a training step's FLOPs (forward + backward) from
``torch.utils.flop_counter``, equal to the analytic count of a linear layer, and a square matmul's peak."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench_training_mfu import matmul_peak, step_flops  # noqa: E402


class _Linear(torch.nn.Module):
    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(n_in, n_out, bias=False)

    def pretrain_loss(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x).sum()


def test_a_steps_flops_are_the_analytic_count_of_forward_and_backward():
    batch, n_in, n_out = 32, 48, 40
    model = _Linear(n_in, n_out)
    x = torch.randn(batch, n_in, requires_grad=False)
    # forward 2*B*in*out; backward: the weight's gradient 2*B*in*out (no input gradient: x needs none)
    assert step_flops(model, x) == 4 * batch * n_in * n_out
    assert model.layer.weight.grad is None  # the counted step leaves no gradient behind


def test_the_matmul_peak_is_a_rate():
    assert 1e6 < matmul_peak(torch.float32, 128, 1) < 1e15
