"""Every partitions definition, mapping and partition tag, in one place.

- trading days: a weekday cron with NYSE holidays and closures excluded (raw_ohlcv, tokens, labels);
- a trained policy (``policy.Policy``): foundations by seed, adapters and every per-variant evaluation asset by
  (seed, tau), keys like ``1234|0.01`` (Dagster orders the dimensions by name);
- the run tags of a single-run range and how a run's days or a partition's policy are read back.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Mapping

import dagster as dg

from kinematic_pipeline.calendar import calendar_end, trading_day_on_or_after, trading_days, weekday_closures
from kinematic_pipeline.config import Settings
from kinematic_pipeline.folds import evaluated_folds, fold_names
from kinematic_pipeline.label_rules import tau_key
from kinematic_pipeline.nightly import EXCHANGE_TIMEZONE
from kinematic_pipeline.policy import FIT_DIMENSION, TAU_DIMENSION, Policy, format_fit_key, parse_fit_key
from kinematic_pipeline.variants import variant as lookup_variant

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


def tau_partitions(settings: Settings, variant: str | None = None) -> dg.StaticPartitionsDefinition:
    """One partition per label threshold: keys ``0.0025``, ``0.005``, ``0.01``, ``0.02`` (a baseline's:
    ``evaluate.baseline_taus`` when set)."""
    return dg.StaticPartitionsDefinition([tau_key(t) for t in policy_taus(settings, variant)])


def policy_partitions(settings: Settings, variant: str | None = None) -> dg.MultiPartitionsDefinition:
    """One fine-tuned policy per (seed, tau): an adapter and its evaluation assets; keys ``1234|0.01``
    (``variant``: a baseline's seeds and taus, ``policy_seeds`` and ``policy_taus``)."""
    return dg.MultiPartitionsDefinition(
        {FIT_DIMENSION: fit_partitions(settings, variant), TAU_DIMENSION: tau_partitions(settings, variant)}
    )


def policy_seeds(settings: Settings, variant: str | None = None) -> tuple[int, ...]:
    """The seeds of ``variant``'s policies: the training seeds, or (0,) when its result depends on none."""
    if variant is None or lookup_variant(variant).seeded:
        return settings.train.seeds
    return (0,)


def policy_taus(settings: Settings, variant: str | None = None) -> tuple[float, ...]:
    """The taus of ``variant``'s policies: every tokenize.taus, or a baseline's ``evaluate.baseline_taus``."""
    if variant is None or lookup_variant(variant).every_tau or settings.evaluate.baseline_taus is None:
        return settings.tokenize.taus
    return settings.evaluate.baseline_taus


def grid_keys(settings: Settings, keys: list[str]) -> list[str]:
    """The partition keys of the run's grid among ``keys``: with ``tau_sweep_folds`` = "last" a (seed, tau)
    key at a tau other than the report's only on the last fold (the CLI materializes these)."""

    def wanted(key: str) -> bool:
        if "|" not in key:
            return True
        fit_key, tau = key.split("|")  # Dagster orders the dimensions by name: fit|tau
        return parse_fit_key(fit_key)[0] in evaluated_folds(settings, float(tau))

    return [k for k in keys if wanted(k)]


def foundation_of_policy() -> dg.MultiToSingleDimensionPartitionMapping:
    """A policy partition (seed, tau) reads the foundation partition of its seed."""
    return dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name=FIT_DIMENSION)


def policy_key(policy: Policy) -> dg.MultiPartitionKey:
    return dg.MultiPartitionKey(policy.partition)


def context_policy(context: dg.AssetExecutionContext, variant: str) -> Policy:
    """The policy of a run's partition: a seed (foundations) or a (seed, tau) multi-partition key."""
    key = context.partition_key
    if isinstance(key, dg.MultiPartitionKey):
        return Policy.from_partition(variant, key.keys_by_dimension)
    return Policy.from_fit_key(variant, key)
