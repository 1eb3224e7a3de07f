"""The three decision rules of a Buy/Sell/Hold policy, each an object with ``actions(predictions, validation)``.

- ``PaperArgmax``: the argmax of the network's own softmax (``SOFTMAX_COLUMNS``, never calibrated), exactly as the
  paper trades ("the model predicts g_t = Buy": its top class).
- ``CalibratedArgmax``: the argmax of the calibrated class-weighted probabilities q' ∝ w ⊙ p (the stored ``action``;
  from the stored p it applies the weights itself): the weighting still sets the bar Buy must clear
  (``decisions.buy_threshold``).
- ``MarginRule``: Buy when p_buy - p_sell > m of the stored (de-weighted) p, Sell when it is < -m, else Hold; m is
  chosen on the validation days only (``choose_margin``), never on a test day.

The predictions store p (``PROB_COLUMNS``, de-weighted and calibrated) and the network's softmax; a rule that
decides on the weighted q applies the task's class weights itself. A rule reads only the columns named here; it
never asks which family made the predictions. No dagster, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import polars as pl

from kinematic_pipeline.backtest.skill import balanced_accuracy
from kinematic_pipeline.tasks.actions import (
    BUY,
    HOLD,
    PROB_COLUMNS,
    SELL,
    SOFTMAX_COLUMNS,
    check_labels,
    check_probabilities,
    class_weight_vector,
    stored_probabilities,
)
from kinematic_pipeline.tasks.base import DecisionRule

MARGIN_GRID = tuple(round(0.01 * k, 2) for k in range(51))  # m = 0.00, 0.01, ..., 0.50 for choose_margin


def threshold_actions(p, margin: float) -> np.ndarray:
    """Buy where p_buy - p_sell > margin, Sell where it is < -margin, else Hold: int8 codes, shape (n,)."""
    p = check_probabilities(p)
    if not (np.isfinite(margin) and margin >= 0):
        raise ValueError(f"margin must be a finite number >= 0, got {margin}")
    edge = p[:, BUY] - p[:, SELL]
    actions = np.full(edge.shape, HOLD, dtype=np.int8)
    actions[edge > margin] = BUY
    actions[edge < -margin] = SELL
    return actions


def margin_scores(p_val, labels_val, grid=MARGIN_GRID) -> np.ndarray:
    """Balanced accuracy of ``threshold_actions(p_val, m)`` against ``labels_val`` for each m of the grid."""
    labels = check_labels(labels_val)
    p = check_probabilities(p_val, labels.size)
    if not (labels >= 0).any():
        raise ValueError("choose_margin: no known validation label")
    return np.array([balanced_accuracy(threshold_actions(p, float(m)), labels) for m in grid])


def choose_margin(p_val, labels_val, grid=MARGIN_GRID) -> float:
    """The m of ``grid`` whose threshold rule has the highest balanced accuracy on the validation rows.

    Only validation-day inputs enter (unweighted probabilities p_val (n, 3), labels (n,), -1 ignored), so
    test days cannot leak into m. Balanced accuracy (mean recall over Buy, Sell, Hold) rather than a
    trading criterion: it scores the decision the rule makes, is blind to the class mix (a constant
    policy scores 1/3 however common its class), and does not depend on the market's drift over the
    validation weeks, which a long/cash return criterion rewards by buying always. Ties go to the largest
    m (the fewest trades). Deterministic: a fixed grid, no randomness.
    """
    grid = np.asarray(grid, dtype=np.float64)
    if grid.ndim != 1 or grid.size == 0:
        raise ValueError("grid must be a non-empty 1-D sequence of margins")
    scores = margin_scores(p_val, labels_val, grid)
    best = np.flatnonzero(scores == np.nanmax(scores))
    return float(np.max(grid[best]))


def _columns(frame: pl.DataFrame, columns: tuple[str, ...]) -> np.ndarray:
    return frame.select(columns).to_numpy().astype(np.float64)


@dataclass(frozen=True)
class PaperArgmax(DecisionRule):
    """The paper's rule: the argmax of the network's own softmax, trained with ``class_weights``."""

    class_weights: tuple[float, float, float]
    name: ClassVar[str] = "paper"

    def actions(self, predictions: pl.DataFrame, validation: pl.DataFrame | None = None) -> np.ndarray:
        missing = [c for c in SOFTMAX_COLUMNS if c not in predictions.columns]
        if missing:
            raise ValueError(
                f"the predictions hold no {', '.join(missing)} (the model's own softmax): written before it was "
                "stored, re-materialize the predictions"
            )
        return predictions.select(SOFTMAX_COLUMNS).to_numpy().argmax(axis=1).astype(np.int8)

    def decide(self, predictions: pl.DataFrame, validation: pl.DataFrame | None = None) -> pl.DataFrame:
        """The predictions under the paper's rule: the probabilities the sweep scores are the softmax it trades,
        de-weighted (uncalibrated p)."""
        actions = self.actions(predictions)
        p = stored_probabilities(predictions.select(SOFTMAX_COLUMNS).to_numpy(), self.class_weights)
        return predictions.with_columns(
            *[pl.Series(name, p[:, k], dtype=pl.Float64) for k, name in enumerate(PROB_COLUMNS)],
            pl.Series("action", actions, dtype=pl.Int8),
        )


@dataclass(frozen=True)
class CalibratedArgmax(DecisionRule):
    """The argmax of the calibrated class-weighted probabilities q' ∝ w ⊙ p: the weights applied to the stored p
    (the predictions' own ``action`` is this argmax, taken on q' itself when they were made)."""

    class_weights: tuple[float, float, float]
    name: ClassVar[str] = "calibrated"

    def actions(self, predictions: pl.DataFrame, validation: pl.DataFrame | None = None) -> np.ndarray:
        weighted = _columns(predictions, PROB_COLUMNS) * class_weight_vector(self.class_weights)
        return weighted.argmax(axis=1).astype(np.int8)


@dataclass(frozen=True)
class MarginRule(DecisionRule):
    """Trade beyond a margin m of the stored (de-weighted) p_buy - p_sell, m chosen on the validation days."""

    grid: tuple[float, ...] = MARGIN_GRID
    name: ClassVar[str] = "margin"

    def margin(self, validation: pl.DataFrame | None) -> tuple[float, int]:
        """(m, the labelled validation rows it was chosen on); m = 0 without one."""
        labelled = validation.filter(pl.col("label") >= 0) if validation is not None else None
        if labelled is None or labelled.height == 0:
            return 0.0, 0
        p_val = _columns(labelled, PROB_COLUMNS)
        return choose_margin(p_val, labelled["label"].to_numpy(), self.grid), labelled.height

    def actions(self, predictions: pl.DataFrame, validation: pl.DataFrame | None = None) -> np.ndarray:
        return self.at(predictions, self.margin(validation)[0])

    def at(self, predictions: pl.DataFrame, margin: float) -> np.ndarray:
        """The actions at a margin already chosen (the pooled records': each fold's own m)."""
        return threshold_actions(_columns(predictions, PROB_COLUMNS), margin)
