"""What every task is: the object a fine-tuned ``Policy`` holds, and the decision rules a task's predictions feed.

A ``Task`` answers what the stages used to look up by name: its part of the partition key and the folders
(``key``), how many sessions ahead its target reads (``horizon``: the labels' inputs and the purge), the target from
the day's returns (``target``), the prediction columns it stores (``outputs``), its head's width, loss and prior,
how its network's outputs become what it stores (``outputs_of``), and how those decide (``rules``: none for a
forecast, whose predictions take no action). lightning-hydra-template's ``MNISTLitModule`` is the shape: the
backbone is injected, the task owns the criterion. No torch at import.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np
import polars as pl


class DecisionRule(ABC):
    """How a task's stored predictions become actions: ``actions(predictions, validation)`` -> int8 codes, one per
    row of ``predictions``; ``validation`` (the same policy's validation-day predictions, labelled) is all a rule
    may fit on, never a test day."""

    name: ClassVar[str]  # its key in tables and files: "paper", "calibrated", "margin"

    @abstractmethod
    def actions(self, predictions: pl.DataFrame, validation: pl.DataFrame | None = None) -> np.ndarray: ...

    def decide(self, predictions: pl.DataFrame, validation: pl.DataFrame | None = None) -> pl.DataFrame:
        """``predictions`` with its ``action`` column this rule's: what the cost sweep backtests."""
        return predictions.with_columns(pl.Series("action", self.actions(predictions, validation), dtype=pl.Int8))


class Task(ABC):
    """A supervised target for a pretrained backbone, and everything that follows from it."""

    kind: ClassVar[str]  # the task's family: "bsh"
    horizon: ClassVar[int]  # sessions after day t its target reads (1: the next session)
    returns: ClassVar[str | None] = None  # the returns its target reads: None, the run's tokenize.label_source
    outputs: ClassVar[tuple[str, ...]]  # the prediction columns it stores
    head_width: ClassVar[int]  # outputs of the network's head
    target_dtype: ClassVar[type[pl.DataType]] = pl.Int8  # its labels column's type: a class code (-1 unknown)
    # how a probe fits its target (``stages.probe_learners``): None, a classifier of its class codes; "gamma", a
    # regression of exp(target) on a log link under the Gamma deviance (twice QLIKE: a log-variance target's)
    probe_objective: ClassVar[str | None] = None

    @property
    @abstractmethod
    def key(self) -> str:
        """Its part of a policy's partition key, file stems and folders (``0.01``)."""

    @property
    def stem(self) -> str:
        """How its policies' file stems name it (``splinegpt_<stem>_seed1234``): its key."""
        return self.key

    @property
    def folder(self) -> str:
        """Its adapters' folder under a model's (``adapters/<folder>``): ``task=<key>``."""
        return f"task={self.key}"

    @property
    def label_column(self) -> str:
        """Its column of the labels asset: the target of each ticker-day (``target``, as ``target_dtype``)."""
        return f"label_{self.kind}_{self.key}"

    @abstractmethod
    def target(self, forward: np.ndarray) -> np.ndarray:
        """The target of each row from its forward returns: ``forward[:, k]`` the log return over the (k+1)-th session
        after the day (``horizon`` columns, NaN where that session is not known yet; ``targets.py``); a code (-1)
        or NaN where unknown."""

    @abstractmethod
    def loss(self, logits, target):
        """The training loss of a batch (torch tensors), unknown targets ignored."""

    @abstractmethod
    def val_loss(self, logits, target):
        """The validation metric a run stops on and keeps its best state by (torch tensors)."""

    @property
    def unknown(self) -> int | float:
        """Its target where unknown (a row never trained on or scored): -1 for a class code, NaN for a value."""
        return -1 if self.target_dtype.is_integer() else float("nan")

    def known(self, target: np.ndarray) -> np.ndarray:
        """Which of ``target`` (as ``store`` gives it) are known: a class code >= 0, a finite value."""
        target = np.asarray(target)
        return np.isfinite(target) if target.dtype.kind == "f" else target >= 0

    def stored(self, target: np.ndarray) -> np.ndarray:
        """``target`` (unknown as ``unknown``) as a training batch holds it: int64 class codes (what a
        cross-entropy indexes with), float32 values; a copy (the caller may write it)."""
        return np.array(target, dtype=np.int64 if self.target_dtype.is_integer() else np.float32)

    def summary(self, targets: np.ndarray) -> dict:
        """What the training split's known ``targets`` were: what ``prior`` starts the head from and the adapter's
        record shows. This default (a classifier's): each class code's count, named by ``outputs``."""
        counts = np.bincount(np.asarray(targets, dtype=np.int64), minlength=self.head_width)
        return {name: int(counts[k]) for k, name in enumerate(self.outputs)}

    @abstractmethod
    def prior(self, summary: dict) -> np.ndarray:
        """The head's bias that predicts the training target's marginal whatever the input (its zero-skill start),
        from the training split's ``summary``."""

    @property
    def record(self) -> dict:
        """What a model trained on it records of the task beside its files, and its predictions are read with
        (Buy/Sell/Hold: the class weights its probabilities are skewed by); none by default."""
        return {}

    def outputs_of(self, logits) -> np.ndarray:
        """What its predictions store of a batch of the head's outputs (a torch tensor [n, head_width]), as a float32
        array: a classifier's softmax (this default); a forecast overrides it (its values as they are)."""
        import torch  # only a prediction gets here

        return torch.softmax(logits.float(), dim=-1).numpy()

    @property
    def predictions_folder(self) -> str:
        """Its predictions' folder under the ``predictions`` asset's, where its validation, universe and record
        subfolders sit too, so that no view or glob mixes two tasks' columns: its ``kind`` (Buy/Sell/Hold's: the
        asset's folder itself, "")."""
        return self.kind

    @property
    def predictions_view(self) -> str:
        """The catalog view over its predictions (every fold's): ``predictions_<kind>``."""
        return f"predictions_{self.predictions_folder}" if self.predictions_folder else "predictions"

    @property
    def predictions_schema(self) -> dict[str, pl.DataType]:
        """The columns of its predictions (``predictions_frame``): the policy's keys, the day's ticker, date and
        close, one float64 column per output, and the day's target (``label``, null where unknown)."""
        outputs = dict.fromkeys(self.outputs, pl.Float64)
        keys = {"variant": pl.String, "task": pl.String, "seed": pl.Int64}
        return {
            **keys,
            "ticker": pl.String,
            "date": pl.Date,
            "close": pl.Float64,
            **outputs,
            "label": self.target_dtype,
        }

    def predictions_frame(self, frame: pl.DataFrame, policy, outputs: np.ndarray, class_weights=None) -> pl.DataFrame:
        """Its predictions' rows of ``policy`` (``predictions_schema``): ``frame``'s ticker, date and close, the
        ``outputs`` (``outputs_of``, one column per name of ``outputs``) and its label column (``label``), keyed by
        the policy's variant, this task's key and the seed, sorted by ticker and date. ``class_weights``: none here
        (Buy/Sell/Hold's own)."""
        values = np.asarray(outputs, dtype=np.float64).reshape(frame.height, len(self.outputs))
        return (
            frame.select(
                pl.lit(policy.variant.name).alias("variant"),
                pl.lit(self.key).alias("task"),
                pl.lit(policy.seed, pl.Int64).alias("seed"),
                "ticker",
                "date",
                "close",
                *[pl.Series(name, values[:, k]) for k, name in enumerate(self.outputs)],
                pl.col(self.label_column).alias("label"),
            )
            .cast(self.predictions_schema)  # type: ignore[arg-type]
            .sort("ticker", "date")
        )

    @property
    def rules(self) -> tuple[DecisionRule, ...]:
        """How its predictions decide (none: a forecast takes no action)."""
        return ()

    sizes_positions: ClassVar[bool] = False  # its forecasts size positions (volatility targeting), backtested too

    @property
    def backtested(self) -> bool:
        """Whether its policies have backtests: a rule's actions (``rules``) or a forecast's position sizes
        (``sizes_positions``: ``stages.backtests.materialize_targeting``)."""
        return bool(self.rules) or self.sizes_positions

    def calibrate(self, fitting: pl.DataFrame, frames: list, trained) -> tuple[list, object | None]:
        """Its predictions ``frames`` (None stays None) recalibrated on ``fitting`` (validation-day rows of the same
        policy, labelled; never a test day), with what its model was ``trained`` with (Buy/Sell/Hold: the class
        weights), and the calibration fitted (None: none). This default: none, the frames as they are."""
        return list(frames), None

    def per_ticker(self) -> list[pl.Expr]:
        """Aggregations of one ticker's predictions that its predictions' metadata shows (this default: the mean of
        each output)."""
        return [pl.col(name).mean().alias(f"mean_{name}") for name in self.outputs]

    def evidence_titles(self) -> dict[str, str]:
        """Its tables' names -> their titles in the report (``evidence``); none by default (Buy/Sell/Hold's evidence
        is the report's own tables)."""
        return {}

    evidence_reads_bars: ClassVar[bool] = False  # its evidence needs the raw bars of its predictions' tickers

    def evidence(
        self,
        settings,
        predictions: pl.DataFrame,
        bars: pl.DataFrame | None = None,
        oracle: pl.DataFrame | None = None,
    ) -> dict[str, pl.DataFrame]:
        """Its tables (named as ``evidence_titles``) from ``predictions``: every run policy's rows on this task
        (``predictions_schema`` and the ``fold``), as the report prints them after its own
        (``stages/task_evidence.py``); ``bars``: where ``evidence_reads_bars``, the raw bars (ticker, date, open,
        high, low, close) of the predictions' tickers up to their last day, every day from the first; ``oracle``:
        there too, the exact forecast of its target where the run's synthetic source plants one
        (``SyntheticSource.oracle``), else None; none by default."""
        return {}

    def verdict_rows(self, tables: dict[str, pl.DataFrame]) -> list[dict]:
        """Its rows of the verdict (``stages.verdict.VERDICT_SCHEMA``'s columns) from its ``evidence`` tables (by
        their names); none by default (Buy/Sell/Hold's questions are the verdict's own)."""
        return []

    def reported(self, settings) -> bool:
        """Whether the report's main tables read this task's policies: then every seed and fold trains it (another
        may be swept on fewer: ``split.tau_sweep_folds``, ``tau_sweep_seeds``) and its predictions cover the
        universe. A task alone in its family is (this default)."""
        return True

    def evaluated_by(self, variant, settings) -> bool:
        """Whether ``variant`` (a ``variants.Variant``) has a policy on this task in the run's grid (this default:
        every variant)."""
        return True
