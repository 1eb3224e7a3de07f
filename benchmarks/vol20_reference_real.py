"""What trailing volatility alone earns on the real file (issue 38, science-5 M4), and how wide its interval is by block.

    python benchmarks/vol20_reference_real.py [--path ../shared/data/sp500_daily_2000_2022.parquet] [--names 50]

The reference forecaster of the skill tables (``backtest.volatility_reference``: p of each class from N(0, vol20^2)
at tau, nothing fitted) on a seeded sample of names, scored on 2019-2022 close-to-close labels at tau = 1% against the
2000-2018 base rates of the same names (``backtest.skill.skill_table``), its 95% interval resampling single days and
20- and 60-day blocks. Development data only (nothing after 2022-12-31).
"""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

import numpy as np
import polars as pl

from kinematic_pipeline.backtest.skill import base_rates, skill_table
from kinematic_pipeline.backtest.volatility_reference import REFERENCE_CLASS_WEIGHTS, reference_predictions
from kinematic_pipeline.tasks.buy_sell_hold import labels_from_returns
from kinematic_pipeline.tasks.targets import label_returns_close

ROOT = Path(__file__).resolve().parents[1]
TAU, TEST_START, TEST_END = 0.01, dt.date(2019, 1, 1), dt.date(2022, 12, 31)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", type=Path, default=ROOT.parent / "shared/data/sp500_daily_2000_2022.parquet")
    parser.add_argument("--names", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    bars = pl.read_parquet(args.path).select("ticker", "date", "close").filter(pl.col("date") <= TEST_END)
    bars = bars.with_columns(pl.col("date").cast(pl.Date)).sort("ticker", "date")
    tickers = sorted(bars["ticker"].unique().to_list())
    names = sorted(np.random.default_rng(args.seed).choice(tickers, size=args.names, replace=False).tolist())
    bars = bars.filter(pl.col("ticker").is_in(names))
    log_close = bars["close"].log().to_numpy()
    log_next = bars.select(pl.col("close").log().shift(-1).over("ticker"))["close"].to_numpy()
    labelled = bars.with_columns(
        pl.Series("label", labels_from_returns(label_returns_close(log_close, log_next), TAU), dtype=pl.Int8)
    )
    train = labelled.filter((pl.col("date") < TEST_START) & (pl.col("label") >= 0))
    rates = base_rates(train["label"].to_numpy())
    rows = labelled.filter(pl.col("date") >= TEST_START).select("ticker", "date", "label")
    frame = reference_predictions(bars, rows, TAU).filter(pl.col("label") >= 0)
    probs = frame.select("p_buy", "p_sell", "p_hold").to_numpy().astype(np.float64)
    assert REFERENCE_CLASS_WEIGHTS == (1.0, 1.0, 1.0)  # its rows hold p itself
    days = frame["date"].to_physical().to_numpy()
    print(
        f"{args.names} names (seed {args.seed}), {frame.height:,} labelled ticker-days over {len(set(days))} days "
        f"{TEST_START}..{TEST_END}, tau {TAU:g}; training base rates B/S/H {np.round(rates, 3).tolist()}"
    )
    for block in (1, 20, 60):
        t = skill_table(probs, frame["label"].to_numpy(), days, rates, n_boot=1000, block_days=block, seed=1)
        low, high = t["log_loss_skill_ci_low"], t["log_loss_skill_ci_high"]
        print(
            f"block {block:>2} days: log-loss skill {t['log_loss_skill']:+.4f} [{low:+.4f}, {high:+.4f}], width {high - low:.4f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
