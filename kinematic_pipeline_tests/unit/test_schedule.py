"""The learning-rate schedules (``training/modules.LRSchedule``, issue 54): the paper's cosine as it always was (a
loop twin of the old formula), and warmup-stable-decay, whose decay starts where validation stalls
(``trainer.BestState``) so that every run anneals to 0 within its budget; each validation records the rate's fraction
of its peak (``curves.csv``'s ``lr_fraction``)."""

from __future__ import annotations

import dataclasses
import math

import lightning as L
import numpy as np
import pytest
import torch

from kinematic_pipeline.config import TrainConfig
from kinematic_pipeline.training.curves import read_curves
from kinematic_pipeline.training.modules import LRSchedule, adamw_with_cosine, follows_schedule, lr_schedule
from kinematic_pipeline.training.trainer import build_trainer, quiet_lightning


def _old_cosine(step: int, total: int, warmup: int) -> float:
    """The schedule before issue 54, as it was written (the ci profile's golden numbers were trained on it)."""
    total = max(1, int(total))
    warmup = max(0, min(int(warmup), total - 1))
    if step < warmup:
        return (step + 1) / (warmup + 1)
    return 0.5 * (1.0 + math.cos(math.pi * min(step - warmup, total - warmup) / (total - warmup)))


@pytest.mark.parametrize(("total", "warmup"), [(300, 15), (200, 10), (8, 0), (20, 4), (1, 0), (5, 9)])
def test_the_cosine_is_the_old_formula_bit_for_bit(total, warmup):
    schedule = LRSchedule(total, warmup)
    assert all(schedule(s) == _old_cosine(s, total, warmup) for s in range(total + 3))
    assert schedule.end == total and schedule.kind == "cosine"


def _wsd_twin(step: int, warmup: int, start: int, decay: int) -> float:
    """Warmup-stable-decay written out: the ramp, the plateau, the line to zero, zero after."""
    if step < warmup:
        rate = (step + 1) / (warmup + 1)
        return min(rate, max(0.0, (start + decay - step) / decay))
    if step <= start:
        return 1.0
    return max(0.0, 1.0 - (step - start) / decay)


def test_wsd_holds_the_peak_then_anneals_to_zero_by_the_budget_and_earlier_when_told():
    schedule = LRSchedule(100, warmup=5, kind="wsd", decay=20)
    assert (schedule.decay_start, schedule.end) == (80, 100)
    assert all(schedule(s) == pytest.approx(_wsd_twin(s, 5, 80, 20), abs=1e-15) for s in range(105))
    assert schedule(50) == 1.0 and schedule(90) == pytest.approx(0.5) and schedule(100) == 0.0
    schedule.start_decay(40)  # validation stalled at step 40: decay from there
    assert (schedule.decay_start, schedule.end) == (40, 60)
    assert all(schedule(s) == pytest.approx(_wsd_twin(s, 5, 40, 20), abs=1e-15) for s in range(105))
    schedule.start_decay(55)  # a later stall never postpones it
    assert schedule.end == 60
    late = LRSchedule(100, warmup=5, kind="wsd", decay=20)
    late.start_decay(95)  # after the planned start: the planned decay goes on
    assert late.end == 100


def test_a_runs_decay_is_whole_validation_intervals_of_its_budget():
    cfg = TrainConfig(eval_every=25, decay_fraction=0.2)
    assert (lr_schedule(cfg, 1600).decay, lr_schedule(cfg, 300).decay, lr_schedule(cfg, 100).decay) == (325, 50, 25)
    assert lr_schedule(dataclasses.replace(cfg, schedule="cosine"), 1600).kind == "cosine"
    with pytest.raises(ValueError, match="train.schedule"):
        TrainConfig(schedule="linear")
    with pytest.raises(ValueError, match="decay fraction in \\(0, 1\\]"):
        TrainConfig(decay_fraction=0.0)


class _Plateau(L.LightningModule):
    """A one-weight regression whose validation loss is planted: it improves until step ``stall`` and never after, so
    the schedule's response to a stall is all that varies."""

    def __init__(self, cfg: TrainConfig, total: int, stall: int) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1, 1))
        self.cfg, self.total, self.stall = cfg, total, stall
        self.lr_schedule = lr_schedule(cfg, total)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return ((x @ self.w - y) ** 2).mean()

    def validation_step(self, batch, batch_idx):
        self.log("val/loss", 1.0 / (1.0 + min(self.global_step, self.stall)), on_epoch=True, batch_size=1)

    def configure_optimizers(self):
        optimizer, schedule = adamw_with_cosine(
            list(self.named_parameters()), 1e-2, 0.0, self.total, schedule=self.lr_schedule
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def _fit(tmp_path, kind: str, stall: int, total: int = 200):
    cfg = TrainConfig(eval_every=10, patience=3, schedule=kind, decay_fraction=0.2, warmup_fraction=0.05)
    x = torch.randn(64, 1)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, 2 * x), batch_size=8)
    module = _Plateau(cfg, total, stall)
    with quiet_lightning(False):
        trainer, _, _ = build_trainer(cfg, tmp_path, total, has_val=True, progress=False, patience=cfg.patience)
        trainer.fit(module, train_dataloaders=data, val_dataloaders=data)
    return trainer, read_curves(tmp_path), module


