"""Parquet and CSV sources: one file, or a directory of files (one per ticker or one per drop).

Accepted layouts (column names are matched case-insensitively, spaces become underscores):
- long format with a ``ticker`` (or ``symbol``) column: ../shared/data/sp500_daily_2000_2022.parquet;
- yfinance-style per-ticker files without a ticker column (``Date,Open,High,Low,Close,Adj Close,Volume``):
  the ticker is the file name's stem (``NVDA.csv``);
- yfinance's multi-level CSV header (``Price,...`` / ``Ticker,NVDA,...`` / ``Date,,,``).

CSV is read as text and parsed here, so a value that does not parse stays visible: it becomes null
and its original text goes to ``raw_text`` (ingest quarantines the row). A date that is missing or does
not parse (``YYYY-MM-DD``, optionally followed by a time; nothing else) cannot be assigned to a trading
day: it raises a ValueError naming the file, row and text. Parquet dates stored as text are parsed the
same way. Rows in messages are 1-based as an editor shows them: for CSV the header line counts.
A file that cannot be read at all raises a ValueError naming it and saying what is wrong.
"""

from __future__ import annotations

import csv
import functools
from pathlib import Path

import polars as pl

from kinematic_pipeline.sources.base import VALUE_COLUMNS, LoadedOnce, conform
from kinematic_pipeline.warehouse import exact_paths as exact

_ALIASES = {"symbol": "ticker", "adj_close": "adj_close", "adjclose": "adj_close", "timestamp": "date"}
_NUMERIC = (*VALUE_COLUMNS, "adj_close")
# YYYY-MM-DD, optionally a time and a UTC offset (yfinance writes "2021-01-13 00:00:00-05:00"); the
# whole text must match, so "2021-01-13junk" is not a date.
_DATE_TEXT = r"^\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?$"


class FileSource(LoadedOnce):
    """Bars from a Parquet or CSV file, or from every such file in a directory (sorted by name)."""

    def __init__(self, path: str | Path, fmt: str):
        if fmt not in ("parquet", "csv"):
            raise ValueError(f"unknown file format {fmt!r}: expected parquet or csv")
        self.name, self.path = fmt, Path(path).expanduser()
        if not self.path.exists():
            raise FileNotFoundError(f"KP_SOURCE_PATH={self.path} does not exist")

    def files(self) -> list[Path]:
        if self.path.is_file():
            return [self.path]
        found = sorted(p for p in self.path.iterdir() if p.suffix.lower() == f".{self.name}" and p.is_file())
        if not found:
            raise FileNotFoundError(f"no *.{self.name} files in {self.path}")
        return found

    def _load(self) -> pl.DataFrame:
        reader = _read_parquet if self.name == "parquet" else _read_csv
        return pl.concat([conform(reader(f)) for f in self.files()], how="vertical")

    def read_all(self) -> pl.DataFrame:
        """Every row of the files (a run counts what it does not read against it)."""
        return self._all()


