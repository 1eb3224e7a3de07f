"""Trading-day partitions: weekday cron with NYSE holidays and closures excluded."""

from __future__ import annotations

import datetime as dt
import functools

import dagster as dg

from kinematic_pipeline.calendar import _calendar_end, trading_day_on_or_after, weekday_closures
from kinematic_pipeline.config import Settings

PARTITION_FORMAT = "%Y-%m-%d"


@functools.lru_cache(maxsize=8)
def _trading_day_partitions(start: dt.date) -> dg.TimeWindowPartitionsDefinition:
    first = trading_day_on_or_after(start)
    closures = weekday_closures(first, _calendar_end())
    return dg.TimeWindowPartitionsDefinition(
        cron_schedule="0 0 * * 1-5",
        start=first.isoformat(),
        fmt=PARTITION_FORMAT,
        timezone="America/New_York",
        end_offset=1,  # today's session is a partition from midnight on, so the nightly run can fill it
        exclusions=[dt.datetime(d.year, d.month, d.day) for d in closures],
    )


def trading_day_partitions(settings: Settings) -> dg.TimeWindowPartitionsDefinition:
    """One partition per NYSE session from the profile's first day on (keys ``YYYY-MM-DD``)."""
    return _trading_day_partitions(settings.data.start_date)


def partition_days(context: dg.AssetExecutionContext) -> list[dt.date]:
    """The trading days a (possibly multi-partition, single-run backfill) run covers."""
    return [dt.date.fromisoformat(k) for k in context.partition_keys]
