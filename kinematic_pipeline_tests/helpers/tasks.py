"""A regression task defined in the tests alone (no package file edited): the log of next week's variance, trained on
QLIKE. The fast tests (``unit/test_regression_task.py``) and the ci-warehouse test (``e2e/golden/test_second_task.py``)
register it as a family of its own (``register_log_variance``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import polars as pl
import torch

from kinematic_pipeline.tasks.base import Task
from kinematic_pipeline.tasks.registry import TASK_FAMILIES

FLOOR = 1e-10  # a variance below it (a run of unchanged closes) is floored: its log stays finite


@dataclass(frozen=True)
class LogVariance(Task):
    """ln of the mean squared log return over the next ``horizon`` sessions; NaN until they are known."""

    kind: ClassVar[str] = "logvar"
    horizon: ClassVar[int] = 5
    outputs: ClassVar[tuple[str, ...]] = ("log_variance",)
    head_width: ClassVar[int] = 1
    target_dtype: ClassVar[type[pl.DataType]] = pl.Float32

    @property
    def key(self) -> str:
        return f"logvar{self.horizon}"

    def target(self, forward: np.ndarray) -> np.ndarray:
        return np.log(np.maximum(np.mean(np.asarray(forward, dtype=np.float64) ** 2, axis=1), FLOOR))

    def loss(self, logits, target):
        """QLIKE of the forecast variance exp(logit) against the realized exp(target), zero at logit = target."""
        known = torch.isfinite(target)
        gap = target[known] - logits[:, 0][known]
        return (torch.exp(gap) - gap - 1.0).mean() if bool(known.any()) else logits.sum() * 0.0

    val_loss = loss

    def summary(self, targets: np.ndarray) -> dict:
        return {"rows": int(len(targets)), "mean_variance": float(np.mean(np.exp(np.asarray(targets, np.float64))))}

    def prior(self, summary: dict) -> np.ndarray:
        return np.array([np.log(summary["mean_variance"])])  # the constant that minimises QLIKE on the training rows

    def outputs_of(self, logits) -> np.ndarray:
        return logits.float().numpy()

    def evaluated_by(self, variant, settings) -> bool:
        return variant.family == "model"  # the fine-tuned transformers; a probe or a rule here classifies

    def evidence_titles(self) -> dict[str, str]:
        return {"qlike": "QLIKE of each forecaster's variance against the realized (lower is better)"}

    def evidence(self, settings, predictions: pl.DataFrame) -> dict[str, pl.DataFrame]:
        known = predictions.filter(pl.col("label").is_finite())
        gap = pl.col("label") - pl.col("log_variance")
        qlike = (gap.exp() - gap - 1.0).mean().alias("qlike")
        return {"qlike": known.group_by("variant").agg(qlike, pl.len().alias("rows")).sort("variant")}


def register_log_variance(monkeypatch) -> None:
    """``LogVariance`` registered as the family ``logvar`` (``tokenize.tasks`` may name it) for one test."""
    monkeypatch.setitem(TASK_FAMILIES, LogVariance.kind, lambda settings: (LogVariance(),))
