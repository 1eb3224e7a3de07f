"""The one interface every bar source implements, and the raw frame it returns."""

from __future__ import annotations

import datetime as dt
from abc import ABC, abstractmethod
from typing import Protocol

import polars as pl

PRICE_COLUMNS = ("open", "high", "low", "close")
VALUE_COLUMNS = (*PRICE_COLUMNS, "volume")

# What a source hands to ingest: one row per input row, in source order, nothing dropped. Values that
# could not be parsed are null (ingest quarantines them with the original text in `raw_text`).
RAW_SCHEMA: dict[str, pl.DataType] = {
    "ticker": pl.String,
    "date": pl.Date,
    "open": pl.Float64,
    "high": pl.Float64,
    "low": pl.Float64,
    "close": pl.Float64,
    "volume": pl.Float64,
    "adj_close": pl.Float64,
    "source_file": pl.String,
    "source_row": pl.Int64,  # 0-based row number within source_file (data rows, header excluded)
    "raw_text": pl.String,  # original text of unparseable values, "column=value;..."; null when all parsed
}


class BarSource(Protocol):
    """Daily OHLCV bars. ``read`` returns RAW_SCHEMA rows with start <= date <= end, in source order."""

    name: str

    def date_range(self) -> tuple[dt.date, dt.date] | None:
        """First and last date the source holds (None if it holds nothing)."""

    def read(self, start: dt.date, end: dt.date) -> pl.DataFrame:
        """All rows dated in [start, end] (inclusive), in source order."""

    # Optional: ``read_all() -> pl.DataFrame``, every row the source holds (file and synthetic sources), so
    # a run can report the rows outside its range and the totals reconcile with the source.


def conform(frame: pl.DataFrame) -> pl.DataFrame:
    """Add missing optional columns as nulls and order/cast columns as RAW_SCHEMA."""
    for name, dtype in RAW_SCHEMA.items():
        if name not in frame.columns:
            frame = frame.with_columns(pl.lit(None, dtype=dtype).alias(name))
    return frame.select([pl.col(n).cast(t) for n, t in RAW_SCHEMA.items()])


class LoadedOnce(ABC):
    """A source that loads every row it holds once (``_load``, conformed to RAW_SCHEMA) and serves its date
    range and any window of it from that frame."""

    _cache: pl.DataFrame | None = None

    @abstractmethod
    def _load(self) -> pl.DataFrame:
        """Every row the source holds, conformed to RAW_SCHEMA, in source order."""

    def _all(self) -> pl.DataFrame:
        if self._cache is None:
            self._cache = self._load()
        return self._cache

    def date_range(self) -> tuple[dt.date, dt.date] | None:
        dates = self._all()["date"]
        return None if dates.is_empty() else (dates.min(), dates.max())

    def read(self, start: dt.date, end: dt.date) -> pl.DataFrame:
        return self._all().filter(pl.col("date").is_between(start, end))
