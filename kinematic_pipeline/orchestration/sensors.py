"""Sensors: new bar files in a drop directory (parquet/csv sources).

The sensor watches ``KP_DROP_DIR`` (default ``$KP_WAREHOUSE/drop``) for new or changed ``*.<KP_SOURCE>``
files; its cursor is the name, mtime and size of every file seen. For the trading days the new files
hold (within the partitions), it asks for the same runs as the nightly tick: per block of consecutive
sessions, ``raw_ohlcv`` and the three token assets (one partition, or a single-run range), then the
labels those sessions complete. The runs read the drop directory as their source (run config of the
``bar_source`` resource), so the files need not be under ``KP_SOURCE_PATH``.
"""

import datetime as dt
import hashlib
from zoneinfo import ZoneInfo

import dagster as dg

from kinematic_pipeline.calendar import EXCHANGE_TIMEZONE
from kinematic_pipeline.config import Settings
from kinematic_pipeline.nightly import (
    DROP_FORMATS,
    changed_files,
    decode_cursor,
    drop_sessions,
    encode_cursor,
    plan_sessions,
    scan_drop_directory,
    sessions_in_files,
)
from kinematic_pipeline.orchestration.schedules import session_assets, session_run_requests
from kinematic_pipeline.warehouse import LABELS

DROP_SENSOR = "drop_directory"


def build_sensors(settings: Settings) -> list[dg.SensorDefinition]:
    return [drop_directory_sensor(settings)]


def drop_directory_sensor(settings: Settings) -> dg.SensorDefinition:
    @dg.sensor(
        name=DROP_SENSOR,
        minimum_interval_seconds=60,
        target=dg.AssetSelection.assets(*session_assets(settings), LABELS),
        description="New *.parquet / *.csv files (the format of KP_SOURCE) in KP_DROP_DIR (default "
        "$KP_WAREHOUSE/drop): ingest and tokenize the trading days they hold, then the labels those days "
        "complete. Drop files by writing a dot-named temporary file and renaming it. Skips for other sources.",
    )
    def drop_directory_files(context: dg.SensorEvaluationContext):
        fmt = settings.data.source
        if fmt not in DROP_FORMATS:
            return dg.SkipReason(f"KP_SOURCE={fmt}: the drop directory serves the parquet and csv sources only")
        directory = settings.drop_directory
        current = scan_drop_directory(directory, fmt)
        changed = changed_files(decode_cursor(context.cursor), current)
        cursor = encode_cursor(current)  # forgets deleted files: one dropped again under that name is new
        if not changed:
            return dg.SensorResult(skip_reason=f"no new *.{fmt} file in {directory}", cursor=cursor)

        today = dt.datetime.now(ZoneInfo(EXCHANGE_TIMEZONE)).date()
        sessions = drop_sessions(settings, sessions_in_files([directory / n for n in changed], fmt), today)
        if not sessions:
            return dg.SensorResult(
                skip_reason=f"{len(changed)} new file(s) but no bar on a trading-day partition", cursor=cursor
            )
        signature = hashlib.sha256(encode_cursor({n: current[n] for n in changed}).encode()).hexdigest()[:12]
        origin = f"{DROP_SENSOR}:{signature}"
        run_config = {"resources": {"bar_source": {"config": {"source": fmt, "source_path": str(directory)}}}}
        context.log.info(f"{len(changed)} new file(s) in {directory}: {len(sessions)} session(s) {sessions[0]}..")
        requests = [
            r
            for plan in plan_sessions(settings, sessions)
            for r in session_run_requests(settings, plan, origin, run_config)
        ]
        return dg.SensorResult(run_requests=requests, cursor=cursor)

    return drop_directory_files
