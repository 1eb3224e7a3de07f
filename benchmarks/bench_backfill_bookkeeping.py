"""Where a trading-day backfill's wall time goes: Dagster's bookkeeping vs the work itself.

    python benchmarks/bench_backfill_bookkeeping.py --start 2018-01-02 --end 2018-12-31 [--asset raw_ohlcv]

Materializes ``--asset`` (raw_ohlcv, or the token assets with ``--asset tokens``) over the range as one
single-run backfill through a fresh SQLite instance (the repository's dagster.yaml) on the real file, and
times the same stage function called directly on another warehouse: the ratio wall / work is what the
bookkeeping costs (issue 13's target: <= 2). Run it with ``DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS=1``
set or not to compare one planned event per run with one per partition.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import tempfile
import time
from pathlib import Path

import dagster as dg

from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.config import load_settings
from kinematic_pipeline.definitions import build_definitions
from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv
from kinematic_pipeline.stages.tokenize import materialize_tokens
from kinematic_pipeline.storage import TOKEN_ASSETS

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT.parent / "shared" / "data" / "sp500_daily_2000_2022.parquet"
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


def _instance(folder: Path) -> dg.DagsterInstance:
    text = (ROOT / "dagster.yaml").read_text().replace("base_dir: warehouse/", f"base_dir: {folder}/")
    (folder / "dagster.yaml").write_text(text)
    return dg.DagsterInstance.from_config(str(folder))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--start", default="2018-01-02")
    parser.add_argument("--end", default="2018-12-31")
    parser.add_argument("--asset", choices=("raw_ohlcv", "tokens"), default="raw_ohlcv")
    args = parser.parse_args()
    start, end = dt.date.fromisoformat(args.start), dt.date.fromisoformat(args.end)
    days = trading_days(start, end)
    with tempfile.TemporaryDirectory(prefix="kp_bookkeeping_") as tmp:
        tmp = Path(tmp)
        env = {"KP_SOURCE": "parquet", "KP_SOURCE_PATH": str(SOURCE)}
        direct = load_settings("paper", warehouse=tmp / "direct", start_date=start, end_date=end, env=env)
        dagster = load_settings("paper", warehouse=tmp / "dagster", start_date=start, end_date=end, env=env)
        selection = ["raw_ohlcv"] if args.asset == "raw_ohlcv" else list(TOKEN_ASSETS)
        if args.asset == "tokens":  # their input, outside the timing
            materialize_raw_ohlcv(direct, days, progress=False)
            materialize_raw_ohlcv(dagster, days, progress=False)
        started = time.perf_counter()
        if args.asset == "raw_ohlcv":
            materialize_raw_ohlcv(direct, days, progress=False)
        else:
            materialize_tokens(direct, days, progress=False)
        work = time.perf_counter() - started

        home = tmp / "home"
        home.mkdir()
        defs = build_definitions(dagster)
        with _instance(home) as instance:
            started = time.perf_counter()
            result = dg.materialize(
                [*defs.assets, *defs.asset_checks],
                selection=selection,
                instance=instance,
                resources=defs.resources,
                run_config=QUIET,
                tags={
                    "dagster/asset_partition_range_start": str(days[0]),
                    "dagster/asset_partition_range_end": str(days[-1]),
                },
            )
            wall = time.perf_counter() - started
            assert result.success
            events = instance.get_records_for_run(result.run_id, limit=1_000_000).records
    planned = os.environ.get("DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS", "0")
    print(
        f"{args.asset} {days[0]}..{days[-1]} ({len(days)} sessions), one planned event per run: {planned}: "
        f"work {work:.1f} s, Dagster run {wall:.1f} s, wall/work {wall / work:.2f}, events stored {len(events)}"
    )


if __name__ == "__main__":
    main()
