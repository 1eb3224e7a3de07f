"""Where a trading-day backfill's wall time goes: Dagster's bookkeeping vs the work itself.

    python benchmarks/bench_backfill_bookkeeping.py --asset raw_ohlcv --start 2000-01-03 --end 2022-12-30
    python benchmarks/bench_backfill_bookkeeping.py --asset tokens ...      # the three token assets together
    python benchmarks/bench_backfill_bookkeeping.py --asset labels ...
    python benchmarks/bench_backfill_bookkeeping.py --instance postgres ... # after scripts/servers.sh start

Materializes ``--asset`` over the range as one single-run backfill (what the CLI and the UI launch) with the
``paper`` profile on the real file, through a fresh instance: the repository's dagster.yaml (SQLite, the
default) or deploy/postgres/dagster.yaml (``--instance postgres``, needs the ``cluster`` extra and the
servers of ``scripts/servers.sh``). The inputs (raw_ohlcv for the tokens; raw_ohlcv and spline_tokens for
the labels) are written beforehand by the stage functions, outside the timing.

``work`` is the time spent inside the stage functions the asset bodies call (wrapped with a timer, same
process, same run); ``check`` the raw_ohlcv contract check's re-read; the rest of the run's wall is
Dagster's: run creation with its planned events, one materialization event per partition, step events.
Issue 13's target is wall / work <= 2 on the default instance.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import dagster as dg

from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.config import load_settings
from kinematic_pipeline.definitions import build_definitions
from kinematic_pipeline.orchestration import assets_ingest, assets_tokenize, checks
from kinematic_pipeline.stages import labels as labels_stage
from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv
from kinematic_pipeline.stages.tokenize import materialize_tokens
from kinematic_pipeline.tokenizations import TOKENIZATIONS
from kinematic_pipeline.warehouse import LABELS, RAW_OHLCV

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT.parent / "shared" / "data" / "sp500_daily_2000_2022.parquet"
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
SELECTIONS = {"raw_ohlcv": [RAW_OHLCV], "tokens": [t.tokens_asset for t in TOKENIZATIONS.values()], "labels": [LABELS]}
TIMED = {  # module, stage function the asset body (or check) calls -> bucket
    (assets_ingest, "materialize_raw_ohlcv"): "work",
    (assets_tokenize, "materialize_tokens"): "work",
    (assets_tokenize, "materialize_labels"): "work",
    (labels_stage, "label_distribution"): "work",  # read by LabelsSummary.metadata() in the asset body
    (checks, "verify_raw_ohlcv"): "check",
}


def _timed(function, bucket: str, spent: dict[str, float]):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spent[bucket] += time.perf_counter() - started

    return wrapper


def _instance(folder: Path, kind: str) -> dg.DagsterInstance:
    if kind == "postgres":
        url = subprocess.run(
            [str(ROOT / "scripts" / "servers.sh"), "url"], check=True, capture_output=True, text=True
        ).stdout
        for line in url.splitlines():  # export NAME=value
            name, _, value = line.removeprefix("export ").partition("=")
            os.environ[name] = value.strip("'\"")
        shutil.copy(ROOT / "deploy" / "postgres" / "dagster.yaml", folder / "dagster.yaml")
        instance = dg.DagsterInstance.from_config(str(folder))
        instance.wipe()  # a fresh instance: runs and events of earlier benchmarks dropped
        instance.wipe_all_schedules()
        return instance
    text = (ROOT / "dagster.yaml").read_text().replace("base_dir: warehouse/", f"base_dir: {folder}/")
    (folder / "dagster.yaml").write_text(text)
    return dg.DagsterInstance.from_config(str(folder))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--start", default="2018-01-02")
    parser.add_argument("--end", default="2018-12-31")
    parser.add_argument("--asset", choices=tuple(SELECTIONS), default="raw_ohlcv")
    parser.add_argument("--instance", choices=("sqlite", "postgres"), default="sqlite")
    args = parser.parse_args()
    start, end = dt.date.fromisoformat(args.start), dt.date.fromisoformat(args.end)
    days = trading_days(start, end)
    spent = {"work": 0.0, "check": 0.0}
    for (module, name), bucket in TIMED.items():
        setattr(module, name, _timed(getattr(module, name), bucket, spent))
    with tempfile.TemporaryDirectory(prefix="kp_bookkeeping_") as tmp:
        tmp = Path(tmp)
        env = {"KP_SOURCE": "parquet", "KP_SOURCE_PATH": str(SOURCE)}
        settings = load_settings("paper", warehouse=tmp / "warehouse", start_date=start, end_date=end, env=env)
        if args.asset != "raw_ohlcv":  # the inputs, outside the timing
            materialize_raw_ohlcv(settings, days, progress=False)
        if args.asset == "labels":
            materialize_tokens(settings, days, tokenizations=(TOKENIZATIONS["spline"],), progress=False)

        home = tmp / "home"
        home.mkdir()
        defs = build_definitions(settings)
        with _instance(home, args.instance) as instance:
            started = time.perf_counter()
            result = dg.materialize(
                [*defs.assets, *defs.asset_checks],
                selection=SELECTIONS[args.asset],
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
            events = len(instance.get_records_for_run(result.run_id, limit=1_000_000).records)
            materialized = {
                key.to_user_string(): len(instance.get_materialized_partitions(key))
                for key in map(dg.AssetKey, SELECTIONS[args.asset])
            }
    work, check = spent["work"], spent["check"]
    print(
        f"{args.asset} on {args.instance}, {days[0]}..{days[-1]} ({len(days)} sessions): wall {wall:.1f} s, "
        f"work {work:.1f} s, contract check {check:.1f} s, Dagster {wall - work - check:.1f} s; "
        f"wall/work {wall / work:.2f}; {events} events stored; partitions materialized {materialized}"
    )


if __name__ == "__main__":
    main()
