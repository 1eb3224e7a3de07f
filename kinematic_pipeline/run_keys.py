"""The run's policy keys: the grid of (variant, seed, tau, fold) the settings evaluate, and the rows of a view that
belong to it.

A warehouse keeps every policy it ever evaluated (a run with two seeds leaves seed 1235's predictions behind when
the next run sets ``KP_SEEDS=1234``). What pools, tests and traces the run's records reads only the run's own
policies: ``keep_run_policies`` drops the rows of any other (Buy & Hold rows stay, on the run's folds), and
``run_keys_digest`` is what the report group's pins record of the grid they were computed for. The grid is the one
the Dagster partitions list (``orchestration.partitions.policy_keys``). No dagster here.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from kinematic_pipeline.config import Settings
from kinematic_pipeline.folds import evaluated_folds, fold_names
from kinematic_pipeline.pins import BACKTEST_KEYS, StalePairError
from kinematic_pipeline.policy import KEY_SEPARATOR, Policy, format_fit_key
from kinematic_pipeline.tasks.base import Task
from kinematic_pipeline.tasks.buy_sell_hold import BuySellHold, tau_key
from kinematic_pipeline.variants import BENCHMARK
from kinematic_pipeline.variants import variant as lookup_variant
from kinematic_pipeline.warehouse.atomic import digest, file_sha256

KEY_COLUMNS = BACKTEST_KEYS  # a policy as every evaluation view holds it (fold: Fold.label)


def policy_seeds(settings: Settings, variant: str | None = None) -> tuple[int, ...]:
    """The seeds of ``variant``'s policies: the training seeds, or (0,) when its result depends on none."""
    if variant is None or lookup_variant(variant).seeded:
        return settings.train.seeds
    return (0,)


def run_task(settings: Settings, tau: float) -> BuySellHold:
    """The run's Buy/Sell/Hold task at ``tau``: with the class weights it trains with (``train.class_weights``)."""
    return BuySellHold(tau, settings.train.class_weights)


def named_task(settings: Settings, text: str) -> Task:
    """The run's task named ``text`` on the command line: a task's key (``vol5``), else Buy/Sell/Hold at the tau it
    reads as (``run_task``); ValueError naming the run's tasks when it is neither."""
    for task in settings.tasks:
        if task.key == text.strip():
            return task
    try:
        return run_task(settings, float(text))
    except ValueError:
        keys = ", ".join(t.key for t in settings.tasks)
        raise ValueError(f"{text!r} is neither a tau nor one of the run's tasks ({keys})") from None


def policy_tasks(settings: Settings, variant: str | None = None) -> tuple[Task, ...]:
    """The tasks of ``variant``'s policies: those of the run's (``Settings.tasks``) it is evaluated on
    (``Task.evaluated_by``: Buy/Sell/Hold's baselines at ``evaluate.baseline_taus`` only); None: every task."""
    if variant is None:
        return settings.tasks
    return tuple(t for t in settings.tasks if t.evaluated_by(lookup_variant(variant), settings))


def policy_keys(settings: Settings, variant: str | None = None) -> list[str]:
    """The run's grid of policies of ``variant``, keys ``2019@1234|0.01`` by fold, seed, then task: every seed and
    task on every fold, but a task the report does not read (``Task.reported``: a tau other than the report's) with
    ``tau_sweep_folds`` = "last" on the last fold only, and with ``tau_sweep_seeds`` = "first" with the first seed
    only."""
    seeds, tasks = policy_seeds(settings, variant), policy_tasks(settings, variant)
    folds = {task: evaluated_folds(settings, task) for task in tasks}
    swept = seeds[:1] if settings.split.tau_sweep_seeds == "first" else seeds
    return [
        f"{format_fit_key(fold, seed)}{KEY_SEPARATOR}{task.key}"
        for fold in fold_names(settings)
        for seed in seeds
        for task in tasks
        if fold in folds[task] and (seed in swept or task.reported(settings))
    ]


def run_policies(settings: Settings) -> list[Policy]:
    """Every evaluated variant's policies of the run (``settings.evaluated_variants`` x ``policy_keys``)."""
    return [
        Policy.from_key(v, key, settings.folds, settings.tasks)
        for v in settings.evaluated_variants
        for key in policy_keys(settings, v)
    ]


def run_keys_digest(settings: Settings) -> str:
    """sha256 over the run's policies (variant and key, in order): what a report-group pin records of its grid."""
    return digest([f"{p.variant.name}:{p.key}" for p in run_policies(settings)])


def _in_run(settings: Settings, grid: dict, row: dict) -> bool:
    if row["variant"] == BENCHMARK:
        return row["fold"] in {f.label for f in settings.folds}
    keys = grid.get((row["variant"], row["seed"], row["fold"]), ())
    return row["tau"] is not None and tau_key(row["tau"]) in keys


