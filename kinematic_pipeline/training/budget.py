"""Is a step budget enough? The two-sided test of a budget against twice it, seeds as replicates (issue 54).

For one family and stage (pretraining, a warm start, fine-tuning), each seed s is trained at the budget (1x) and at
twice it (2x), both annealed to 0 at their end (``train.schedule``: ``modules.LRSchedule``), and its best validation
loss kept: ``one[s]`` and ``two[s]``. The paired difference d_s = two[s] - one[s] is what doubling the budget does to
that seed; the seeds' spread, the larger sample standard deviation (ddof 1) of the 1x and of the 2x losses over the
seeds, is what changing the seed does. The budget passes when |mean d| <= spread: doubling it moves the loss less than
a change of seed does, either way. It fails when 2x is better beyond the spread (the budget stops short of what the
data gives) or worse beyond it (the longer run's schedule ends elsewhere: the budget is not the answer either). A test
that an early-stopped, unannealed 2x run could pass by stopping sooner is what this replaces (science-6 M-A). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BudgetVerdict:
    seeds: int
    mean_1x: float  # the seeds' mean best validation loss at the budget
    mean_2x: float
    difference: float  # mean over seeds of (2x - 1x): negative when twice the budget is better
    spread: float  # the seeds' spread: the larger sd (ddof 1) of the 1x and the 2x losses
    passes: bool

    @property
    def relative(self) -> float:
        """The difference as a fraction of the 1x mean (negative: 2x lower)."""
        return self.difference / abs(self.mean_1x) if self.mean_1x else float("nan")

    @property
    def reason(self) -> str:
        """One line: what doubling the budget did against what a change of seed does."""
        size = f"{self.difference:+.5f} ({100 * self.relative:+.2f}%) against a seed spread of {self.spread:.5f}"
        if self.passes:
            return f"passes: twice the budget moves the best validation loss by {size}"
        side = "lower" if self.difference < 0 else "higher"
        return f"fails: twice the budget ends {side} by {size} ({self.seeds} seeds)"


def budget_verdict(one: Sequence[float], two: Sequence[float]) -> BudgetVerdict:
    """The two-sided budget test over seeds (module docstring). ``one[s]``, ``two[s]``: seed s's best validation loss
    at 1x and at 2x, the same seeds in the same order. ValueError with fewer than two seeds, mismatched lengths or a
    non-finite loss."""
    a, b = np.asarray(one, dtype=np.float64), np.asarray(two, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size < 2:
        raise ValueError(f"the budget test needs the same >= 2 seeds at 1x and 2x, got {a.size} and {b.size}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError(f"a best validation loss is not finite: 1x {a.tolist()}, 2x {b.tolist()}")
    spread = float(max(a.std(ddof=1), b.std(ddof=1)))
    difference = float((b - a).mean())
    return BudgetVerdict(
        seeds=int(a.size),
        mean_1x=float(a.mean()),
        mean_2x=float(b.mean()),
        difference=difference,
        spread=spread,
        passes=abs(difference) <= spread,
    )
