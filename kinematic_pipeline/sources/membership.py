"""Index membership, point in time: which tickers were members on a day, from a membership file the user gives.

The file is a CSV with a ``Symbol`` and a ``Date added`` (ISO date) column, e.g. ``sp500_constituents.csv`` of
``../shared/data`` (today's S&P 500 members and the day each joined). A ticker is a member on ``day`` when its
``Date added`` is on or before it. Such a file knows the names that are members now only: a name that joined and
left (or was delisted) before today is absent, so it narrows the universe to what was known at each fold's
first test day but cannot undo survivorship. ``evaluate.membership_file`` (``KP_MEMBERSHIP_FILE``) names it;
without one the universe is every ticker the source holds.
"""

from __future__ import annotations

import datetime as dt
import functools
from pathlib import Path

import polars as pl

SYMBOL, ADDED = "Symbol", "Date added"


@functools.lru_cache(maxsize=4)
def _added(path: str) -> dict[str, dt.date]:
    """{symbol: the day it was added}; a ValueError naming the file, row and column of the first bad cell."""
    try:
        frame = pl.read_csv(path, infer_schema=False)
    except FileNotFoundError:
        raise FileNotFoundError(f"membership file {path} (KP_MEMBERSHIP_FILE) does not exist") from None
    except (pl.exceptions.PolarsError, UnicodeDecodeError) as exc:
        raise ValueError(f"membership file {path} is not a readable CSV: {str(exc).splitlines()[0]}") from None
    missing = [c for c in (SYMBOL, ADDED) if c not in frame.columns]
    if missing:
        raise ValueError(f"membership file {path} has no column {', '.join(map(repr, missing))} (has {frame.columns})")
    added = {}
    for row, (symbol, text) in enumerate(frame.select(SYMBOL, ADDED).iter_rows(), start=2):  # row 1: the header
        try:
            day = dt.date.fromisoformat((text or "").strip()[:10])
        except ValueError:
            raise ValueError(f"membership file {path} row {row} column {ADDED!r}: {text!r} is not a date") from None
        if not symbol or not symbol.strip():
            raise ValueError(f"membership file {path} row {row} column {SYMBOL!r} is empty")
        added[symbol.strip()] = min(day, added.get(symbol.strip(), day))
    return added


def members_on(path: str | Path, day: dt.date) -> frozenset[str]:
    """The symbols of ``path`` whose ``Date added`` is on or before ``day``."""
    return frozenset(s for s, added in _added(str(path)).items() if added <= day)