def source_tickers(path: str | Path, fmt: str) -> tuple[str, ...] | None:
    """The tickers of a Parquet or CSV source read cheaply, without its bars: each Parquet file's ``ticker`` (or
    ``symbol``) column alone, a CSV file's likewise, or the file's stem where it has none (yfinance-style files).
    the ticker of yfinance's multi-level CSV header (``Price,...`` then ``Ticker,NVDA,...``, as ``_read_csv`` reads it). None where that cannot be told
    so (a missing or unreadable file): the ingest reports such files, and a membership file is then matched where the universe is built. Read once per
    process while the path's size and mtime stay (0.3 s for the 458 names' 2.35 M bars)."""
    try:
        st = Path(path).expanduser().stat()
    except OSError:
        return None
    return _source_tickers(str(path), fmt, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _source_tickers(path: str, fmt: str, _size: int, _mtime_ns: int) -> tuple[str, ...] | None:
    try:
        source = FileSource(path, fmt)
        found: set[str] = set()
        for file in source.files():
            lazy = pl.scan_parquet(file) if fmt == "parquet" else pl.scan_csv(file, infer_schema=False)
            header = lazy.collect_schema().names()
            names = {_ALIASES.get(c.strip().lower(), c.strip().lower()): c for c in header}
            if fmt == "csv" and header and header[0].strip().lower() == "price" and "ticker" not in names:
                head = lazy.head(1).collect()
                first = [str(v or "") for v in head.row(0)] if head.height else []
                if first and first[0].strip().lower() == "ticker":  # yfinance's multi-level header (_read_csv)
                    named = next((v for v in first[1:] if v), None)
                    found.add((named or file.stem).upper())
                    continue
            if "ticker" not in names:
                found.add(file.stem.upper())
                continue
            column = pl.col(names["ticker"]).cast(pl.String)
            found.update(t for t in lazy.select(column.unique()).collect().to_series().to_list() if t)
        return tuple(sorted(found))
    except (OSError, ValueError, pl.exceptions.PolarsError):
        return None


def _normalize_names(frame: pl.DataFrame, path: Path) -> pl.DataFrame:
    """Column names matched case-insensitively, spaces as underscores, aliases resolved; two columns that become
    one name (``Close`` and ``close ``, or a repeated header) are a ValueError naming the file and both."""
    renamed: dict[str, str] = {}
    for col in frame.columns:
        key = col.strip().lower().replace(" ", "_")
        key = key.split("_duplicated_")[0]  # polars renames a repeated CSV header "x" to "x_duplicated_0"
        renamed[col] = _ALIASES.get(key, key)
    seen: dict[str, str] = {}
    for col, name in renamed.items():
        if name in seen:
            original = col.split("_duplicated_")[0]
            raise ValueError(
                f"{path}: duplicate column {name!r} (columns {seen[name]!r} and {original!r}): which one holds the "
                "bars is ambiguous. Hint: remove or rename one of them"
            )
        seen[name] = col
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
    try:
        frame = exact.read_parquet(path)
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise ValueError(
            f"{path}: not a readable Parquet file (truncated, or not Parquet): {_first_line(exc)}"
        ) from exc
    frame = _with_ticker(_normalize_names(frame, path), path)
    missing = [c for c in ("date", *VALUE_COLUMNS) if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)} (have {', '.join(frame.columns)})")
    frame = _with_provenance(frame, path)
    dtype = frame.schema["date"]
    if dtype == pl.String:
        # Parquet rows have no header line: row k (0-based) is row k + 1.
        frame = frame.with_columns(_parse_dates(frame, path, first_row=1))
    elif dtype == pl.Date:
        _raise_on_null_dates(frame, frame, path, first_row=1)
    elif isinstance(dtype, pl.Datetime):
        # A timestamp's trading date is its calendar date in its own zone (a zone-aware one's, as the same
        # instant written as text with its offset reads), never the UTC date: a bar stamped 2021-01-04 06:00+09:00
        # is 2021-01-04's, though in UTC it is still 2021-01-03.
        frame = frame.with_columns(pl.col("date").dt.date())
        _raise_on_null_dates(frame, frame, path, first_row=1)
    else:
        raise ValueError(f"{path}: column 'date' has type {dtype}; expected a date, a timestamp or YYYY-MM-DD text")
    text = [c for c in _NUMERIC if c in frame.columns and frame.schema[c] == pl.String]  # numbers stored as text
    numeric = [pl.col(c).cast(pl.Float64, strict=False) for c in _NUMERIC if c in frame.columns and c not in text]
    return _parse_numbers(frame.with_columns(*numeric), text)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _parse_dates(text: pl.DataFrame, path: Path, first_row: int) -> pl.Expr:
    """The ``date`` column of ``text`` (strings) parsed; a ValueError naming the first row that is no date."""
    stripped = pl.col("date").str.strip_chars()
    parsed = (
        pl.when(stripped.str.contains(_DATE_TEXT))
        .then(stripped.str.slice(0, 10).str.to_date("%Y-%m-%d", strict=False))
        .alias("date")
    )
    _raise_on_null_dates(text.with_columns(parsed), text, path, first_row)
    return parsed