def keep_run_policies(settings: Settings, frame: pl.DataFrame) -> pl.DataFrame:
    """The rows of ``frame`` (an evaluation view, a universe file: columns ``KEY_COLUMNS``) that belong to the run's
    policies, and Buy & Hold's of the run's folds; a frame without those columns is returned as it is."""
    if frame.is_empty() or not set(KEY_COLUMNS) <= set(frame.columns):
        return frame
    grid: dict[tuple, set[str]] = {}
    for p in run_policies(settings):
        grid.setdefault((p.variant.name, p.seed, p.fold.label), set()).add(p.task.key)
    keys = frame.select(KEY_COLUMNS).unique()
    keep = keys.filter(
        pl.Series([_in_run(settings, grid, row) for row in keys.iter_rows(named=True)], dtype=pl.Boolean)
    )
    if keep.height == keys.height:
        return frame
    return frame.join(keep, on=list(KEY_COLUMNS), how="semi", nulls_equal=True)


# universes: each policy's universe predictions record the membership file they were drawn under

MEMBERSHIP_COLUMNS = ("membership_file", "membership_sha256")  # in predictions/universe*/: "" without a file


def membership_columns(settings: Settings) -> list[pl.Expr]:
    """The universe files' record of ``evaluate.membership_file``: its path and sha256 ("" without one)."""
    path = settings.evaluate.membership_file
    sha = file_sha256(Path(path)) if path else ""
    return [pl.lit(path or "").alias(MEMBERSHIP_COLUMNS[0]), pl.lit(sha).alias(MEMBERSHIP_COLUMNS[1])]


def one_universe(settings: Settings, frames: list[pl.DataFrame]) -> list[pl.DataFrame]:
    """The universe files of the run's policies (``keep_run_policies``; empty ones dropped), once they are checked to
    be drawn under one membership file: ``StalePairError`` naming both files and hashes and the predictions to
    re-materialize when two policies' universes were not (a comparison of variants on different names). The
    membership columns are dropped (an older file without them counts as "unrecorded")."""
    kept = [f for f in (keep_run_policies(settings, f) for f in frames) if f.height]
    seen: dict[tuple[str, str], pl.DataFrame] = {}
    for frame in kept:
        member = tuple(str(frame[c][0]) if c in frame.columns else "unrecorded" for c in MEMBERSHIP_COLUMNS)
        seen.setdefault(member, frame)
    if len(seen) > 1:
        now = membership_columns(settings)
        current = pl.select(now[1])[MEMBERSHIP_COLUMNS[1]][0]
        (a, first), (b, second) = sorted(seen.items(), key=lambda kv: kv[0][1] == current, reverse=True)[:2]
        row = second.row(0, named=True)
        policy = Policy.from_row(row, settings.folds, settings.tasks)
        raise StalePairError(
            f"the universes compared were drawn under different membership files: {first['variant'][0]}'s under "
            f"{a[0] or '(none)'} sha256 {a[1][:16] or '-'}, {policy.variant.name}'s under {b[0] or '(none)'} sha256 "
            f"{b[1][:16] or '-'}: re-materialize {policy.variant.name}_predictions partition {policy.key} (and every "
            "policy drawn under it) with one KP_MEMBERSHIP_FILE"
        )
    if len(seen) == 1:
        _check_current_membership(settings, *seen.items())
    return [f.drop(c for c in MEMBERSHIP_COLUMNS if c in f.columns) for f in kept]


def _check_current_membership(settings: Settings, drawn: tuple[tuple[str, str], pl.DataFrame]) -> None:
    """``StalePairError`` when the one membership file the universes were drawn under is not the settings' now (a
    file set, changed or removed since): the tables would say a filter applies that the names do not follow. An
    older universe without the record passes only where the settings name no file either."""
    (path, sha), frame = drawn
    current = pl.select(membership_columns(settings))
    now_path, now_sha = (str(current[c][0]) for c in MEMBERSHIP_COLUMNS)
    if sha == now_sha or (sha == "unrecorded" and not now_sha):
        return
    policy = Policy.from_row(frame.row(0, named=True), settings.folds, settings.tasks)
    raise StalePairError(
        f"the universes were drawn under membership file {path or '(none)'} sha256 {sha[:16] or '-'}, the settings "
        f"name {now_path or '(none)'} sha256 {now_sha[:16] or '-'} (KP_MEMBERSHIP_FILE): re-materialize the "
        f"predictions assets ({policy.variant.name}_predictions partition {policy.key} and every other policy's) "
        "under the current file, or set it back"
    )
