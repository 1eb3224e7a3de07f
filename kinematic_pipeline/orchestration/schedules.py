"""Schedules: the nightly tick after the NYSE close, and the nightly evaluation after it.

``nightly_tick`` (18:00 New York, Mon-Fri) asks for the new session's ``raw_ohlcv`` and token shards,
then the labels of the session before (they need the new bar). A Dagster run holds one partition key
(or one range), so these are two run requests, with stable run keys (a re-evaluated tick launches
nothing twice) and the tag ``kinematic_pipeline/queue=nightly``: a run-queue limit of 1 on that tag
(deploy/local/dagster.yaml) launches them one after the other, in the order requested.
``nightly_evaluate`` (18:15) asks for ``predictions`` + ``backtests`` of every (tau, variant) whose
fine-tuned model exists: a schedule targets one job and a job one partitioning, so it is a schedule of
its own, whose runs queue behind the tick's. A day the NYSE is closed gives a SkipReason, not a run.
"""

import datetime as dt
from collections.abc import Sequence

import dagster as dg

from kinematic_pipeline.config import Settings
from kinematic_pipeline.nightly import EXCHANGE_TIMEZONE, NIGHTLY_CRON, SessionPlan, exchange_date, tick_plan
from kinematic_pipeline.storage import (
    BACKTESTS,
    LABELS,
    PREDICTIONS,
    RAW_OHLCV,
    TOKEN_ASSETS,
    Warehouse,
    policy_key,
    tau_key,
)

NIGHTLY_SCHEDULE, NIGHTLY_EVALUATE_SCHEDULE = "nightly_tick", "nightly_evaluate"
NIGHTLY_EVALUATE_CRON = "15 18 * * 1-5"  # after the tick's runs are queued
QUEUE_TAG, NIGHTLY_QUEUE = "kinematic_pipeline/queue", "nightly"  # limit 1: deploy/local/dagster.yaml
SESSION_TAG = "kinematic_pipeline/sessions"  # the new session(s) a run request belongs to
RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"
SESSION_ASSETS = (RAW_OHLCV, *TOKEN_ASSETS)  # rebuilt for the new session(s)
EVALUATE_ASSETS = (PREDICTIONS, BACKTESTS)  # rebuilt per (tau, variant) when a fine-tuned model exists


def _partition(days: Sequence[dt.date]) -> tuple[str | None, dict[str, str]]:
    """One day: a partition key; several consecutive days: a single-run range (as the CLI runs them)."""
    if len(days) == 1:
        return days[0].isoformat(), {}
    return None, {RANGE_START: days[0].isoformat(), RANGE_END: days[-1].isoformat()}


def _span(days: Sequence[dt.date]) -> str:
    return days[0].isoformat() if len(days) == 1 else f"{days[0]}...{days[-1]}"