def _raise_on_null_dates(parsed: pl.DataFrame, text: pl.DataFrame, path: Path, first_row: int) -> None:
    bad = parsed.filter(pl.col("date").is_null())
    if not bad.height:
        return
    row = bad.row(0, named=True)
    original = text.filter(pl.col("source_row") == row["source_row"])["date"][0]
    what = "is empty" if original is None or str(original).strip() == "" else f"= {str(original)!r} is not a date"
    raise ValueError(
        f"{path}: row {row['source_row'] + first_row} (ticker {row.get('ticker')}): column 'date' {what} "
        f"(YYYY-MM-DD); {bad.height} such row(s). Hint: fix or remove them: a bar without a date cannot be placed."
    )


def _read_csv_text(path: Path) -> pl.DataFrame:
    """Every cell as text; a ValueError naming the file (and the row, for a ragged row) if that fails."""
    if b"\0" in path.read_bytes()[: 1 << 16]:  # polars reads some binary files as one odd column
        raise ValueError(f"{path}: not a CSV text file (binary, or not UTF-8 text)")
    try:
        return exact.read_csv(path, infer_schema=False, has_header=True)
    except pl.exceptions.NoDataError as exc:
        raise ValueError(f"{path}: the CSV file is empty (not even a header row)") from exc
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise ValueError(_csv_problem(path) or f"{path}: not a readable CSV file: {_first_line(exc)}") from exc


def _csv_problem(path: Path) -> str | None:
    """What is wrong with a CSV polars could not read: binary content, or the first ragged row."""
    head = path.read_bytes()[: 1 << 16]
    bad = _bad_byte(head)
    if b"\0" in head or 0 <= bad < len(head) - 3:  # a character cut at the 64 KiB edge is not an error
        return f"{path}: not a CSV text file (binary, or not UTF-8 text)"
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        rows = csv.reader(fh)
        header = next(rows, [])
        for line, fields in enumerate(rows, start=2):
            if fields and len(fields) != len(header):
                return (
                    f"{path}: row {line}: {len(fields)} fields, the header has {len(header)}. Hint: a number "
                    "written with a thousands separator (1,000) must be quoted or written 1000"
                )
    return None


def _bad_byte(head: bytes) -> int:
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start
    return -1


def _read_csv(path: Path) -> pl.DataFrame:
    text = _read_csv_text(path)
    first_row = 2  # the header is row 1
    ticker_from_header = None
    if text.columns and text.columns[0].strip().lower() == "price" and text.height >= 2:
        # yfinance multi-level header: row 0 = "Ticker,NVDA,...", row 1 = "Date,,,..."
        first = [str(v) if v is not None else "" for v in text.row(0)]
        if first[0].strip().lower() == "ticker":
            ticker_from_header = next((v for v in first[1:] if v), None)
            text = text.slice(2).rename({text.columns[0]: "date"})
            first_row = 4
    text = _normalize_names(text, path)
    missing = [c for c in ("date", *VALUE_COLUMNS) if c not in text.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)} (have {', '.join(text.columns)})")
    if ticker_from_header and "ticker" not in text.columns:
        text = text.with_columns(pl.lit(ticker_from_header.upper()).alias("ticker"))
    text = _with_provenance(_with_ticker(text, path), path)

    numeric = [c for c in _NUMERIC if c in text.columns]
    return _parse_numbers(text.with_columns(_parse_dates(text, path, first_row)), numeric)


def _parse_numbers(text: pl.DataFrame, columns: list[str]) -> pl.DataFrame:
    """``columns`` (text) parsed as numbers; the original text of every value that failed to parse goes to
    ``raw_text`` as ``column=text`` (empty cells are plain missing values), so its quarantine row shows it."""
    parsed = text.with_columns(*[pl.col(c).str.strip_chars().cast(pl.Float64, strict=False).alias(c) for c in columns])
    failures = [
        pl.when(parsed[c].is_null() & text_col.is_not_null() & (text_col.str.strip_chars() != ""))
        .then(pl.lit(f"{c}=") + text_col)
        .otherwise(None)
        for c in columns
        for text_col in [text[c]]
    ]
    if not failures:
        return parsed.with_columns(pl.lit(None, pl.String).alias("raw_text"))
    raw_text = text.select(pl.concat_str(failures, separator=";", ignore_nulls=True).alias("raw_text"))["raw_text"]
    return parsed.with_columns(raw_text.replace("", None).alias("raw_text"))
