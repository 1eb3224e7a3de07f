"""Resources: the pipeline's settings, injected by parameter name (``settings``)."""

from __future__ import annotations

import dagster as dg

from kinematic_pipeline.config import Settings, load_settings


class PipelineSettings(dg.ConfigurableResource):
    """The operator interface at the Dagster boundary. Empty fields fall back to KP_* and the profile."""

    profile: str = ""  # ci | demo | paper (default: KP_PROFILE, else ci)
    source: str = ""  # synthetic | parquet | csv | yfinance (default: KP_SOURCE, else the profile's)
    source_path: str = ""  # KP_SOURCE_PATH
    warehouse: str = ""  # KP_WAREHOUSE (default ./warehouse)

    def resolve(self) -> Settings:
        return load_settings(
            self.profile or None,
            source=self.source or None,
            source_path=self.source_path or None,
            warehouse=self.warehouse or None,
        )
