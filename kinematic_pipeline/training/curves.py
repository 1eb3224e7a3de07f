"""A training run's learning curve (``curves.csv`` beside its weights) and its step budget: what the report reads,
without importing torch or Lightning (~5 s in a process that trains nothing: the report's)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from kinematic_pipeline.config import Settings, TrainConfig
from kinematic_pipeline.model_pins import parent_foundation
from kinematic_pipeline.policy import Policy

CURVES_FILE = "curves.csv"  # the learning curve of a training run, beside its weights
CURVE_COLUMNS = (
    "step",
    "epoch",
    "windows",
    "lr",
    "lr_fraction",  # of the peak rate after this step (the schedule's: modules.LRSchedule); 0 once annealed
    "train_loss",
    "val_loss",
    "val_weighted_loss",
    "val_acc",
    "best",
)


def read_curves(out_dir: Path) -> list[dict]:
    """The learning curve ``BestState`` wrote (one row per validation; [] when the run had no validation)."""
    path = Path(out_dir) / CURVES_FILE
    if not path.exists():
        return []
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        row.setdefault("lr_fraction", "nan")  # a curve written before the column
        for key in CURVE_COLUMNS:
            row[key] = (
                row[key] == "True"
                if key == "best"
                else int(row[key])
                if key in ("step", "epoch", "windows")
                else float(row[key])
            )
    return rows


def budget_steps(cfg: TrainConfig, budget: int) -> int:
    """The step budget rounded up to whole validation intervals (the last steps are always validated)."""
    return max(1, math.ceil(budget / cfg.eval_every)) * cfg.eval_every


def pretrain_budget(settings: Settings, policy: Policy) -> int:
    """The pretraining budget of the policy's foundation: its variant's from scratch (``train.steps_for``),
    and ``train.warm_start_steps`` (None: the same) when it continues from the previous fold's
    (``model_pins.parent_foundation``)."""
    cfg = settings.train
    if parent_foundation(settings, policy.foundation) is None or cfg.warm_start_steps is None:
        return cfg.steps_for(policy.variant.name, "pretrain")
    return cfg.warm_start_steps
