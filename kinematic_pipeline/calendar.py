"""The NYSE trading calendar (exchange-calendars), over an explicit range.

exchange-calendars builds only the last ~20 years by default, so the range is always asked for. The
calendar knows ad-hoc closures (2001-09-11..14, 2012-10-29/30, 2018-12-05, 2025-01-09, ...).
"""

from __future__ import annotations

import datetime as dt
import functools

import numpy as np

CALENDAR_START = dt.date(1990, 1, 2)  # earliest day any profile can ask for
EXCHANGE_TIMEZONE = "America/New_York"  # XNYS's zone: the partitions, the nightly schedule and a moment's date


def calendar_end() -> dt.date:
    return dt.date(dt.date.today().year + 2, 12, 31)


@functools.lru_cache(maxsize=1)
def sessions() -> np.ndarray:
    """All NYSE sessions in [CALENDAR_START, end of next year] as datetime64[D], sorted."""
    import exchange_calendars as xc

    cal = xc.get_calendar("XNYS", start=CALENDAR_START.isoformat(), end=calendar_end().isoformat())
    return np.asarray(cal.sessions.values, dtype="datetime64[D]")


def _check_range(day: dt.date) -> None:
    if not CALENDAR_START <= day <= calendar_end():
        raise ValueError(f"{day} is outside the trading calendar's range {CALENDAR_START}..{calendar_end()}")


def trading_days(start: dt.date, end: dt.date) -> list[dt.date]:
    """NYSE sessions with start <= day <= end."""
    _check_range(start)
    _check_range(end)
    s = sessions()
    lo, hi = np.searchsorted(s, np.datetime64(start, "D")), np.searchsorted(s, np.datetime64(end, "D"), "right")
    return [d.item() for d in s[lo:hi]]


def weekday_closures(start: dt.date, end: dt.date) -> list[dt.date]:
    """Weekdays in [start, end] on which the NYSE is closed (holidays and ad-hoc closures)."""
    sessions = set(trading_days(start, end))
    days = np.arange(np.datetime64(start, "D"), np.datetime64(end, "D") + 1)
    weekdays = days[np.is_busday(days)]
    return [d.item() for d in weekdays if d.item() not in sessions]


def is_trading_day(day: dt.date) -> bool:
    s = sessions()
    i = np.searchsorted(s, np.datetime64(day, "D"))
    return bool(i < len(s) and s[i] == np.datetime64(day, "D"))


def trading_day_on_or_after(day: dt.date) -> dt.date:
    """The first session on or after ``day`` (a bar dated on a closed day belongs to the next session)."""
    _check_range(day)
    s = sessions()
    i = np.searchsorted(s, np.datetime64(day, "D"))
    return s[i].item()


def session_before(day: dt.date, count: int) -> dt.date:
    """The session ``count`` sessions before ``day`` (day itself if the calendar starts later)."""
    back = trading_days(day - dt.timedelta(days=2 * count + 30), day)
    return back[max(0, len(back) - 1 - count)]


def sessions_after(day: dt.date, count: int) -> list[dt.date]:
    """The ``count`` sessions after ``day``, in order (what a target ``count`` sessions ahead reads)."""
    out = [day]
    for _ in range(count):
        out.append(trading_day_on_or_after(out[-1] + dt.timedelta(days=1)))
    return out[1:]


def previous_trading_day(day: dt.date) -> dt.date:
    """The last session strictly before ``day``."""
    _check_range(day)
    s = sessions()
    i = np.searchsorted(s, np.datetime64(day, "D")) - 1
    if i < 0:
        raise ValueError(f"no trading day before {day} in the calendar")
    return s[i].item()
