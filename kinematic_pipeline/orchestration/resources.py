"""Resources: only what may change per run without changing the DAG's shape.

Everything that shapes the DAG (profile, warehouse, dates, taus, variants) is read once from ``KP_*`` when
the definitions load (``config.load_settings``) and captured by every asset, partition, schedule and
sensor. What a run may still override is where the bars come from: the drop-directory sensor points its
runs at the dropped files. Nothing else is configurable per run.
"""

from __future__ import annotations

import dataclasses

import dagster as dg

from kinematic_pipeline.config import SOURCES, Settings, check_choice


class BarSourceOverride(dg.ConfigurableResource):
    """Run config ``resources.bar_source.config``: read the bars of this run from another source/path."""

    source: str = ""  # synthetic | parquet | csv | yfinance ("": the settings' KP_SOURCE)
    source_path: str = ""  # a file or directory ("": the settings' KP_SOURCE_PATH)

    def apply(self, settings: Settings) -> Settings:
        """``settings`` with this run's source, if one was given."""
        if not self.source and not self.source_path:
            return settings
        source = self.source or settings.data.source
        check_choice("bar_source.source", source, SOURCES)
        data = dataclasses.replace(
            settings.data, source=source, source_path=self.source_path or settings.data.source_path
        )
        return dataclasses.replace(settings, data=data)
