"""Polars readers that read exactly the files named: a path is a path, not a pattern.

Polars expands ``*``, ``?`` and ``[...]`` in a path by default, so a warehouse or source under a folder named
``runs [2024]`` would read nothing, or another folder's files. Every read of a named file goes through these
(``glob=False``); the catalog's DuckDB views glob only below the warehouse root (``catalog.py``). No dagster.
"""

from __future__ import annotations

import polars as pl


def read_parquet(source, **kwargs) -> pl.DataFrame:
    return pl.read_parquet(source, glob=False, **kwargs)


def scan_parquet(source, **kwargs) -> pl.LazyFrame:
    return pl.scan_parquet(source, glob=False, **kwargs)


def read_csv(source, **kwargs) -> pl.DataFrame:
    return pl.read_csv(source, glob=False, **kwargs)


def scan_csv(source, **kwargs) -> pl.LazyFrame:
    return pl.scan_csv(source, glob=False, **kwargs)
