"""Small helpers that turn stage summaries and frames into Dagster metadata and settings into descriptions."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from kinematic_pipeline.report.markdown import Markdown
from kinematic_pipeline.report.markdown import embedded_image as embedded_image
from kinematic_pipeline.report.markdown import markdown_table as markdown_table


def dagster_metadata(values: dict) -> dict:
    """A stage summary's plain metadata as Dagster's: Markdown renders, paths link, dicts and lists show
    as JSON; numbers, strings and booleans as they are."""

    def convert(value):
        if isinstance(value, Markdown):
            return dg.MetadataValue.md(str(value))
        if isinstance(value, Path):
            return dg.MetadataValue.path(str(value))
        if isinstance(value, (dict, list)):
            return dg.MetadataValue.json(value)
        return value

    return {key: convert(value) for key, value in values.items()}


def class_weights_text(settings) -> str:
    """The run's class weights [Buy, Sell, Hold] as the asset descriptions print them (``[2, 10, 1]``)."""
    return "[" + ", ".join(f"{w:g}" for w in settings.train.class_weights) + "]"
