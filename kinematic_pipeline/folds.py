"""Walk-forward folds: which days each trained policy may learn from and which days it is tested on.

``split.folds`` = 1 is the single cut (``split.train_end``, ``KP_TRAIN_END``): train on the sessions on or
before it, test on every later one; the fold has no name (``Fold.name`` None, labelled ``all``; keys ``1234|0.01``).
``split.folds`` = n > 1 tests the n consecutive periods (``split.fold_period``: year, half, quarter)
after ``split.train_end``; fold k (named ``2019``, ``2022H1``, ``2022Q3``) trains on every session before its test
period less an embargo of ``split.embargo_sessions`` sessions (an expanding window), and its test period
ends where the next fold's begins (the last fold's at the end of the history). In both, the labels of the
training days whose target reads into the test period (the longest ``Task.horizon`` of the run's tasks,
``settings.tasks``: a Buy/Sell/Hold label of day t needs day t+1) are purged: ``label_end`` is the last training day with a label a policy may learn.

Tokens and labels do not depend on the cut and are shared; every training-derived quantity is per fold: the
window store holds the last fold's training days (each fold reads the prefix up to its ``train_end``),
corpus statistics are one row set per fold, and alpha's MLE sees the first fold's training days only. No dagster.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass

from kinematic_pipeline.calendar import calendar_end, trading_days

SINGLE_CUT_LABEL = "all"  # the ``fold`` column's value for the single cut (``Fold.label``; its name is None)


@dataclass(frozen=True)
class Fold:
    name: str | None  # None: the single cut
    train_end: dt.date  # the last training day (windows ending on or before it are trained on)
    label_end: dt.date  # the last training day whose label may be learned (the purge)
    test_start: dt.date  # the first test session
    test_end: dt.date | None  # the last test day (None: every later session)

    @property
    def label(self) -> str:
        """The fold's value in the ``fold`` column of the evaluation views: its name, ``all`` for a single cut."""
        return self.name or SINGLE_CUT_LABEL

    def tests(self, day: dt.date) -> bool:
        return day >= self.test_start and (self.test_end is None or day <= self.test_end)

    def describe(self) -> str:
        end = "" if self.test_end is None else str(self.test_end)
        return f"train <= {self.train_end} (labels <= {self.label_end}), test {self.test_start} .. {end}"


def _period(day: dt.date, period: str) -> tuple[str, dt.date, dt.date]:
    """The name, first and last calendar day of the period (year, half, quarter) holding ``day``."""
    if period == "year":
        return str(day.year), dt.date(day.year, 1, 1), dt.date(day.year, 12, 31)
    months = 6 if period == "half" else 3
    k = (day.month - 1) // months
    first = dt.date(day.year, 1 + k * months, 1)
    month = first.month + months
    following = dt.date(day.year + 1, 1, 1) if month > 12 else dt.date(day.year, month, 1)
    last = following - dt.timedelta(days=1)
    return f"{day.year}{'H' if period == 'half' else 'Q'}{k + 1}", first, last


def _sessions_before(day: dt.date, start: dt.date) -> list[dt.date]:
    return trading_days(start, day - dt.timedelta(days=1)) if day > start else []


def _purged(train_end: dt.date, test_start: dt.date, start: dt.date, horizon: int) -> dt.date:
    """The last day on or before ``train_end`` whose label (``horizon`` sessions ahead) is known before
    ``test_start``: the session ``horizon`` sessions before the one preceding the test period."""
    before = [d for d in _sessions_before(test_start, start) if d <= train_end]
    gap = len(_sessions_before(test_start, start)) - len(before)  # sessions between the training and test days
    drop = max(0, horizon - gap)
    return before[-1 - drop] if len(before) > drop else start - dt.timedelta(days=1)


