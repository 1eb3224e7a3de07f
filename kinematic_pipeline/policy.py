"""Which trained model: one small value names a foundation or a policy everywhere.

A ``Foundation`` is a model ``variant`` (a ``variants.Variant``) pretrained with one seed on one walk-forward ``fold``
(a ``folds.Fold``: its training cut and test period). A ``Policy`` is a foundation fine-tuned on one ``task`` (a
``tasks.base.Task``: Buy/Sell/Hold at a tau, ``tasks.buy_sell_hold.BuySellHold``): its adapter, predictions and
backtests. Each holds its objects, not their names: it is built once, from a partition key and the settings' folds
and class weights (``from_key``), or from names (``named``), and every stage reads the fold's dates, the task and the
variant's behaviour off it. A foundation is a policy without a task, said by its type. They format and parse every
spelling of that identity: the Dagster partition keys (a foundation's ``fit`` key ``2019@1234``, a policy's
``2019@1234|0.01``: its fit, then its task's key), the file stems of the evaluation shards, the model folders
(``Warehouse.model_dir``) and the ``lineage`` arguments. No dagster here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from kinematic_pipeline.folds import Fold, fold_labelled, fold_named
from kinematic_pipeline.tasks.base import Task
from kinematic_pipeline.tasks.registry import row_task, task_keyed
from kinematic_pipeline.variants import Variant
from kinematic_pipeline.variants import variant as lookup_variant

KEY_SEPARATOR = "|"  # between the fit and the task in a policy key (the spelling of Dagster's multi-partition keys)


def _checked(fit) -> None:
    if isinstance(fit.variant, str):
        object.__setattr__(fit, "variant", lookup_variant(fit.variant))
    if not isinstance(fit.fold, Fold):
        raise TypeError(f"a {type(fit).__name__}'s fold is a Fold of the settings' folds (named), not {fit.fold!r}")
    object.__setattr__(fit, "seed", int(fit.seed))


@dataclass(frozen=True)
class Foundation:
    """A pretrained backbone: a variant, a seed, a fold (no task)."""

    variant: Variant  # a variant's name is looked up (a ValueError naming the choices)
    seed: int
    fold: Fold
    task: ClassVar[None] = None  # a foundation has no task: pretraining reads no target

    def __post_init__(self) -> None:
        _checked(self)

    @classmethod
    def named(cls, folds: tuple[Fold, ...], variant: str | Variant, seed: int, fold: str | None = None) -> Foundation:
        """The foundation of ``variant`` and ``seed`` on the fold of ``folds`` called ``fold`` (None: the single cut)."""
        return cls(variant, seed, fold_named(folds, fold))

    @property
    def fit_key(self) -> str:
        """The ``fit`` dimension's key: the seed, prefixed by its walk-forward fold (``2019@1234``)."""
        return format_fit_key(self.fold.name, self.seed)

    key = fit_key  # a foundation's partition key is its fit key

    @property
    def foundation(self) -> Foundation:
        return self

    def on(self, task: Task) -> Policy:
        """The policy fine-tuned from this foundation on ``task``."""
        return Policy(self.variant, task, self.seed, self.fold)

    @property
    def training(self) -> str:
        """How it is trained, for messages and records."""
        return "pretraining"

    def __str__(self) -> str:
        fold = "" if self.fold.name is None else f" fold {self.fold.name}"
        return f"{self.variant.name} seed {self.seed}{fold}"


