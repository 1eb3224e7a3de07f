"""Markdown building blocks shared by the report, the stages' summaries and the Dagster metadata."""

from __future__ import annotations

import base64

import polars as pl


class Markdown(str):
    """Text that is Markdown: a stage's summary marks its tables so (the UI renders them)."""


def markdown_table(frame: pl.DataFrame, float_digits: int = 4) -> str:
    """A GitHub-flavoured Markdown table of ``frame`` (for MetadataValue.md)."""
    if frame.is_empty():
        return "_(none)_"

    def cell(value) -> str:
        if isinstance(value, float):
            return f"{value:.{float_digits}g}"
        return "" if value is None else str(value)

    header = "| " + " | ".join(frame.columns) + " |"
    rule = "| " + " | ".join("---" for _ in frame.columns) + " |"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.iter_rows()]
    return "\n".join([header, rule, *body])


def embedded_image(png: bytes, alt: str) -> str:
    """Markdown that shows a PNG inline in the Dagster UI."""
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})"
