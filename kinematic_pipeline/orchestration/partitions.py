"""Every partitions definition, mapping and partition tag, in one place.

- trading days: a weekday cron with NYSE holidays and closures excluded (raw_ohlcv, tokens, labels);
- a trained policy (``policy.Policy``): foundations by fit (fold and seed, ``2019@1234``), adapters and every
  per-variant evaluation asset by policy (``2019@1234|0.01``), exactly the run's grid (``policy_keys``);
- the run tags of a single-run range and how a run's days or a partition's policy are read back.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Mapping

import dagster as dg

from kinematic_pipeline.calendar import (
    EXCHANGE_TIMEZONE,
    calendar_end,
    trading_day_on_or_after,
    trading_days,
    weekday_closures,
)
from kinematic_pipeline.config import Settings
from kinematic_pipeline.folds import fold_names
from kinematic_pipeline.model_pins import parent_foundation
from kinematic_pipeline.policy import KEY_SEPARATOR, Foundation, Policy, format_fit_key
from kinematic_pipeline.run_keys import policy_keys, policy_seeds  # the run's grid (no dagster there)

PARTITION_FORMAT = "%Y-%m-%d"
PARTITION_TAG = "dagster/partition"
RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"


@functools.lru_cache(maxsize=8)
def _trading_day_partitions(start: dt.date) -> dg.TimeWindowPartitionsDefinition:
    first = trading_day_on_or_after(start)
    closures = weekday_closures(first, calendar_end())
    return dg.TimeWindowPartitionsDefinition(
        cron_schedule="0 0 * * 1-5",
        start=first.isoformat(),
        fmt=PARTITION_FORMAT,
        timezone=EXCHANGE_TIMEZONE,
        end_offset=1,  # today's session is a partition from midnight on, so the nightly run can fill it
        exclusions=[dt.datetime(d.year, d.month, d.day) for d in closures],
    )


def trading_day_partitions(settings: Settings) -> dg.TimeWindowPartitionsDefinition:
    """One partition per NYSE session from the profile's first day on (keys ``YYYY-MM-DD``)."""
    return _trading_day_partitions(settings.data.start_date)


def partition_days(context: dg.AssetExecutionContext) -> list[dt.date]:
    """The trading days a (possibly multi-partition, single-run backfill) run covers."""
    return [dt.date.fromisoformat(k) for k in context.partition_keys]


def run_days(tags: Mapping[str, str]) -> list[dt.date] | None:
    """The trading days a run's partition tags name (one partition or a range), or None."""
    if PARTITION_TAG in tags:
        return [dt.date.fromisoformat(tags[PARTITION_TAG])]
    start, end = tags.get(RANGE_START), tags.get(RANGE_END)
    if start and end:
        return trading_days(dt.date.fromisoformat(start), dt.date.fromisoformat(end))
    return None


def range_tags(first: dt.date | str, last: dt.date | str) -> dict[str, str]:
    """The tags of one single-run backfill over the trading days first .. last."""
    return {RANGE_START: str(first), RANGE_END: str(last)}


# --- trained policies --------------------------------------------------------------------------------------


def fit_partitions(settings: Settings, variant: str | None = None) -> dg.StaticPartitionsDefinition:
    """One foundation per training seed (``train.seeds``) and fold, materialized on its own: keys ``1234`` (a
    single cut) or ``2019@1234`` (walk-forward folds, ``folds.py``). A variant whose result depends on no seed
    (a rule, a logistic regression) has the one seed ``0``: keys ``0``, ``2019@0``."""
    return dg.StaticPartitionsDefinition(
        [format_fit_key(f, s) for f in fold_names(settings) for s in policy_seeds(settings, variant)]
    )


def policy_partitions(settings: Settings, variant: str | None = None) -> dg.StaticPartitionsDefinition:
    """One partition per fine-tuned policy of the grid (``policy_keys``): an adapter and its evaluation assets.
    The grid is not a product of folds, seeds and taus (the tau sweep may run on the last fold only), so the
    keys are listed, not two dimensions: the UI shows no (fold, tau) pair that is never meant to exist."""
    return dg.StaticPartitionsDefinition(policy_keys(settings, variant))


def decision_partitions(settings: Settings, variant: str) -> dg.StaticPartitionsDefinition:
    """The policies of ``variant`` whose task is backtested (``Task.backtested``: a rule's actions, a forecast's
    volatility-targeted sizes): the backtests' partitions, the predictions' keys less the others (Dagster maps the
    shared keys one to one)."""
    deciding = {task.key for task in settings.tasks if task.backtested}
    keys = [k for k in policy_keys(settings, variant) if k.partition(KEY_SEPARATOR)[2] in deciding]
    return dg.StaticPartitionsDefinition(keys)


def foundation_of_policy(settings: Settings) -> dg.StaticPartitionMapping:
    """A fine-tuned policy's partition reads the foundation partition of its fit (``2019@1234|0.01`` reads
    ``2019@1234``)."""
    by_fit: dict[str, list[str]] = {}
    for key in policy_keys(settings):
        by_fit.setdefault(key.partition(KEY_SEPARATOR)[0], []).append(key)
    return dg.StaticPartitionMapping(by_fit)


def warm_start_parents(settings: Settings, variant: str) -> dict[str, str]:
    """{fit key: the fit key its foundation continues from} under ``train.warm_start`` (``model_pins.parent_foundation``:
    fold k's from fold k-1's, same seed). Dagster refuses a dependency of an asset on itself unless its partitions
    are time windows, so this edge is not in the asset graph: ``fit_partitions`` lists the keys fold by fold (every
    parent before its children), the order in which ``materialize`` runs them, and the child's load refuses a parent
    that changed since (``model_pins.check_parent``)."""
    out = {}
    for key in fit_partitions(settings, variant).get_partition_keys():
        parent = parent_foundation(settings, Policy.from_key(variant, key, settings.folds, settings.tasks))
        if parent is not None:
            out[key] = parent.fit_key
    return out


def context_policy(context: dg.AssetExecutionContext, variant: str, settings: Settings) -> Policy | Foundation:
    """The foundation or policy of a run's partition (a fit key or a fine-tuned policy's key) on the settings' folds,
    its task one of the settings' tasks: where an asset's policy is built, once."""
    return Policy.from_key(variant, context.partition_key, settings.folds, settings.tasks)
