"""The Dagster definitions: assembly only (assets, checks, jobs, resources), all built from one ``Settings``.

``build_definitions(settings)`` is called with one ``Settings`` (``config.load_settings()``, which reads KP_*
once): by ``kinematic_pipeline.defs`` (what ``dagster ... -m kinematic_pipeline`` loads, built on first use)
and by the CLI with its own flags. Partitions, schedules, sensors and every asset body use that same object,
so nothing resolves settings again at run time.
"""

from __future__ import annotations

import os
import warnings

import dagster as dg

from kinematic_pipeline.config import Settings
from kinematic_pipeline.orchestration.assets_baselines import build_baseline_assets
from kinematic_pipeline.orchestration.assets_evaluate import build_evaluate_assets
from kinematic_pipeline.orchestration.assets_ingest import raw_ohlcv_asset
from kinematic_pipeline.orchestration.assets_models import build_model_assets
from kinematic_pipeline.orchestration.assets_report import build_report_assets
from kinematic_pipeline.orchestration.assets_scaling import build_scaling_assets
from kinematic_pipeline.orchestration.assets_tokenize import build_tokenize_assets
from kinematic_pipeline.orchestration.checks import build_ingest_checks, build_token_checks
from kinematic_pipeline.orchestration.jobs import build_jobs
from kinematic_pipeline.orchestration.resources import BarSourceOverride
from kinematic_pipeline.orchestration.runs import orphaned_runs_sensor, watch_parent
from kinematic_pipeline.orchestration.schedules import build_schedules
from kinematic_pipeline.orchestration.sensors import build_sensors

# Dagster stores a run's per-partition planned and materialization events as batches when this is > 0
# (one transaction per batch in orchestration/event_log.py and in dagster-postgres): a 5,787-day
# backfill otherwise commits ~11,600 times. Read by the process that runs the steps, which imports this.
os.environ.setdefault("DAGSTER_EVENT_BATCH_SIZE", "10000")


def build_definitions(settings: Settings) -> dg.Definitions:
    watch_parent()  # in a step subprocess: exit with the run process, never compute on as an orphan
    with warnings.catch_warnings():
        # BackfillPolicy is "beta" in Dagster 1.13; single-run backfills are what trading-day assets need.
        warnings.simplefilter("ignore", dg.BetaWarning)
        assets = [raw_ohlcv_asset(settings), *build_tokenize_assets(settings), *build_model_assets(settings)]
        assets += build_baseline_assets(settings)
        assets += [*build_evaluate_assets(settings), *build_report_assets(settings)]
        assets += build_scaling_assets(settings)
    return dg.Definitions(
        assets=assets,
        asset_checks=[*build_ingest_checks(settings), *build_token_checks(settings)],
        jobs=build_jobs(settings),
        schedules=build_schedules(settings, assets),
        sensors=[*build_sensors(settings), orphaned_runs_sensor()],
        resources={"bar_source": BarSourceOverride()},
    )
