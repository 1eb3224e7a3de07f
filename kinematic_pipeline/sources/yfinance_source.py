"""Yahoo Finance via the optional ``yfinance`` extra. Offline, it fails at once and says so."""

from __future__ import annotations

import datetime as dt
import socket

import polars as pl

from kinematic_pipeline.sources.base import LoadedOnce, conform

YAHOO_HOST = "query1.finance.yahoo.com"
DEFAULT_TICKERS = ("INTC", "NVDA", "JPM", "XOM", "PFE", "TSLA")  # the paper's test set


class YFinanceSource(LoadedOnce):
    name = "yfinance"

    def __init__(self, tickers: tuple[str, ...] | None, start: dt.date, end: dt.date | None, timeout_s: float = 3.0):
        try:
            import yfinance  # noqa: F401
        except ImportError as exc:
            raise RuntimeError(
                "KP_SOURCE=yfinance needs the optional extra: pip install 'kinematic_pipeline[yfinance]'"
            ) from exc
        try:
            socket.create_connection((YAHOO_HOST, 443), timeout=timeout_s).close()
        except OSError as exc:
            raise RuntimeError(
                f"KP_SOURCE=yfinance: cannot reach {YAHOO_HOST}:443 ({exc}); this machine looks offline. "
                "Use KP_SOURCE=parquet or csv with KP_SOURCE_PATH, or the default synthetic source."
            ) from exc
        self.tickers = tuple(tickers or DEFAULT_TICKERS)
        self.start, self.end = start, end or dt.date.today()

    def _load(self) -> pl.DataFrame:
        import yfinance

        frames = []
        for ticker in self.tickers:
            hist = yfinance.Ticker(ticker).history(
                start=self.start.isoformat(), end=(self.end + dt.timedelta(days=1)).isoformat(), auto_adjust=True
            )
            frame = pl.from_pandas(hist.reset_index())
            frame = frame.rename({c: c.lower().replace(" ", "_") for c in frame.columns})
            frames.append(
                frame.select(
                    pl.lit(ticker).alias("ticker"),
                    pl.col("date").cast(pl.Date),
                    *[pl.col(c).cast(pl.Float64) for c in ("open", "high", "low", "close", "volume")],
                )
                .with_row_index("source_row")
                .with_columns(pl.col("source_row").cast(pl.Int64), pl.lit(f"yfinance:{ticker}").alias("source_file"))
            )
        return conform(pl.concat(frames)) if frames else conform(pl.DataFrame())
