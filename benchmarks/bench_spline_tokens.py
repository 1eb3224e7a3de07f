"""End-to-end time and peak RSS of materializing spline_tokens for the whole real universe.

    python benchmarks/bench_spline_tokens.py [--warehouse DIR] [--source ../shared/data/sp500_daily_2000_2022.parquet]
                                             [--kinds spline_tokens]

Ingests the real file into the warehouse first if its raw_ohlcv shards are missing (not timed), then
runs the tokenize stage (the code path of the spline_tokens asset, without Dagster's per-partition
bookkeeping) in a fresh child process and reports its wall time and peak RSS. Targets (issue 3):
<= 60 s wall, <= 6 GB peak RSS on this 2-core machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = ROOT.parent / "shared" / "data" / "sp500_daily_2000_2022.parquet"

CHILD = """
import datetime as dt, json, sys, time
from kinematic_pipeline.calendar import trading_days
from kinematic_pipeline.config import load_settings
from kinematic_pipeline.stages.tokenize import materialize_tokens
from kinematic_pipeline.tokenizations import TOKENIZATIONS
args = json.loads(sys.argv[1])
s = load_settings("paper", source="parquet", source_path=args["source"], warehouse=args["warehouse"], env={})
days = trading_days(dt.date(2000, 1, 3), dt.date(2022, 12, 30))
t0 = time.perf_counter()
summaries = materialize_tokens(s, days, tokenizations=tuple(t for t in TOKENIZATIONS.values() if t.tokens_asset in args["kinds"]), progress=False)
elapsed = time.perf_counter() - t0
print(json.dumps({"seconds": elapsed, "windows": {k: int(m.manifest["windows"].sum()) for k, m in summaries.items()}}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--warehouse", default="/tmp/kp_bench_warehouse")
    parser.add_argument("--source", default=str(DEFAULT_SOURCE))
    parser.add_argument("--kinds", nargs="+", default=["spline_tokens"])
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    from kinematic_pipeline.calendar import trading_days
    from kinematic_pipeline.config import load_settings
    from kinematic_pipeline.stages.ingest import materialize_raw_ohlcv

    settings = load_settings("paper", source="parquet", source_path=args.source, warehouse=args.warehouse, env={})
    days = trading_days(dt.date(2000, 1, 3), dt.date(2022, 12, 30))
    if not all(settings.warehouse.manifest("raw_ohlcv", d).exists() for d in days):
        t0 = time.perf_counter()
        materialize_raw_ohlcv(settings, days, progress=False)
        print(f"ingested the real file first (not timed below): {time.perf_counter() - t0:.1f} s")

    t0 = time.perf_counter()
    child = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps({**vars(args), "warehouse": str(settings.warehouse)})],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    wall = time.perf_counter() - t0
    result = json.loads(child.stdout.strip().splitlines()[-1])
    peak_gb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024**2
    windows = sum(result["windows"].values())
    print(f"{'kinds':<28}{' '.join(args.kinds)}")
    print(f"{'windows':<28}{windows:,} ({result['windows']})")
    print(f"{'stage time (in process)':<28}{result['seconds']:.1f} s  ({windows / result['seconds']:,.0f} windows/s)")
    print(f"{'wall incl. process start':<28}{wall:.1f} s   target <= 60 s")
    print(f"{'peak RSS':<28}{peak_gb:.2f} GB   target <= 6 GB")


if __name__ == "__main__":
    main()
