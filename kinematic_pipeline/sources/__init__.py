"""Bar sources behind one interface (``BarSource``): synthetic (default), parquet, csv, yfinance."""

from __future__ import annotations

from kinematic_pipeline.config import Settings
from kinematic_pipeline.sources.base import RAW_SCHEMA, BarSource, conform

__all__ = ["RAW_SCHEMA", "BarSource", "conform", "make_source"]


def make_source(settings: Settings) -> BarSource:
    """The source the settings name (KP_SOURCE / KP_SOURCE_PATH)."""
    data = settings.data
    if data.source == "synthetic":
        from kinematic_pipeline.sources.synthetic import SyntheticSource

        return SyntheticSource(settings.synthetic, data.start_date, data.end_date)
    if data.source in ("parquet", "csv"):
        from kinematic_pipeline.sources.files import FileSource

        return FileSource(data.source_path, data.source)
    if data.source == "yfinance":
        from kinematic_pipeline.sources.yfinance_source import YFinanceSource

        return YFinanceSource(data.tickers, data.start_date, data.end_date)
    raise ValueError(f"unknown source {data.source!r}")