def test_wsd_starts_its_decay_at_the_stall_and_ends_annealed_where_the_cosine_stopped_with_most_of_its_rate(tmp_path):
    # improving to step 50, then 3 validations without a better loss: the stall is seen at step 80
    trainer, curves, module = _fit(tmp_path / "wsd", "wsd", stall=50)
    steps = [r["step"] for r in curves]
    assert module.lr_schedule.decay_start == 80 and trainer.global_step == steps[-1] == 80 + 40  # 20% of 200
    assert curves[-1]["lr_fraction"] == 0.0 and curves[-1]["lr"] == pytest.approx(0.0, abs=1e-15)
    plateau = [r["lr_fraction"] for r in curves if 10 <= r["step"] <= 80]
    assert plateau == [1.0] * len(plateau)  # the peak held until the stall
    assert np.all(np.diff([r["lr_fraction"] for r in curves if r["step"] >= 80]) < 0)
    assert [r["step"] for r in curves if r["best"]] == [50]  # the best state is still the one kept
    trainer, curves, _ = _fit(tmp_path / "cos", "cosine", stall=50)
    assert trainer.global_step == curves[-1]["step"] == 80 and curves[-1]["lr_fraction"] > 0.6  # stopped hot


def test_without_a_stall_wsd_decays_over_the_budgets_last_fifth_and_runs_it_all(tmp_path):
    trainer, curves, module = _fit(tmp_path, "wsd", stall=10**6)
    assert (module.lr_schedule.decay_start, trainer.global_step) == (160, 200)
    assert curves[-1]["step"] == 200 and curves[-1]["lr_fraction"] == 0.0 and curves[-1]["best"]


def test_a_curve_follows_the_schedule_of_its_own_budget_only(tmp_path):
    """``follows_schedule`` (what ``bench_budget --reuse-warehouse`` checks before it takes a warehouse model as a
    1x run): a run's curve replays under its own budget, stall included, and under no other budget."""
    for kind in ("wsd", "cosine"):
        _, curves, module = _fit(tmp_path / kind, kind, stall=50)
        assert follows_schedule(curves, module.cfg, 200), kind
        assert not follows_schedule(curves, module.cfg, 400) and not follows_schedule(curves, module.cfg, 100), kind
    _, curves, module = _fit(tmp_path / "again", "wsd", stall=50)
    cfg = module.cfg
    assert not follows_schedule(curves, dataclasses.replace(cfg, patience=4), 200)  # its decay would start later
    bent = [dict(r) for r in curves]
    bent[3]["lr_fraction"] *= 1.0 + 1e-6  # one validation's rate off
    assert not follows_schedule(bent, cfg, 200)
    _, unstalled, _ = _fit(tmp_path / "long", "wsd", stall=10**6)
    assert follows_schedule(unstalled, cfg, 200) and not follows_schedule(unstalled, cfg, 200, continued=True)


def _verdict_twin(one, two):
    """The budget test written out seed by seed."""
    n = len(one)
    diff = sum(b - a for a, b in zip(one, two)) / n

    def sd(xs):
        m = sum(xs) / n
        return math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))

    spread = max(sd(one), sd(two))
    return diff, spread, abs(diff) <= spread


@pytest.mark.parametrize(
    ("one", "two", "passes", "side"),
    [
        ([0.80, 0.81, 0.79], [0.801, 0.805, 0.795], True, None),  # doubling moves it less than a seed does
        ([0.80, 0.81, 0.79], [0.70, 0.71, 0.69], False, "lower"),  # the budget stops short
        ([0.80, 0.81, 0.79], [0.90, 0.91, 0.89], False, "higher"),  # worse at 2x fails too: two-sided
        ([0.50, 0.52], [0.49, 0.53], True, None),
    ],
)
def test_the_budget_test_is_two_sided_against_the_seeds_spread(one, two, passes, side):
    from kinematic_pipeline.training.budget import budget_verdict

    got = budget_verdict(one, two)
    diff, spread, ok = _verdict_twin(one, two)
    assert got.difference == pytest.approx(diff, abs=1e-15) and got.spread == pytest.approx(spread, rel=1e-12)
    assert got.passes is ok is passes and got.seeds == len(one)
    assert got.reason.startswith("passes" if passes else f"fails: twice the budget ends {side}")


def test_the_budget_test_needs_two_seeds_and_finite_losses():
    from kinematic_pipeline.training.budget import budget_verdict

    with pytest.raises(ValueError, match=">= 2 seeds"):
        budget_verdict([0.8], [0.7])
    with pytest.raises(ValueError, match=">= 2 seeds"):
        budget_verdict([0.8, 0.7], [0.7])
    with pytest.raises(ValueError, match="not finite"):
        budget_verdict([0.8, float("nan")], [0.7, 0.7])