def session_run_requests(plan: SessionPlan, origin: str, run_config: dict | None = None) -> list[dg.RunRequest]:
    """The runs of one block of new sessions, in the order they must run: ingest + tokens, then labels.

    ``origin`` prefixes the run keys (a re-evaluated tick or sensor cursor asks for the same keys, and
    Dagster launches each key once).
    """
    common = {QUEUE_TAG: NIGHTLY_QUEUE, SESSION_TAG: _span(plan.sessions)}
    key, tags = _partition(plan.sessions)
    requests = [
        dg.RunRequest(
            run_key=f"{origin}:sessions:{_span(plan.sessions)}",
            asset_selection=[dg.AssetKey(a) for a in SESSION_ASSETS],
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


def ready_models(settings: Settings) -> list[tuple[str, str, int]]:
    """(variant, tau key, seed) of every fine-tuned model in the warehouse: a PEFT adapter or PatchTST's head."""
    wh, taus = Warehouse(settings.warehouse), [tau_key(t) for t in settings.tokenize.taus]
    return [
        (v, tau, s)
        for v in settings.train.variants
        for tau in taus
        for s in settings.train.seeds
        if wh.has_adapter(v, tau, s)
    ]


def evaluate_run_requests(settings: Settings, origin: str, session: str) -> list[dg.RunRequest]:
    """predictions + backtests of each (tau, variant@seed) partition whose fine-tuned model exists."""
    return [
        dg.RunRequest(
            run_key=f"{origin}:evaluate:{policy_key(variant, seed)}:{tau}",
            asset_selection=[dg.AssetKey(a) for a in EVALUATE_ASSETS],
            partition_key=dg.MultiPartitionKey({"tau": tau, "policy": policy_key(variant, seed)}),
            tags={QUEUE_TAG: NIGHTLY_QUEUE, SESSION_TAG: session},
        )
        for variant, tau, seed in ready_models(settings)
    ]


def _has_evaluate_assets(assets: Sequence[dg.AssetsDefinition | dg.AssetSpec]) -> bool:
    keys = {key for a in assets for key in (a.keys if isinstance(a, dg.AssetsDefinition) else [a.key])}
    return all(dg.AssetKey(name) in keys for name in EVALUATE_ASSETS)


def build_schedules(
    settings: Settings, assets: Sequence[dg.AssetsDefinition | dg.AssetSpec]
) -> list[dg.ScheduleDefinition]:
    """The nightly tick, and the nightly evaluation when the definitions' ``assets`` have that stage."""
    schedules = [nightly_tick_schedule(settings)]
    if _has_evaluate_assets(assets):
        schedules.append(nightly_evaluate_schedule(settings))
    return schedules


def nightly_tick_schedule(settings: Settings) -> dg.ScheduleDefinition:
    @dg.schedule(
        name=NIGHTLY_SCHEDULE,
        cron_schedule=NIGHTLY_CRON,
        execution_timezone=EXCHANGE_TIMEZONE,
        target=dg.AssetSelection.assets(*SESSION_ASSETS, LABELS),
        description="After the NYSE close (18:00 New York, Mon-Fri): ingest and tokenize the new session "
        "(raw_ohlcv, spline_tokens, fd_tokens, raw_tokens), then the previous session's labels, one run after "
        "the other (tag kinematic_pipeline/queue=nightly). No run on a day the NYSE is closed.",
    )
    def nightly_tick(context: dg.ScheduleEvaluationContext):
        day = exchange_date(context.scheduled_execution_time)
        plan = tick_plan(settings, day)
        if isinstance(plan, str):
            return dg.SkipReason(plan)
        return session_run_requests(plan, f"{NIGHTLY_SCHEDULE}:{day}")

    return nightly_tick


def nightly_evaluate_schedule(settings: Settings) -> dg.ScheduleDefinition:
    """predictions + backtests after the tick. A schedule has one target and a run one partitioning, so
    the (tau, variant) partitions get their own schedule, 15 minutes later: its runs queue behind the
    tick's (same queue tag, first in first out) and so see the new session's shards."""

    @dg.schedule(
        name=NIGHTLY_EVALUATE_SCHEDULE,
        cron_schedule=NIGHTLY_EVALUATE_CRON,
        execution_timezone=EXCHANGE_TIMEZONE,
        target=dg.AssetSelection.assets(*EVALUATE_ASSETS),
        description="After the nightly tick (18:15 New York, Mon-Fri): predictions and backtests of every "
        "(tau, variant) whose fine-tuned model exists in the warehouse. No run on a day the NYSE is closed.",
    )
    def nightly_evaluate(context: dg.ScheduleEvaluationContext):
        day = exchange_date(context.scheduled_execution_time)
        plan = tick_plan(settings, day)
        if isinstance(plan, str):
            return dg.SkipReason(plan)
        requests = evaluate_run_requests(settings, f"{NIGHTLY_EVALUATE_SCHEDULE}:{day}", day.isoformat())
        return requests or dg.SkipReason("no fine-tuned model in the warehouse yet (models/<variant>/adapters/tau=*)")

    return nightly_evaluate


def execute_run_requests(
    defs: dg.Definitions,
    requests: Sequence[dg.RunRequest],
    instance: dg.DagsterInstance,
    run_config: dict | None = None,
) -> list[dg.ExecuteInProcessResult]:
    """Execute run requests one after another in this process, in the order the queue launches them
    (tests, benchmarks, a manual tick without the daemon); ``run_config`` is added to each request's
    own (e.g. loggers). Stops after the first failed run."""
    results = []
    for request in requests:
        result = dg.materialize(
            [*defs.assets, *defs.asset_checks],
            selection=request.asset_selection,
            partition_key=request.partition_key,
            tags=request.tags,
            run_config={**(run_config or {}), **request.run_config},
            resources=defs.resources,
            instance=instance,
            raise_on_error=False,
        )
        results.append(result)
        if not result.success:
            break
    return results
