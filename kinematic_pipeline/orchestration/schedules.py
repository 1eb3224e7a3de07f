"""Schedules: the nightly tick after the NYSE close, and the nightly evaluation after it.

``nightly_tick`` (18:00 New York, Mon-Fri) asks for the new session's ``raw_ohlcv`` and token shards,
then the labels of the session before (they need the new bar). A Dagster run holds one partition key
(or one range), so these are two run requests, with stable run keys (a re-evaluated tick launches
nothing twice) and the tag ``kinematic_pipeline/queue=nightly``: a run-queue limit of 1 on that tag
(deploy/local/dagster.yaml) launches them one after the other, in the order requested.
``nightly_evaluate`` (18:15) asks, for every (seed, tau) partition, for the evaluation assets of each variant
whose fine-tuned model exists: a schedule targets one job and a job one partitioning, so it is a schedule of
its own, whose runs queue behind the tick's. A day the NYSE is closed gives a SkipReason, not a run.
"""

import datetime as dt
from collections.abc import Sequence

import dagster as dg

from kinematic_pipeline.calendar import EXCHANGE_TIMEZONE
from kinematic_pipeline.config import Settings
from kinematic_pipeline.model_pins import check_pair
from kinematic_pipeline.nightly import NIGHTLY_CRON, SessionPlan, exchange_date, tick_plan
from kinematic_pipeline.orchestration.assets_evaluate import EVALUATION_ASSETS, evaluation_asset
from kinematic_pipeline.orchestration.partitions import range_tags
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.tokenizations import chosen
from kinematic_pipeline.warehouse import LABELS, PREDICTIONS, RAW_OHLCV

NIGHTLY_SCHEDULE, NIGHTLY_EVALUATE_SCHEDULE = "nightly_tick", "nightly_evaluate"
NIGHTLY_EVALUATE_CRON = "15 18 * * 1-5"  # after the tick's runs are queued
QUEUE_TAG, NIGHTLY_QUEUE = "kinematic_pipeline/queue", "nightly"  # limit 1: deploy/local/dagster.yaml
SESSION_TAG = "kinematic_pipeline/sessions"  # the new session(s) a run request belongs to


def session_assets(settings: Settings) -> tuple[str, ...]:
    """What a new session rebuilds before its labels: raw_ohlcv and the run's token assets."""
    return (RAW_OHLCV, *(t.tokens_asset for t in chosen(settings.tokenize.tokenizations)))


def _partition(days: Sequence[dt.date]) -> tuple[str | None, dict[str, str]]:
    """One day: a partition key; several consecutive days: a single-run range (as the CLI runs them)."""
    if len(days) == 1:
        return days[0].isoformat(), {}
    return None, range_tags(days[0], days[-1])


def _span(days: Sequence[dt.date]) -> str:
    return days[0].isoformat() if len(days) == 1 else f"{days[0]}...{days[-1]}"


def session_run_requests(
    settings: Settings, plan: SessionPlan, origin: str, run_config: dict | None = None
) -> list[dg.RunRequest]:
    """The runs of one block of new sessions, in the order they must run: ingest + tokens, then labels.

    ``origin`` prefixes the run keys (a re-evaluated tick or sensor cursor asks for the same keys, and
    Dagster launches each key once).
    """
    common = {QUEUE_TAG: NIGHTLY_QUEUE, SESSION_TAG: _span(plan.sessions)}
    key, tags = _partition(plan.sessions)
    requests = [
        dg.RunRequest(
            run_key=f"{origin}:sessions:{_span(plan.sessions)}",
            asset_selection=[dg.AssetKey(a) for a in session_assets(settings)],
            partition_key=key,
            tags={**common, **tags},
            run_config=run_config or {},
        )
    ]
    if plan.label_sessions:
        key, tags = _partition(plan.label_sessions)
        requests.append(
            dg.RunRequest(
                run_key=f"{origin}:labels:{_span(plan.label_sessions)}",
                asset_selection=[dg.AssetKey(LABELS)],
                partition_key=key,
                tags={**common, **tags},
                run_config=run_config or {},
            )
        )
    return requests


def ready_policies(settings: Settings) -> list[Policy]:
    """Every fine-tuned policy of the last fold (the one whose test period is open: the days a night adds) in the
    warehouse (a PEFT adapter or PatchTST's head) whose adapter was fine-tuned from the foundation on disk, in
    partition order."""
    last = settings.folds[-1]
    policies = [
        Policy(v, task, seed, last)
        for seed in settings.train.seeds
        for task in settings.tasks
        for v in settings.train.variants
    ]
    return [p for p in policies if settings.warehouse.has_adapter(p) and _pair_holds(settings, p)]


