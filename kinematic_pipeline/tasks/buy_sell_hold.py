"""The paper's task: Buy/Sell/Hold at a threshold tau, learnt with class-weighted cross-entropy.

Labels ("Training Objectives & Labeling"): g_j = Buy (0) if r_j > tau, Sell (1) if r_j < -tau, else Hold (2);
r_j == +-tau is Hold; a return not known yet (its next bar does not exist) or not defined gives -1. r_j is the next
session's return (``targets.py``), so the horizon is 1.

The head has three outputs and learns with weighted cross-entropy w = [w_buy, w_sell, w_hold] (paper [2, 10, 1]),
so its softmax approximates q_i ∝ w_i p_i; it starts at the weighted prior ln(w * pi) (``prior``). Its outputs,
as the predictions store them, are p = (q/w)/sum(q/w) calibrated (``PROB_COLUMNS``) and the network's own q
(``SOFTMAX_COLUMNS``), with w in the predictions' record; its decisions are the three rules of ``rules.py``, which
apply w where they decide on q.

tau, the task's one parameter besides w, has its one home here: how a tau is spelled as a partition key and
folder (``tau_key``), as a labels column (``tau_column``), and how two taus read back from keys, columns or SQL
compare (``same_tau``, ``at_tau``, ``TAU_SQL``): one tolerance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import polars as pl

from kinematic_pipeline.backtest.calibration import calibrate_frames
from kinematic_pipeline.tasks.actions import (
    ACTION_KEYS,
    BUY,
    HOLD,
    PROB_COLUMNS,
    SELL,
    SOFTMAX_COLUMNS,
    UNKNOWN_LABEL,
    class_weight_vector,
    stored_probabilities,
    unweighted_probabilities,
)
from kinematic_pipeline.tasks.base import DecisionRule, Task
from kinematic_pipeline.tasks.rules import CalibratedArgmax, MarginRule, PaperArgmax

PAPER_CLASS_WEIGHTS = (2.0, 10.0, 1.0)  # [Buy, Sell, Hold]: the paper's w
TAU_TOLERANCE = 1e-12  # two taus are the same when they differ by less (floats read back from text)
TAU_SQL = f"abs(tau - ?) < {TAU_TOLERANCE}"  # the same comparison in the catalog's SQL (one ? for the tau)


def tau_key(tau: float) -> str:
    """A tau as partition keys, folders and file stems spell it: ``0.01``, ``0.0025``."""
    return f"{float(tau):g}"


def tau_column(tau: float) -> str:
    """The labels column of threshold ``tau``: ``label_tau_0p0025`` for tau = 0.0025."""
    return "label_tau_" + f"{float(tau):.4f}".replace(".", "p")


def same_tau(a: float, b: float) -> bool:
    return abs(float(a) - float(b)) < TAU_TOLERANCE


def at_tau(tau: float, column: str = "tau") -> pl.Expr:
    """Rows whose ``column`` is ``tau`` (null never matches)."""
    return ((pl.col(column) - float(tau)).abs() < TAU_TOLERANCE).fill_null(False)


def labels_from_returns(r, tau: float) -> np.ndarray:
    """int8 labels: 0 Buy (r > tau), 1 Sell (r < -tau), 2 Hold (otherwise), -1 where r is NaN."""
    tau = float(tau)
    if not (np.isfinite(tau) and tau >= 0):
        raise ValueError(f"tau must be finite and >= 0, got {tau!r}")
    r = np.asarray(r, dtype=np.float64)
    if np.isinf(r).any():
        raise ValueError("r has infinite values")
    labels = np.full(r.shape, HOLD, dtype=np.int8)
    labels[r > tau] = BUY
    labels[r < -tau] = SELL
    labels[np.isnan(r)] = UNKNOWN_LABEL
    return labels


def prior_logits(class_counts: dict[str, int] | Sequence[int], class_weights: Sequence[float]) -> np.ndarray:
    """ln(w * pi): the logits whose weighted softmax q de-weights to the training base rates pi exactly, i.e. the
    optimum of the weighted cross entropy for a model that knows nothing. pi is smoothed by one count per class
    (a class never seen keeps a finite logit)."""
    counts = np.asarray(list(class_counts.values()) if isinstance(class_counts, dict) else class_counts, float)
    if counts.shape != (len(class_weights),) or (counts < 0).any():
        raise ValueError(f"class counts {class_counts} do not fit the class weights {class_weights}")
    pi = (counts + 1.0) / (counts.sum() + len(counts))
    return np.log(np.asarray(class_weights, dtype=np.float64) * pi)


def weighted_cross_entropy(logits, labels, class_weights: Sequence[float] = PAPER_CLASS_WEIGHTS):
    """Class-weighted CE over logits (B, n_classes) and labels (B,) (torch tensors); label -1 (unknown) is ignored."""
    import torch  # the task is read where torch is not: only a training step gets here
    import torch.nn.functional as F

    assert logits.shape[-1] == len(class_weights), "one weight per class"
    labels = labels.long()
    if not bool((labels != UNKNOWN_LABEL).any()):
        return logits.sum() * 0.0  # a batch with no known label contributes nothing (not NaN)
    weight = torch.as_tensor(class_weights, dtype=logits.dtype, device=logits.device)
    return F.cross_entropy(logits, labels, weight=weight, ignore_index=UNKNOWN_LABEL)


# What the predictions asset stores for Buy/Sell/Hold (one row per policy, ticker and test day): the input of
# ``backtest.sweep.run_sweep``.
PREDICTIONS_SCHEMA: dict[str, pl.DataType] = {
    "variant": pl.String,
    "tau": pl.Float64,
    "seed": pl.Int64,
    "ticker": pl.String,
    "date": pl.Date,
    "close": pl.Float64,  # the day's raw close: the market-on-close fill price
    # p: the de-weighted (calibrated) probabilities, float64 (``tasks.actions.stored_probabilities``); the class
    # weights they were de-weighted with are the predictions' record (predictions/class_weights/)
    "p_buy": pl.Float64,
    "p_sell": pl.Float64,
    "p_hold": pl.Float64,
    "action": pl.Int8,  # the argmax of the (calibrated) softmax q: a code of kinematic_pipeline.variants
    "label": pl.Int8,  # the realized label of day t (needs day t+1; -1 when unknown): evaluation only
    "softmax_buy": pl.Float32,  # the model's own softmax before calibration (the paper's rule's input)
    "softmax_sell": pl.Float32,
    "softmax_hold": pl.Float32,
}


def predictions_frame(
    frame: pl.DataFrame, key: tuple[str, float, int], probs: np.ndarray, label: str, class_weights=None
) -> pl.DataFrame:
    """PREDICTIONS_SCHEMA rows of a policy ``key`` (variant, tau, seed): ``frame``'s ticker, date, close and
    ``label`` column (null: -1), the softmax ``probs`` [n, 3] (Buy, Sell, Hold) as float32, their argmax, and p:
    the float32 softmax de-weighted with the ``class_weights`` it was trained with (None: itself, as a rule's one-hot
    action), sorted."""
    variant, tau, seed = key
    p = stored_probabilities(probs, class_weights)
    return (
        frame.select(
            pl.lit(variant).alias("variant"),
            pl.lit(tau).alias("tau"),
            pl.lit(seed).alias("seed"),
            "ticker",
            "date",
            "close",
            *[pl.Series(name, p[:, k]) for k, name in enumerate(PROB_COLUMNS)],
            pl.Series("action", probs.argmax(axis=1).astype(np.int8)),
            pl.col(label).fill_null(UNKNOWN_LABEL).alias("label"),
            *[pl.Series(name, probs[:, k]) for k, name in enumerate(SOFTMAX_COLUMNS)],
        )
        .cast(PREDICTIONS_SCHEMA)  # type: ignore[arg-type]
        .sort("ticker", "date")
    )


@dataclass(frozen=True)
class BuySellHold(Task):
    """Buy/Sell/Hold at threshold ``tau`` with class weights ``class_weights`` [Buy, Sell, Hold]."""

    tau: float
    class_weights: tuple[float, float, float] = field(default=PAPER_CLASS_WEIGHTS, compare=False)

    kind: ClassVar[str] = "bsh"
    horizon: ClassVar[int] = 1
    outputs: ClassVar[tuple[str, ...]] = PROB_COLUMNS
    head_width: ClassVar[int] = 3

    def __post_init__(self) -> None:
        tau = float(self.tau)
        if not (np.isfinite(tau) and tau >= 0):
            raise ValueError(f"tau must be finite and >= 0, got {self.tau!r}")
        object.__setattr__(self, "tau", tau)
        object.__setattr__(self, "class_weights", tuple(float(w) for w in class_weight_vector(self.class_weights)))

    def __eq__(self, other) -> bool:
        if not isinstance(other, BuySellHold):
            return NotImplemented
        return same_tau(self.tau, other.tau)

    def __hash__(self) -> int:
        return hash((self.kind, self.key))

    @property
    def key(self) -> str:
        return tau_key(self.tau)

    @property
    def stem(self) -> str:
        return f"tau{self.key}"  # splinegpt_tau0.01_seed1234

    @property
    def folder(self) -> str:
        return f"tau={self.key}"  # adapters/tau=0.01

    @property
    def label_column(self) -> str:
        """Its column of the labels asset."""
        return tau_column(self.tau)

    def target(self, forward: np.ndarray) -> np.ndarray:
        return labels_from_returns(np.asarray(forward)[:, 0], self.tau)  # the next session's return

    def loss(self, logits, target):
        return weighted_cross_entropy(logits, target, self.class_weights)

    def val_loss(self, logits, target):
        """Unweighted NLL of the de-weighted probabilities p = (q/w)/sum(q/w), q = softmax(logits): since
        q/w = exp(logits - ln w)/Z, p = softmax(logits - ln w). Rows labelled -1 are ignored."""
        import torch  # the task is read where torch is not: only a validation step gets here
        import torch.nn.functional as F

        log_w = torch.log(torch.as_tensor(self.class_weights, dtype=logits.dtype, device=logits.device))
        if not bool((target != UNKNOWN_LABEL).any()):
            return logits.sum() * 0.0
        return F.cross_entropy(logits - log_w, target.long(), ignore_index=UNKNOWN_LABEL)

    def summary(self, targets: np.ndarray) -> dict:
        """The training split's Buy/Sell/Hold counts (``buy``, ``sell``, ``hold``)."""
        counts = np.bincount(np.asarray(targets, dtype=np.int64), minlength=len(ACTION_KEYS))
        return {name: int(counts[k]) for k, name in enumerate(ACTION_KEYS)}

    def prior(self, summary) -> np.ndarray:
        return prior_logits(summary, self.class_weights)

    @property
    def record(self) -> dict:
        """The class weights [Buy, Sell, Hold] it trains with: what its model's probabilities mean."""
        return {"class_weights": [float(w) for w in self.class_weights]}

    def predictions_frame(self, frame: pl.DataFrame, policy, outputs: np.ndarray, class_weights=None) -> pl.DataFrame:
        """``PREDICTIONS_SCHEMA`` rows of ``policy`` (``predictions_frame``, keyed by its variant, this tau and its
        seed) from ``frame``'s ticker, date, close and this task's label column and the softmax ``outputs``."""
        key = (policy.variant.name, self.tau, policy.seed)
        return predictions_frame(frame, key, outputs, self.label_column, class_weights)

    def deweighted(self, q) -> np.ndarray:
        """p = (q / w) / sum(q / w): the probabilities the weighted softmax q (n, 3) stands for."""
        return unweighted_probabilities(q, self.class_weights)

    @property
    def rules(self) -> tuple[DecisionRule, ...]:
        return (PaperArgmax(self.class_weights), CalibratedArgmax(self.class_weights), MarginRule())

    predictions_folder: ClassVar[str] = ""  # the predictions asset's own folder and view: the paper's task
    predictions_schema: ClassVar[dict[str, pl.DataType]] = PREDICTIONS_SCHEMA

    def calibrate(self, fitting: pl.DataFrame, frames: list, trained) -> tuple[list, object | None]:
        """A temperature and class biases on the weighted logits fitted on ``fitting`` (``backtest.calibration``),
        applied to each frame's softmax, the class weights it was ``trained`` with undone, the action recomputed."""
        return calibrate_frames(fitting, frames, trained)

    def per_ticker(self) -> list[pl.Expr]:
        """Each action's count and the mean p_buy."""
        counts = [(pl.col("action") == code).sum().alias(name) for code, name in enumerate(ACTION_KEYS)]
        return [*counts, pl.col("p_buy").mean().alias("mean_p_buy")]

    def reported(self, settings) -> bool:
        """At ``evaluate.report_tau``: the paper's main tables; the other taus are its sweep."""
        return same_tau(self.tau, settings.evaluate.report_tau)

    def evaluated_by(self, variant, settings) -> bool:
        """Every tau for a variant with ``every_tau`` (the models), a baseline's at ``evaluate.baseline_taus`` (None:
        every tau)."""
        taus = settings.evaluate.baseline_taus
        return variant.every_tau or taus is None or any(same_tau(self.tau, t) for t in taus)
