"""Work time of one nightly tick on the real 458-ticker universe, through the schedule's code path.

    python benchmarks/bench_nightly_tick.py [--source ../shared/data/sp500_daily_2000_2022.parquet]
                                            [--day 2022-12-30] [--history 70] [--warehouse DIR]

Set-up (not timed): a fresh warehouse holding only the ``--history`` sessions before ``--day``
(KP_PROFILE=paper, KP_SOURCE=parquet, KP_START_DATE = the first of them): raw_ohlcv, the three token
assets and labels, written by the stages directly. Then a fresh child process does what a run worker
of the nightly schedule does: loads the definitions (process start: interpreter, imports, definitions,
reported apart), evaluates the ``nightly_tick`` schedule at 18:00 New York on ``--day`` and executes
its run requests in order, in process, against a SQLite Dagster instance laid out as the repository's
dagster.yaml: ingest the day + spline/fd/raw tokens of the day, then the labels of the session before.
Target (issue 6): <= 10 s of work beyond process start.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = ROOT.parent / "shared" / "data" / "sp500_daily_2000_2022.parquet"
TARGET_S = 10.0

CHILD = """
import datetime as dt, json, sys, time
from zoneinfo import ZoneInfo
started = time.perf_counter()
import dagster as dg
from kinematic_pipeline.config import load_settings
from kinematic_pipeline.definitions import build_definitions
from kinematic_pipeline_tests.conftest import execute_run_requests
defs = build_definitions(load_settings())
repo = defs.get_repository_def()
instance = dg.DagsterInstance.get()
loaded = time.perf_counter()

day = dt.date.fromisoformat(sys.argv[1])
when = dt.datetime(day.year, day.month, day.day, 18, tzinfo=ZoneInfo("America/New_York"))
tick = repo.get_schedule_def("nightly_tick").evaluate_tick(dg.build_schedule_context(scheduled_execution_time=when, repository_def=repo))
evaluated = time.perf_counter()
quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
results = execute_run_requests(defs, tick.run_requests, instance, quiet)
finished = time.perf_counter()

runs = []
for request, result in zip(tick.run_requests, results):
    steps = {s.step_key: s.end_time - s.start_time for s in instance.get_run_step_stats(result.run_id)}
    record = instance.get_run_record_by_id(result.run_id)
    runs.append({
        "assets": ",".join(k.to_user_string() for k in request.asset_selection),
        "partition": request.partition_key,
        "success": result.success,
        "run_seconds": record.end_time - record.start_time,
        "steps": steps,
    })
windows = {}
for key in ("spline_tokens", "fd_tokens", "raw_tokens", "labels"):
    event = instance.get_latest_materialization_event(dg.AssetKey(key))
    windows[key] = event.asset_materialization.metadata["dagster/row_count"].value if event else 0
print(json.dumps({
    "start_seconds": loaded - started,
    "evaluate_seconds": evaluated - loaded,
    "work_seconds": finished - loaded,
    "runs": runs,
    "windows": windows,
}))
"""


def setup_warehouse(source: str, warehouse: Path, day: dt.date, history: int) -> dict[str, str]:
    """The sessions before ``day``, written by the stages directly; returns the child's environment."""
    from kinematic_pipeline.calendar import previous_trading_day, trading_days
    from kinematic_pipeline.config import load_settings
    from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv
    from kinematic_pipeline.stages.labels import materialize_labels
    from kinematic_pipeline.stages.tokenize import materialize_tokens

    days = trading_days(day - dt.timedelta(days=3 * history), previous_trading_day(day))[-history:]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KP_")}
    env.update(
        KP_PROFILE="paper",
        KP_SOURCE="parquet",
        KP_SOURCE_PATH=source,
        KP_START_DATE=days[0].isoformat(),
        KP_WAREHOUSE=str(warehouse),
        DAGSTER_HOME=str(warehouse / "dagster_home"),
    )
    settings = load_settings(env=env)
    t0 = time.perf_counter()
    materialize_raw_ohlcv(settings, days, progress=False)
    materialize_tokens(settings, days, progress=False)
    materialize_labels(settings, days, progress=False)
    home = warehouse / "dagster_home"
    home.mkdir()
    config = (ROOT / "dagster.yaml").read_text().replace("base_dir: warehouse/", f"base_dir: {home}/")
    (home / "dagster.yaml").write_text(config)
    print(f"set-up (not timed): {len(days)} sessions {days[0]} .. {days[-1]} in {time.perf_counter() - t0:.1f} s")
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", default=str(DEFAULT_SOURCE))
    parser.add_argument("--day", default="2022-12-30", help="the tick's session (the file's last day)")
    parser.add_argument("--history", type=int, default=70, help="sessions ingested before the tick")
    parser.add_argument("--warehouse", default="/tmp/kp_bench_nightly")
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    warehouse = Path(args.warehouse).resolve()
    shutil.rmtree(warehouse, ignore_errors=True)
    env = setup_warehouse(args.source, warehouse, dt.date.fromisoformat(args.day), args.history)

    t0 = time.perf_counter()
    child = subprocess.run(
        [sys.executable, "-c", CHILD, args.day], capture_output=True, text=True, cwd=ROOT, env=env, check=False
    )
    wall = time.perf_counter() - t0
    if child.returncode != 0:
        sys.exit(f"the tick failed:\n{child.stderr[-4000:]}")
    result = json.loads(child.stdout.strip().splitlines()[-1])

    print(f"{'tick':<34}{args.day} ({args.source})")
    print(f"{'windows':<34}{result['windows']}")
    for run in result["runs"]:
        status = "ok" if run["success"] else "FAILED"
        print(f"  run {run['assets']} [{run['partition']}] {status}: {run['run_seconds']:.2f} s")
        for step, seconds in run["steps"].items():
            print(f"    step {step:<28}{seconds:6.2f} s")
    print(f"{'process start (imports, defs)':<34}{result['start_seconds']:.2f} s")
    print(f"{'schedule evaluation':<34}{result['evaluate_seconds']:.2f} s")
    work = result["work_seconds"]
    verdict = "met" if work <= TARGET_S else "MISSED"
    print(f"{'work (evaluate + runs)':<34}{work:.2f} s   target <= {TARGET_S:.0f} s: {verdict}")
    print(f"{'wall incl. process start':<34}{wall:.2f} s")


if __name__ == "__main__":
    main()