def _pair_holds(settings: Settings, policy: Policy) -> bool:
    """Whether the adapter was fine-tuned from the foundation on disk (a stale pair is never evaluated)."""
    try:
        check_pair(settings.warehouse, policy)
    except (ValueError, FileNotFoundError):
        return False
    return True


def evaluation_assets(settings: Settings) -> list[str]:
    return [evaluation_asset(v, a) for v in settings.train.variants for a in EVALUATION_ASSETS]


def evaluate_run_requests(settings: Settings, origin: str, session: str) -> list[dg.RunRequest]:
    """One run per (seed, tau) partition: the evaluation assets of every variant fine-tuned there."""
    by_partition: dict[tuple[str, str], list[Policy]] = {}
    for policy in ready_policies(settings):
        by_partition.setdefault((policy.fit_key, policy.task.key), []).append(policy)
    return [
        dg.RunRequest(
            run_key=f"{origin}:evaluate:{seed}|{tau}:{','.join(p.variant.name for p in policies)}",
            asset_selection=[  # a task that is not backtested has predictions only
                dg.AssetKey(evaluation_asset(p.variant.name, a))
                for p in policies
                for a in EVALUATION_ASSETS
                if a == PREDICTIONS or p.task.backtested
            ],
            partition_key=policies[0].key,
            tags={QUEUE_TAG: NIGHTLY_QUEUE, SESSION_TAG: session},
        )
        for (seed, tau), policies in by_partition.items()
    ]


def _has_evaluate_assets(settings: Settings, assets: Sequence[dg.AssetsDefinition | dg.AssetSpec]) -> bool:
    keys = {key for a in assets for key in (a.keys if isinstance(a, dg.AssetsDefinition) else [a.key])}
    return all(dg.AssetKey(name) in keys for name in evaluation_assets(settings))


def build_schedules(
    settings: Settings, assets: Sequence[dg.AssetsDefinition | dg.AssetSpec]
) -> list[dg.ScheduleDefinition]:
    """The nightly tick, and the nightly evaluation when the definitions' ``assets`` have that stage."""
    schedules = [nightly_tick_schedule(settings)]
    if _has_evaluate_assets(settings, assets):
        schedules.append(nightly_evaluate_schedule(settings))
    return schedules


def _session_of(settings: Settings, context: dg.ScheduleEvaluationContext) -> tuple[dt.date, SessionPlan | str]:
    """The tick's New York date and what it rebuilds (a reason to skip on a closed day or out of range)."""
    day = exchange_date(context.scheduled_execution_time)
    return day, tick_plan(settings, day)


def nightly_tick_schedule(settings: Settings) -> dg.ScheduleDefinition:
    @dg.schedule(
        name=NIGHTLY_SCHEDULE,
        cron_schedule=NIGHTLY_CRON,
        execution_timezone=EXCHANGE_TIMEZONE,
        target=dg.AssetSelection.assets(*session_assets(settings), LABELS),
        description="After the NYSE close (18:00 New York, Mon-Fri): ingest and tokenize the new session "
        "(raw_ohlcv, spline_tokens, fd_tokens, raw_tokens), then the previous session's labels, one run after "
        "the other (tag kinematic_pipeline/queue=nightly). No run on a day the NYSE is closed.",
    )
    def nightly_tick(context: dg.ScheduleEvaluationContext):
        day, plan = _session_of(settings, context)
        return (
            dg.SkipReason(plan)
            if isinstance(plan, str)
            else session_run_requests(settings, plan, f"{NIGHTLY_SCHEDULE}:{day}")
        )

    return nightly_tick


def nightly_evaluate_schedule(settings: Settings) -> dg.ScheduleDefinition:
    """Every variant's evaluation assets after the tick. A schedule has one target and a run one partitioning,
    so the (seed, tau) partitions get their own schedule, 15 minutes later: its runs queue behind the tick's
    (same queue tag, first in first out) and so see the new session's shards."""

    @dg.schedule(
        name=NIGHTLY_EVALUATE_SCHEDULE,
        cron_schedule=NIGHTLY_EVALUATE_CRON,
        execution_timezone=EXCHANGE_TIMEZONE,
        target=dg.AssetSelection.assets(*evaluation_assets(settings)),
        description="After the nightly tick (18:15 New York, Mon-Fri): predictions and backtests of every "
        "fine-tuned policy in the warehouse, one run per (seed, tau). No run on a day the NYSE is closed.",
    )
    def nightly_evaluate(context: dg.ScheduleEvaluationContext):
        day, plan = _session_of(settings, context)
        if isinstance(plan, str):
            return dg.SkipReason(plan)
        requests = evaluate_run_requests(settings, f"{NIGHTLY_EVALUATE_SCHEDULE}:{day}", day.isoformat())
        return requests or dg.SkipReason(
            "no fine-tuned model in the warehouse yet (models/<variant>/seed=<seed>/adapters/tau=<tau>/)"
        )

    return nightly_evaluate
