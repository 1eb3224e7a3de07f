"""The tables of the run's tasks other than the report's own: each task's evidence (``Task.evidence``) from the
predictions of the run's policies on it, as ``paper_tables`` writes them and the report prints them after its own.

Buy/Sell/Hold's evidence is the report's own tables (``stages/evidence.py``, ``report/``); a task whose evidence is
none adds nothing, so a run of Buy/Sell/Hold alone writes the same tables as before. A table is named
``task_<key>_<name>`` (the task's key, the name it gives). No dagster here.
"""

from __future__ import annotations

import polars as pl

from kinematic_pipeline.config import Settings
from kinematic_pipeline.report.markdown import markdown_table
from kinematic_pipeline.run_keys import run_policies
from kinematic_pipeline.sources import make_source
from kinematic_pipeline.tasks.base import Task
from kinematic_pipeline.warehouse import RAW_OHLCV
from kinematic_pipeline.warehouse import exact_paths as exact
from kinematic_pipeline.warehouse.atomic import write_text_atomic
from kinematic_pipeline.warehouse.layout import UNIVERSE_PREDICTIONS

RAW_BARS = {"ticker": pl.String, "date": pl.Date, **dict.fromkeys(("open", "high", "low", "close"), pl.Float64)}


def _table_name(task: Task, name: str) -> str:
    return f"task_{task.key}_{name}"


def task_titles(settings: Settings) -> dict[str, str]:
    """Every table of the run's tasks -> its title (``Task.evidence_titles``), in the order of the run's tasks."""
    return {_table_name(t, name): title for t in settings.tasks for name, title in t.evidence_titles().items()}


def task_predictions(settings: Settings, task: Task) -> pl.DataFrame:
    """The predictions of the run's policies on ``task`` (every variant, seed and fold): each policy's file as its
    predictions asset wrote it (``Warehouse.predictions_file``: the test tickers) and, where the task is reported,
    its universe's (``predictions/<kind>/universe/``), one row per ticker-day; an empty frame of the task's columns
    when none is written yet."""
    wh, schema = settings.warehouse, {**task.predictions_schema, "fold": pl.String}
    policies = [p for p in run_policies(settings) if p.task == task]
    files = [wh.predictions_file(p) for p in policies] + [
        wh.predictions_extra(UNIVERSE_PREDICTIONS, p) for p in policies
    ]
    frames = [exact.read_parquet(f).select(list(schema)) for f in files if f.exists()]
    if not frames:
        return pl.DataFrame(schema=schema)
    rows = pl.concat(frames, how="vertical").unique(["variant", "seed", "fold", "ticker", "date"], maintain_order=True)
    return rows.sort("variant", "seed", "fold", "ticker", "date")


def task_evidence(settings: Settings, task: Task) -> dict[str, pl.DataFrame]:
    """``task``'s tables (``Task.evidence``, by their own names) from its policies' predictions
    (``task_predictions``); none for a task without evidence or whose predictions are not written yet."""
    if not task.evidence_titles():
        return {}
    predictions = task_predictions(settings, task)
    if not predictions.height:
        return {}
    if task.evidence_reads_bars:
        return task.evidence(settings, predictions, task_bars(settings, predictions), task_oracle(settings, task))
    return task.evidence(settings, predictions)


def task_oracle(settings: Settings, task: Task) -> pl.DataFrame | None:
    """The exact forecast of ``task``'s target where the run's synthetic source plants one
    (``SyntheticSource.oracle``: a planted-volatility universe's, ``KP_PLANTED_VOL``), else None."""
    return make_source(settings).oracle(task) if settings.data.source == "synthetic" else None


def task_tables(settings: Settings) -> dict[str, pl.DataFrame]:
    """The tables of every task of the run (``task_evidence``), each named ``task_<key>_<name>``."""
    return {
        _table_name(task, name): frame
        for task in settings.tasks
        for name, frame in task_evidence(settings, task).items()
    }


def task_verdict_rows(settings: Settings, tables: dict[str, pl.DataFrame] | None = None) -> list[dict]:
    """The verdict's rows of the run's reported tasks (``Task.verdict_rows`` of their evidence: ``tables``, as
    ``task_tables`` names them, else ``task_evidence`` computed here), in the order of the run's tasks; none for
    Buy/Sell/Hold alone."""
    rows: list[dict] = []
    for task in settings.tasks:
        if task.reported(settings) and type(task).verdict_rows is not Task.verdict_rows:
            if tables is None:
                evidence = task_evidence(settings, task)
            else:
                named = {name: _table_name(task, name) for name in task.evidence_titles()}
                evidence = {name: tables[full] for name, full in named.items() if full in tables}
            rows += task.verdict_rows(evidence)
    return rows


def write_task_tables(settings: Settings, tables: dict[str, pl.DataFrame]) -> None:
    """``tables`` (``task_tables``) under ``reports/tables/`` (``<name>.parquet`` and ``.md``), where the verdict
    computes them once and ``paper_tables`` reads them (``read_task_tables``); a table of the run's tasks that is not
    among them is removed, never read stale."""
    out = settings.warehouse.report_tables_dir
    out.mkdir(parents=True, exist_ok=True)
    for name in task_titles(settings):
        for path in (out / f"{name}.parquet", out / f"{name}.md"):
            if name not in tables:
                path.unlink(missing_ok=True)
        if name in tables:
            write_text_atomic(out / f"{name}.md", markdown_table(tables[name]) + "\n")
            settings.warehouse.write(tables[name], out / f"{name}.parquet")


def read_task_tables(settings: Settings) -> dict[str, pl.DataFrame]:
    """The tables ``write_task_tables`` wrote, in ``task_titles``' order (check the verdict's pin first:
    ``verdict.read_verdict``)."""
    out = settings.warehouse.report_tables_dir
    paths = {name: out / f"{name}.parquet" for name in task_titles(settings)}
    return {name: exact.read_parquet(path) for name, path in paths.items() if path.exists()}


def task_bars(settings: Settings, predictions: pl.DataFrame) -> pl.DataFrame:
    """The raw bars (ticker, date, open, high, low, close) of ``predictions``' tickers on every raw shard up to their
    last day: what a task's reference forecasters are fitted on (their training days) and read up to each day."""
    return raw_bars(settings, predictions["ticker"].unique().to_list(), predictions["date"].max())


def raw_bars(settings: Settings, tickers: list[str], until) -> pl.DataFrame:
    """The raw bars (``RAW_BARS``) of ``tickers`` on every raw shard dated <= ``until``, each shard verified against
    its manifest's hash (``Warehouse.verified_shards``)."""
    wh = settings.warehouse
    shards = wh.shard_days(RAW_OHLCV, until=until)
    columns = ["ticker", "date", "open", "high", "low", "close"]
    frames = [
        exact.read_parquet(path, columns=columns).filter(pl.col("ticker").is_in(tickers))
        for path in wh.verified_shards(RAW_OHLCV, shards)
    ]
    return pl.concat(frames, how="vertical").sort("ticker", "date") if frames else pl.DataFrame(schema=RAW_BARS)