@dataclass(frozen=True)
class Policy:
    """A foundation fine-tuned on a task: a variant, a task, a seed, a fold."""

    variant: Variant  # a variant's name is looked up (a ValueError naming the choices)
    task: Task
    seed: int
    fold: Fold

    def __post_init__(self) -> None:
        _checked(self)
        if not isinstance(self.task, Task):
            raise TypeError(f"a Policy's task is a Task (tasks.buy_sell_hold.BuySellHold), not {self.task!r}")

    # --- built from names --------------------------------------------------------------------------------

    @classmethod
    def named(
        cls, folds: tuple[Fold, ...], variant: str | Variant, seed: int, task: Task, fold: str | None = None
    ) -> Policy:
        """The policy of ``variant``, ``seed`` and ``task`` on the fold of ``folds`` (the settings') called ``fold``
        (None: the single cut): how the CLI's and the benchmarks' arguments become a policy."""
        return cls(variant, task, seed, fold_named(folds, fold))

    @classmethod
    def from_key(
        cls, variant: str | Variant, key: str, folds: tuple[Fold, ...], tasks: Sequence[Task]
    ) -> Policy | Foundation:
        """The foundation of a fit key (``2019@1234``) or the policy of a policy key (``2019@1234|0.01``), its fold
        one of ``folds`` and its task the one of ``tasks`` (the run's: ``Settings.tasks``) with that key."""
        fit, _, task_key = key.partition(KEY_SEPARATOR)
        fold, seed = parse_fit_key(fit)
        foundation = Foundation.named(folds, variant, seed, fold)
        return foundation.on(task_keyed(task_key, tasks)) if task_key else foundation

    @classmethod
    def from_row(cls, row: Mapping, folds: tuple[Fold, ...], tasks: Sequence[Task]) -> Policy:
        """The policy of a row of an evaluation view (its ``variant``, ``seed`` and ``fold`` label), its task the one of
        ``tasks`` (the run's) the row names (``tasks.registry.row_task``: Buy/Sell/Hold's rows by their ``tau``)."""
        return cls(row["variant"], row_task(row, tasks), row["seed"], fold_labelled(folds, row["fold"]))

    # --- Dagster partition keys -------------------------------------------------------------------------

    @property
    def fit_key(self) -> str:
        """The ``fit`` dimension's key: the seed, prefixed by its walk-forward fold (``2019@1234``)."""
        return format_fit_key(self.fold.name, self.seed)

    @property
    def key(self) -> str:
        """The Dagster partition key of a policy's assets, as the CLI and the UI spell it: ``2019@1234|0.01``."""
        return f"{self.fit_key}{KEY_SEPARATOR}{self.task.key}"

    # --- files and commands -------------------------------------------------------------------------------

    @property
    def stem(self) -> str:
        """File stem of the policy's evaluation shards: ``splinegpt_tau0.01_seed1234`` (its task's ``Task.stem``)."""
        fold = "" if self.fold.name is None else f"_fold{self.fold.name}"
        return f"{self.variant.name}_{self.task.stem}_seed{self.seed}{fold}"

    @property
    def foundation(self) -> Foundation:
        """The pretrained model this policy was fine-tuned from."""
        return Foundation(self.variant, self.seed, self.fold)

    def on(self, task: Task) -> Policy:
        """The same fit fine-tuned on another task."""
        return Policy(self.variant, task, self.seed, self.fold)

    @property
    def training(self) -> str:
        return f"fine-tuning, tau={self.task.key}"

    @property
    def lineage_args(self) -> str:
        """The ``python -m kinematic_pipeline lineage`` arguments that trace this policy."""
        fold = "" if self.fold.name is None else f" --fold {self.fold.name}"
        return f"--model {self.variant.name} --tau {self.task.key} --seed {self.seed}{fold}"

    def __str__(self) -> str:
        fold = "" if self.fold.name is None else f" fold {self.fold.name}"
        return f"{self.variant.name} seed {self.seed} tau {self.task.key}{fold}"


def format_fit_key(fold: str | None, seed: int) -> str:
    """A foundation's key: the seed, prefixed by its walk-forward fold (``2019@1234``); a single cut has no
    prefix (``1234``). A fit is one (fold, seed): the fold is trained on, as the seed is."""
    return str(int(seed)) if fold is None else f"{fold}@{int(seed)}"


def parse_fit_key(key: str) -> tuple[str | None, int]:
    """(fold, seed) of a ``fit_key``."""
    fold, _, seed = key.rpartition("@")
    return fold or None, int(seed)
