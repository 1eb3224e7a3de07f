"""Parquet and CSV sources: one file, or a directory of files (one per ticker or one per drop).

Accepted layouts (column names are matched case-insensitively, spaces become underscores):
- long format with a ``ticker`` (or ``symbol``) column: ../shared/data/sp500_daily_2000_2022.parquet;
- yfinance-style per-ticker files without a ticker column (``Date,Open,High,Low,Close,Adj Close,Volume``):
  the ticker is the file name's stem (``NVDA.csv``);
- yfinance's multi-level CSV header (``Price,...`` / ``Ticker,NVDA,...`` / ``Date,,,``).

CSV is read as text and parsed here, so a value that does not parse stays visible: it becomes null
and its original text goes to ``raw_text`` (ingest quarantines the row). A date that does not parse
cannot be assigned to a trading day; it raises a ValueError naming the file, row and text.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import polars as pl

from kinematic_pipeline.sources.base import VALUE_COLUMNS, conform

_ALIASES = {"symbol": "ticker", "adj_close": "adj_close", "adjclose": "adj_close", "timestamp": "date"}
_NUMERIC = (*VALUE_COLUMNS, "adj_close")


class FileSource:
    """Bars from a Parquet or CSV file, or from every such file in a directory (sorted by name)."""

    def __init__(self, path: str | Path, fmt: str):
        if fmt not in ("parquet", "csv"):
            raise ValueError(f"unknown file format {fmt!r}: expected parquet or csv")
        self.name, self.path = fmt, Path(path).expanduser()
        if not self.path.exists():
            raise FileNotFoundError(f"KP_SOURCE_PATH={self.path} does not exist")
        self._cache: pl.DataFrame | None = None

    def files(self) -> list[Path]:
        if self.path.is_file():
            return [self.path]
        found = sorted(p for p in self.path.iterdir() if p.suffix.lower() == f".{self.name}" and p.is_file())
        if not found:
            raise FileNotFoundError(f"no *.{self.name} files in {self.path}")
        return found

    def _all(self) -> pl.DataFrame:
        if self._cache is None:
            reader = _read_parquet if self.name == "parquet" else _read_csv
            self._cache = pl.concat([conform(reader(f)) for f in self.files()], how="vertical")
        return self._cache

    def date_range(self) -> tuple[dt.date, dt.date] | None:
        dates = self._all()["date"]
        return None if dates.is_empty() else (dates.min(), dates.max())

    def read(self, start: dt.date, end: dt.date) -> pl.DataFrame:
        return self._all().filter(pl.col("date").is_between(start, end))


def _normalize_names(frame: pl.DataFrame) -> pl.DataFrame:
    renamed = {}
    for col in frame.columns:
        key = col.strip().lower().replace(" ", "_")
        renamed[col] = _ALIASES.get(key, key)
    return frame.rename(renamed)


def _with_ticker(frame: pl.DataFrame, path: Path) -> pl.DataFrame:
    if "ticker" not in frame.columns:
        frame = frame.with_columns(pl.lit(path.stem.upper()).alias("ticker"))
    return frame


def _with_provenance(frame: pl.DataFrame, path: Path) -> pl.DataFrame:
    return frame.with_row_index("source_row").with_columns(
        pl.col("source_row").cast(pl.Int64), pl.lit(str(path)).alias("source_file")
    )


def _read_parquet(path: Path) -> pl.DataFrame:
    frame = _with_ticker(_normalize_names(pl.read_parquet(path)), path)
    missing = [c for c in ("date", *VALUE_COLUMNS) if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)} (have {', '.join(frame.columns)})")
    frame = frame.with_columns(
        pl.col("date").cast(pl.Date), *[pl.col(c).cast(pl.Float64) for c in _NUMERIC if c in frame.columns]
    )
    return _with_provenance(frame, path)


def _read_csv(path: Path) -> pl.DataFrame:
    text = pl.read_csv(path, infer_schema=False, has_header=True)
    ticker_from_header = None
    if text.columns and text.columns[0].strip().lower() == "price" and text.height >= 2:
        # yfinance multi-level header: row 0 = "Ticker,NVDA,...", row 1 = "Date,,,..."
        first = [str(v) if v is not None else "" for v in text.row(0)]
        if first[0].strip().lower() == "ticker":
            ticker_from_header = next((v for v in first[1:] if v), None)
            text = text.slice(2).rename({text.columns[0]: "date"})
    text = _normalize_names(text)
    missing = [c for c in ("date", *VALUE_COLUMNS) if c not in text.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)} (have {', '.join(text.columns)})")
    if ticker_from_header and "ticker" not in text.columns:
        text = text.with_columns(pl.lit(ticker_from_header.upper()).alias("ticker"))
    text = _with_provenance(_with_ticker(text, path), path)

    numeric = [c for c in _NUMERIC if c in text.columns]
    parsed = text.with_columns(
        pl.col("date").str.strip_chars().str.slice(0, 10).str.to_date("%Y-%m-%d", strict=False).alias("date"),
        *[pl.col(c).str.strip_chars().cast(pl.Float64, strict=False).alias(c) for c in numeric],
    )
    bad_dates = parsed.filter(pl.col("date").is_null())
    if bad_dates.height:
        row = bad_dates.row(0, named=True)
        original = text.filter(pl.col("source_row") == row["source_row"])["date"][0]
        raise ValueError(
            f"{path}: row {row['source_row']} (ticker {row['ticker']}): column 'date' = {original!r} is not a date "
            f"(YYYY-MM-DD); {bad_dates.height} such row(s). Fix or remove them: a bar without a date cannot be placed."
        )
    # Keep the original text of every value that failed to parse (empty cells are plain missing values).
    failures = [
        pl.when(pl.col(f"__{c}").is_null() & text_col.is_not_null() & (text_col.str.strip_chars() != ""))
        .then(pl.lit(f"{c}=") + text_col)
        .otherwise(None)
        for c in numeric
        for text_col in [pl.col(f"__text_{c}")]
    ]
    joined = parsed.rename({c: f"__{c}" for c in numeric}).with_columns(
        *[text[c].alias(f"__text_{c}") for c in numeric]
    )
    raw_text = joined.select(pl.concat_str(failures, separator=";", ignore_nulls=True).alias("raw_text"))["raw_text"]
    return parsed.with_columns(raw_text.replace("", None).alias("raw_text"))
