"""The task families a run can name (``tokenize.tasks``) and the run's tasks built from them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kinematic_pipeline.tasks.base import Task
from kinematic_pipeline.tasks.buy_sell_hold import BuySellHold, tau_key
from kinematic_pipeline.tasks.volatility import RealizedVariance


def buy_sell_hold_tasks(settings: Any) -> tuple[Task, ...]:
    """Buy/Sell/Hold at each ``tokenize.taus``, with the class weights it trains with (``train.class_weights``)."""
    return tuple(BuySellHold(tau, settings.train.class_weights) for tau in settings.tokenize.taus)


def volatility_tasks(settings: Any) -> tuple[Task, ...]:
    """The log realized variance over each of ``tokenize.vol_horizons`` sessions (next week, then next day)."""
    return tuple(RealizedVariance(h) for h in settings.tokenize.vol_horizons)


TASK_FAMILIES: dict[str, Callable[[Any], tuple[Task, ...]]] = {
    BuySellHold.kind: buy_sell_hold_tasks,
    RealizedVariance.kind: volatility_tasks,
}


def register_family(kind: str, build: Callable[[Any], tuple[Task, ...]]) -> None:
    """Add the family ``kind`` (``build(settings)`` -> its tasks); a ValueError when the name is taken."""
    if kind in TASK_FAMILIES:
        raise ValueError(f"a task family named {kind!r} is registered already")
    TASK_FAMILIES[kind] = build


def check_families(kinds: tuple[str, ...]) -> None:
    """A ValueError naming the choices when ``kinds`` (``tokenize.tasks``) is empty or names no registered family."""
    unknown = [k for k in kinds if k not in TASK_FAMILIES]
    if not kinds or unknown:
        raise ValueError(
            f"tokenize.tasks={kinds!r}: expected one or more of {', '.join(TASK_FAMILIES)}"
            + (f" ({', '.join(map(repr, unknown))} is not registered)" if unknown else "")
        )


def run_tasks(settings: Any) -> tuple[Task, ...]:
    """The run's tasks: each family of ``tokenize.tasks`` built from the settings, in that order; a ValueError when
    two tasks share a labels column (the same key of one kind twice)."""
    tasks = tuple(task for kind in settings.tokenize.tasks for task in TASK_FAMILIES[kind](settings))
    columns = [t.label_column for t in tasks]
    if len(set(columns)) != len(columns):
        raise ValueError(f"tokenize.tasks={settings.tokenize.tasks!r} gives one labels column twice: {columns}")
    return tasks


def task_keyed(key: str, tasks: Sequence[Task]) -> Task:
    """The task of ``tasks`` (the run's) whose key is a policy key's last part (``0.01``: Buy/Sell/Hold at tau 1%)."""
    keyed = {task.key: task for task in tasks}
    if key not in keyed:
        raise ValueError(f"{key!r} is not the key of one of the run's tasks ({', '.join(keyed) or 'none'})")
    return keyed[key]


def row_task(row: Mapping, tasks: Sequence[Task]) -> Task:
    """The task of ``tasks`` (the run's) that a row of an evaluation view names: by its ``task`` key, or in
    Buy/Sell/Hold's views, whose rows carry the ``tau``, by that tau's key."""
    return task_keyed(row["task"] if "task" in row else tau_key(row["tau"]), tasks)
