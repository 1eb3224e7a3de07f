"""Which trained model: one small value names a policy everywhere.

A ``Policy`` is a model ``variant`` (a ``variants.Variant``) trained with one seed (its foundation), fine-tuned at one
tau (its adapter, predictions and backtests), on one walk-forward ``fold`` (a ``folds.Fold``: its training cut and
test period). It holds those objects, not their names: it is built once, from a partition key and the settings'
folds (``from_key``), or from names (``named``), and every stage reads the fold's dates and the variant's behaviour
off it. It formats and parses every spelling of that identity: the Dagster partition keys (a foundation's ``fit``
key ``2019@1234``, a fine-tuned policy's ``2019@1234|0.01``: its fit, then its tau), the file stems of the
evaluation shards, the model folders (``Warehouse.model_dir``) and the ``lineage`` arguments. No dagster here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from kinematic_pipeline.folds import Fold, fold_labelled, fold_named
from kinematic_pipeline.tasks.buy_sell_hold import same_tau, tau_key
from kinematic_pipeline.variants import Variant
from kinematic_pipeline.variants import variant as lookup_variant

KEY_SEPARATOR = "|"  # between the fit and the tau in a policy key (the spelling of Dagster's multi-partition keys)


@dataclass(frozen=True)
class Policy:
    variant: Variant  # a variant's name is looked up (a ValueError naming the choices)
    seed: int
    tau: float | None  # None: the foundation (pretraining has no threshold)
    fold: Fold

    def __post_init__(self) -> None:
        if isinstance(self.variant, str):
            object.__setattr__(self, "variant", lookup_variant(self.variant))
        if not isinstance(self.fold, Fold):
            raise TypeError(f"a Policy's fold is a Fold of the settings' folds (Policy.named), not {self.fold!r}")
        object.__setattr__(self, "seed", int(self.seed))
        if self.tau is not None:
            object.__setattr__(self, "tau", float(self.tau))

    def __eq__(self, other) -> bool:
        if not isinstance(other, Policy):
            return NotImplemented
        taus = (self.tau is None and other.tau is None) or (
            self.tau is not None and other.tau is not None and same_tau(self.tau, other.tau)
        )
        return self._identity() == other._identity() and taus

    def __hash__(self) -> int:
        return hash((*self._identity(), None if self.tau is None else tau_key(self.tau)))

    def _identity(self) -> tuple:
        return self.variant.name, self.seed, self.fold

    # --- built from names --------------------------------------------------------------------------------

    @classmethod
    def named(
        cls,
        folds: tuple[Fold, ...],
        variant: str | Variant,
        seed: int,
        tau: float | None = None,
        fold: str | None = None,
    ) -> Policy:
        """The policy of ``variant``, ``seed`` and ``tau`` on the fold of ``folds`` (the settings') called ``fold``
        (None: the single cut): how the CLI's and the benchmarks' arguments become a policy."""
        return cls(variant, seed, tau, fold_named(folds, fold))

    @classmethod
    def from_key(cls, variant: str | Variant, key: str, folds: tuple[Fold, ...]) -> Policy:
        """The policy of a partition key: a foundation's fit key (``2019@1234``) or a fine-tuned policy's key
        (``2019@1234|0.01``), its fold one of ``folds`` (the settings')."""
        fit, _, tau = key.partition(KEY_SEPARATOR)
        fold, seed = parse_fit_key(fit)
        return cls.named(folds, variant, seed, float(tau) if tau else None, fold)

    @classmethod
    def from_row(cls, row: Mapping, folds: tuple[Fold, ...]) -> Policy:
        """The policy of a row of an evaluation view (its ``variant``, ``seed``, ``tau`` and ``fold`` label)."""
        return cls(row["variant"], row["seed"], row["tau"], fold_labelled(folds, row["fold"]))

    # --- Dagster partition keys -------------------------------------------------------------------------

    @property
    def fit_key(self) -> str:
        """The ``fit`` dimension's key: the seed, prefixed by its walk-forward fold (``2019@1234``)."""
        return format_fit_key(self.fold.name, self.seed)

    @property
    def tau_key(self) -> str:
        return tau_key(self._tau())

    @property
    def key(self) -> str:
        """The Dagster partition key of a fine-tuned policy's assets, as the CLI and the UI spell it:
        ``2019@1234|0.01`` (``format_policy_key``)."""
        return format_policy_key(self.fold.name, self.seed, self._tau())

    # --- files and commands -------------------------------------------------------------------------------

    @property
    def stem(self) -> str:
        """File stem of the policy's evaluation shards: ``splinegpt_tau0.01_seed1234``."""
        fold = "" if self.fold.name is None else f"_fold{self.fold.name}"
        return f"{self.variant.name}_tau{self.tau_key}_seed{self.seed}{fold}"

    @property
    def foundation(self) -> Policy:
        """The pretrained model this policy was fine-tuned from (no tau)."""
        return replace(self, tau=None)

    def at(self, tau: float) -> Policy:
        return replace(self, tau=float(tau))

    @property
    def lineage_args(self) -> str:
        """The ``python -m kinematic_pipeline lineage`` arguments that trace this policy."""
        fold = "" if self.fold.name is None else f" --fold {self.fold.name}"
        return f"--model {self.variant.name} --tau {self.tau_key} --seed {self.seed}{fold}"

    def __str__(self) -> str:
        tau = "" if self.tau is None else f" tau {self.tau_key}"
        fold = "" if self.fold.name is None else f" fold {self.fold.name}"
        return f"{self.variant.name} seed {self.seed}{tau}{fold}"

    def _tau(self) -> float:
        if self.tau is None:
            raise ValueError(f"{self} is a foundation: it has no tau")
        return self.tau


def format_fit_key(fold: str | None, seed: int) -> str:
    """A foundation's key: the seed, prefixed by its walk-forward fold (``2019@1234``); a single cut has no
    prefix (``1234``). A fit is one (fold, seed): the fold is trained on, as the seed is."""
    return str(int(seed)) if fold is None else f"{fold}@{int(seed)}"


def format_policy_key(fold: str | None, seed: int, tau: float) -> str:
    """A fine-tuned policy's key: its fit key, then its tau (``2019@1234|0.01``), the spelling the runs and
    materializations of the earlier two-dimension partitions carry, so that a warehouse's history still reads."""
    return f"{format_fit_key(fold, seed)}{KEY_SEPARATOR}{tau_key(tau)}"


def parse_fit_key(key: str) -> tuple[str | None, int]:
    """(fold, seed) of a ``fit_key``."""
    fold, _, seed = key.rpartition("@")
    return fold or None, int(seed)
