"""What a nightly tick or a file drop (re)builds, without the orchestrator: trading days in, plans out.

One rule serves the nightly schedule and the drop-directory sensor: the new sessions get their
``raw_ohlcv`` and token shards; the labels of a session are built once the session after it exists
(labels[d] needs the bar of d+1), so new sessions a..b give the labels of the sessions just before
each of them. Everything is derived from the NYSE calendar and the settings; nothing here reads shards.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from zoneinfo import ZoneInfo

import polars as pl

from kinematic_pipeline.calendar import (
    EXCHANGE_TIMEZONE,
    is_trading_day,
    session_before,
    trading_day_on_or_after,
    trading_days,
)
from kinematic_pipeline.config import Settings
from kinematic_pipeline.sources.files import FileSource

NIGHTLY_CRON = "0 18 * * 1-5"  # 18:00 New York, Monday to Friday: two hours after the 16:00 close
DROP_FORMATS = ("parquet", "csv")  # the sources whose files can arrive in a drop directory


@dataclass(frozen=True)
class SessionPlan:
    """The partitions one block of consecutive new sessions rebuilds."""

    sessions: tuple[dt.date, ...]  # raw_ohlcv and the token assets: the new sessions, consecutive
    label_sessions: tuple[dt.date, ...]  # labels: the sessions whose targets read a new one (within the history)


def first_session(settings: Settings) -> dt.date:
    """The first trading-day partition (the profile's start, moved to a session)."""
    return trading_day_on_or_after(settings.data.start_date)


def exchange_date(moment: dt.datetime) -> dt.date:
    """The New York calendar date of ``moment`` (naive datetimes are taken as New York time)."""
    zone = ZoneInfo(EXCHANGE_TIMEZONE)
    return (moment.replace(tzinfo=zone) if moment.tzinfo is None else moment.astimezone(zone)).date()


def plan_sessions(settings: Settings, sessions: list[dt.date]) -> list[SessionPlan]:
    """Split new ``sessions`` into blocks of consecutive sessions, each with the labels it completes: those of the
    ``settings.label_horizon`` sessions before each new one (Buy/Sell/Hold: the one before)."""
    first, horizon = first_session(settings), settings.label_horizon
    plans = []
    for block in consecutive_blocks(sorted(set(sessions))):
        before = {b for d in block for k in range(1, horizon + 1) if (b := session_before(d, k)) < d}
        plans.append(SessionPlan(tuple(block), tuple(sorted(d for d in before if d >= first))))
    return plans


def consecutive_blocks(sessions: list[dt.date]) -> list[list[dt.date]]:
    """Sorted sessions grouped into runs with no session missing in between."""
    if not sessions:
        return []
    index = {d: k for k, d in enumerate(trading_days(sessions[0], sessions[-1]))}
    blocks: list[list[dt.date]] = []
    for day in sessions:
        if blocks and index[day] == index[blocks[-1][-1]] + 1:
            blocks[-1].append(day)
        else:
            blocks.append([day])
    return blocks


def tick_plan(settings: Settings, day: dt.date) -> SessionPlan | str:
    """The nightly tick of ``day``: its plan, or why there is nothing to do (a string)."""
    if not is_trading_day(day):
        return f"{day} is not an NYSE session (weekend, holiday or closure): nothing to ingest or tokenize"
    if day < first_session(settings):
        return f"{day} is before the first trading-day partition {first_session(settings)}"
    if settings.data.end_date is not None and day > settings.data.end_date:
        return f"{day} is after the profile's last day {settings.data.end_date} (KP_END_DATE)"
    return plan_sessions(settings, [day])[0]


# --- the drop directory ------------------------------------------------------------------------------


def scan_drop_directory(directory: Path, fmt: str) -> dict[str, tuple[int, int]]:
    """``{file name: (mtime_ns, size)}`` of the ``*.<fmt>`` files in ``directory`` (empty if it is missing).

    Names starting with a dot are skipped: a writer that drops a file by writing ``.name.tmp`` and
    renaming it is never read half-written.
    """
    if fmt not in DROP_FORMATS:
        raise ValueError(f"drop files must be one of {DROP_FORMATS}, got {fmt!r}")
    if not directory.is_dir():
        return {}
    found = {}
    for path in directory.iterdir():
        if path.suffix.lower() == f".{fmt}" and not path.name.startswith(".") and path.is_file():
            stat = path.stat()
            found[path.name] = (stat.st_mtime_ns, stat.st_size)
    return dict(sorted(found.items()))


def changed_files(seen: dict[str, tuple[int, int]], current: dict[str, tuple[int, int]]) -> list[str]:
    """Files that are new, or whose modification time or size changed since ``seen``."""
    return [name for name, signature in current.items() if tuple(seen.get(name, ())) != tuple(signature)]


def encode_cursor(files: dict[str, tuple[int, int]]) -> str:
    return json.dumps({name: list(sig) for name, sig in sorted(files.items())}, separators=(",", ":"))


def decode_cursor(cursor: str | None) -> dict[str, tuple[int, int]]:
    return {name: (int(sig[0]), int(sig[1])) for name, sig in json.loads(cursor).items()} if cursor else {}


def sessions_in_files(paths: list[Path], fmt: str) -> list[dt.date]:
    """The trading-day partitions the rows of ``paths`` belong to (a bar dated on a closed day goes to
    the next session, as ingest assigns it)."""
    dates: set[dt.date] = set()
    for path in paths:
        frame = FileSource(path, fmt).read(dt.date.min, dt.date.max)
        dates.update(frame.select(pl.col("date").unique())["date"].to_list())
    return sorted({trading_day_on_or_after(d) for d in dates})


def drop_sessions(settings: Settings, sessions: list[dt.date], today: dt.date) -> list[dt.date]:
    """The sessions that are trading-day partitions: from the first partition to today (or the profile's
    last day), so a file with bars from before the history or from the future asks for nothing there."""
    last = today if settings.data.end_date is None else min(today, settings.data.end_date)
    return [d for d in sessions if first_session(settings) <= d <= last]
