"""The tables of the run's tasks other than the report's own: each task's evidence (``Task.evidence``) from the
predictions of the run's policies on it, as ``paper_tables`` writes them and the report prints them after its own.

Buy/Sell/Hold's evidence is the report's own tables (``stages/evidence.py``, ``report/``); a task whose evidence is
none adds nothing, so a run of Buy/Sell/Hold alone writes the same tables as before. A table is named
``task_<key>_<name>`` (the task's key, the name it gives). No dagster here.
"""

from __future__ import annotations

import polars as pl

from kinematic_pipeline.config import Settings
from kinematic_pipeline.run_keys import run_policies
from kinematic_pipeline.tasks.base import Task
from kinematic_pipeline.warehouse import exact_paths as exact


def _table_name(task: Task, name: str) -> str:
    return f"task_{task.key}_{name}"


def task_titles(settings: Settings) -> dict[str, str]:
    """Every table of the run's tasks -> its title (``Task.evidence_titles``), in the order of the run's tasks."""
    return {_table_name(t, name): title for t in settings.tasks for name, title in t.evidence_titles().items()}


def task_predictions(settings: Settings, task: Task) -> pl.DataFrame:
    """The predictions of the run's policies on ``task`` (every variant, seed and fold), each policy's file as its
    predictions asset wrote it (``Warehouse.predictions_file``); an empty frame of the task's columns when none is
    written yet."""
    wh = settings.warehouse
    files = [wh.predictions_file(p) for p in run_policies(settings) if p.task == task]
    frames = [exact.read_parquet(f) for f in files if f.exists()]
    if not frames:
        return pl.DataFrame(schema={**task.predictions_schema, "fold": pl.String})
    return pl.concat(frames, how="vertical").sort("variant", "seed", "fold", "ticker", "date")


def task_tables(settings: Settings) -> dict[str, pl.DataFrame]:
    """The tables of every task of the run that has evidence, from its policies' predictions (``task_predictions``);
    none for a task whose predictions are not written yet."""
    tables: dict[str, pl.DataFrame] = {}
    for task in settings.tasks:
        if not task.evidence_titles():
            continue
        predictions = task_predictions(settings, task)
        if predictions.height:
            tables |= {_table_name(task, name): frame for name, frame in task.evidence(settings, predictions).items()}
    return tables
