"""Index membership, point in time: which tickers were members on a day, from a membership file the user gives.

The file is a CSV with a ``Symbol`` and a ``Date added`` (ISO date) column, e.g. ``sp500_constituents.csv`` of
``../shared/data`` (today's S&P 500 members and the day each joined). A ticker is a member on ``day`` when its
``Date added`` is on or before it. Such a file knows the names that are members now only: a name that joined and
left (or was delisted) before today is absent, so it narrows the universe to what was known at each fold's
first test day but cannot undo survivorship. ``evaluate.membership_file`` (``KP_MEMBERSHIP_FILE``) names it;
without one the universe is every ticker the source holds.

The file is checked when the settings load (``check_membership``, from ``Settings``): it exists, has both columns
and a date in every row, and, where the source's tickers are known without reading it (``data.tickers``, the
synthetic source), at least one of its symbols is one of them; otherwise where the universe is first built
(``require_members``: the tickers of the fold's test days). A file that matches no ticker is one line naming the file
and a few of its symbols, never an empty universe in silence.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterable
from pathlib import Path

import polars as pl

SYMBOL, ADDED = "Symbol", "Date added"


def _added(path: str) -> dict[str, dt.date]:
    """{symbol: the day it was added}; a ValueError naming the file, row and column of the first bad cell. Parsed
    once per version of the file (its size and mtime: an edited file is read again)."""
    try:
        st = Path(path).stat()
    except FileNotFoundError:
        raise FileNotFoundError(f"membership file {path} (KP_MEMBERSHIP_FILE) does not exist") from None
    return _parse(path, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _parse(path: str, size: int, mtime_ns: int) -> dict[str, dt.date]:
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


def _few(names: Iterable[str], n: int = 5) -> str:
    names = sorted(names)
    return ", ".join(names[:n]) + (f", ... ({len(names)} in all)" if len(names) > n else "")


def check_membership(path: str | Path, tickers: Iterable[str] | None, source: str = "the source") -> None:
    """``path`` is a readable membership file (``_added``: one ValueError naming the file and the first bad cell)
    and, when ``tickers`` (the source's, known without reading it) is given, at least one of its symbols is one of
    them: else one ValueError naming the file, a few unmatched symbols and a few tickers."""
    added = _added(str(path))
    if not added:
        raise ValueError(f"membership file {path} (KP_MEMBERSHIP_FILE) lists no symbol")
    if tickers is None:
        return
    tickers = set(tickers)
    if tickers and not tickers & set(added):
        raise ValueError(
            f"membership file {path} (KP_MEMBERSHIP_FILE) matches none of the {len(tickers)} tickers of {source}: "
            f"its symbols {_few(added)} are not among {_few(tickers, 3)}; point KP_MEMBERSHIP_FILE at the index of "
            "this source (or unset it)"
        )


def require_members(path: str | Path, tickers: list[str], day: dt.date, what: str) -> list[str]:
    """``tickers`` (those of ``what``) that were members on ``day``; a ValueError naming the file, the day and a few
    symbols when none is (a file of another index, or one whose names all joined later): never an empty universe."""
    if not tickers:
        return []
    members = members_on(path, day)
    kept = [t for t in tickers if t in members]
    if kept:
        return kept
    every = set(_added(str(path)))
    why = (
        f"none of its symbols ({_few(every)}) is one of the {len(tickers)} tickers of {what} ({_few(tickers, 3)})"
        if not every & set(tickers)
        else f"none of the {len(tickers)} tickers of {what} it lists had been added by {day}"
    )
    raise ValueError(
        f"membership file {path} (KP_MEMBERSHIP_FILE) leaves no ticker in the universe on {day}: {why}; point "
        "KP_MEMBERSHIP_FILE at the index of this source (or unset it)"
    )