def walk_forward(settings) -> tuple[Fold, ...]:
    """The run's folds, in time order (``settings.split``; see the module docstring)."""
    split = settings.split
    start, cut = settings.data.start_date, split.train_end
    horizon = max(task.horizon for task in settings.tasks)
    first_test = trading_days(cut + dt.timedelta(days=1), calendar_end())[0]
    if split.folds == 1:
        return (Fold(None, cut, _purged(cut, first_test, start, horizon), first_test, None),)
    folds, day = [], first_test
    for k in range(split.folds):
        name, _, last = _period(day, split.fold_period)
        sessions = _sessions_before(day, start)
        if len(sessions) <= split.embargo_sessions:
            raise ValueError(f"fold {name}: no training day before its test period {day} less the embargo")
        train_end = sessions[-1 - split.embargo_sessions]
        test_end = None if k == split.folds - 1 else last
        folds.append(Fold(name, train_end, _purged(train_end, day, start, horizon), day, test_end))
        day = trading_days(last + dt.timedelta(days=1), calendar_end())[0]
    return tuple(folds)


def check_folds_have_test_days(settings, last_day: dt.date | None) -> None:
    """A ValueError naming the settings to change when a fold's test period starts after ``last_day`` (the data's
    last day: ``KP_END_DATE``, or the source's last bar), before any run starts: such a fold would train, then test
    nothing."""
    if last_day is None:
        return
    empty = [f for f in settings.folds if f.test_start > last_day]
    if empty:
        names = ", ".join(f"{f.label} (tests from {f.test_start})" for f in empty)
        raise ValueError(
            f"the data end on {last_day} (KP_END_DATE or the source's last bar), before the test period of fold "
            f"{names}: set fewer folds (KP_FOLDS={len(settings.folds) - len(empty)}) or a later KP_END_DATE"
        )


def fold_named(folds: tuple[Fold, ...], name: str | None) -> Fold:
    """The fold of ``folds`` called ``name`` (None: the single cut); a ValueError naming the run's folds otherwise."""
    for fold in folds:
        if fold.name == name:
            return fold
    labels = ", ".join(f.label for f in folds)
    raise ValueError(f"fold {name!r} is not one of this run's folds ({labels}; split.folds={len(folds)})")


def fold_labelled(folds: tuple[Fold, ...], label: str | None) -> Fold:
    """The fold of ``folds`` whose ``label`` (the ``fold`` column of an evaluation view) is ``label``: the inverse
    of ``Fold.label``."""
    return fold_named(folds, None if label in (None, SINGLE_CUT_LABEL) else label)


def store_cut(settings) -> dt.date:
    """The window store's cut: the last fold's training end (every fold's training days are its prefix)."""
    return settings.folds[-1].train_end


def first_cut(settings) -> dt.date:
    """The first fold's training end: what nothing shared by every fold (alpha's MLE) may look past."""
    return settings.folds[0].train_end


def fold_names(settings) -> tuple[str | None, ...]:
    return tuple(f.name for f in settings.folds)


def evaluated_folds(settings, task) -> tuple[str | None, ...]:
    """The folds a policy on ``task`` (a ``tasks.base.Task``) is trained and evaluated on: every fold, or for a task
    the report does not read (``Task.reported``: Buy/Sell/Hold at a tau other than the report's), with
    ``tau_sweep_folds`` = "last" the last fold only and with "none" no fold (no sweep)."""

    names, sweep = fold_names(settings), settings.split.tau_sweep_folds
    if sweep == "all" or task.reported(settings):
        return names
    return names[-1:] if sweep == "last" else ()


def split_days(days: list[dt.date], val_fraction: float) -> tuple[list[dt.date], list[dt.date]]:
    """Split sorted training-period days by date: the last ``val_fraction`` of them validate."""
    days = sorted(days)
    n_val = math.ceil(len(days) * val_fraction) if val_fraction > 0 else 0
    n_val = max(0, min(n_val, len(days) - 1))  # at least one training day
    return days[: len(days) - n_val], days[len(days) - n_val :]


def evaluation_days(settings, asset: str, fold: Fold | None = None) -> list[dt.date]:
    """Dates of ``asset`` shards in ``fold``'s test period (None: every fold's), not after ``data.end_date``."""
    folds = settings.folds
    first, last = (folds[0].test_start, None) if fold is None else (fold.test_start, fold.test_end)
    until = settings.data.end_date if last is None else min(last, settings.data.end_date or last)
    return settings.warehouse.shard_days(asset, after=first - dt.timedelta(days=1), until=until)
