"""The volatility task's reference forecasters on the real file (issue 53): what vol20, EWMA, GARCH(1,1) and HAR earn
on next-week (or next-day) realized variance, the floor every learned forecaster is read against.

    python benchmarks/vol_references_real.py [--path ../shared/data/sp500_daily_2000_2022.parquet] [--names 50] [--h 5]

A seeded sample of names (as the ``real`` profile's universe sample), the references fitted on 2000-2018
(``backtest.volatility_forecasts``: GARCH per name on its returns <= 2018-12-31, the pooled HAR on the rows whose
target is known by then) and scored on 2019-2022 by ``backtest.volatility_metrics.forecast_table`` (QLIKE with a
50-day block interval, MSE, R^2 of ln RV against the 2000-2018 mean, daily rank IC, Diebold-Mariano against HAR, the
model confidence set), and volatility targeting on each forecast against Buy & Hold at 10 bps
(``backtest.volatility_targeting``). Development data only (nothing after 2022-12-31). Prints the table and the seconds it took.
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from pathlib import Path

import numpy as np
import polars as pl

from kinematic_pipeline.backtest.volatility_evidence import reference_forecasts
from kinematic_pipeline.backtest.volatility_forecasts import realized
from kinematic_pipeline.backtest.volatility_metrics import forecast_table, scored_frame
from kinematic_pipeline.backtest.volatility_targeting import targeting_table

ROOT = Path(__file__).resolve().parents[1]
TRAIN_END, TEST_START, TEST_END = dt.date(2018, 12, 31), dt.date(2019, 1, 1), dt.date(2022, 12, 31)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", type=Path, default=ROOT.parent / "shared/data/sp500_daily_2000_2022.parquet")
    parser.add_argument("--names", type=int, default=50)
    parser.add_argument("--h", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    bars = pl.read_parquet(args.path).select("ticker", "date", "open", "high", "low", "close")
    bars = bars.with_columns(pl.col("date").cast(pl.Date)).filter(pl.col("date") <= TEST_END)
    tickers = sorted(bars["ticker"].unique().to_list())
    names = sorted(np.random.default_rng(args.seed).choice(tickers, size=args.names, replace=False).tolist())
    bars = bars.filter(pl.col("ticker").is_in(names)).sort("ticker", "date")
    targets = realized(bars, args.h)
    forecasts = reference_forecasts(bars, args.h, TRAIN_END)
    scored = scored_frame(targets, forecasts).filter(pl.col("date") >= TEST_START)
    train = targets.filter((pl.col("date") <= TRAIN_END) & pl.col("log_rv").is_finite())["log_rv"]
    table = forecast_table(scored, args.h, float(train.mean()), reps=1000, seed=args.seed)
    targeting = targeting_table(scored, bars, args.h, TRAIN_END, 10.0)
    with pl.Config(tbl_cols=16, tbl_width_chars=220, float_precision=4):
        print(table.sort("qlike"))
        print(targeting.sort("sharpe", descending=True))
    print(f"{args.names} names, h = {args.h}, test {TEST_START}..{TEST_END}; {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
