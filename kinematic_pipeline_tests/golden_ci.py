"""The golden regression of the ci profile's report numbers.

    python -m kinematic_pipeline_tests.golden_ci check WAREHOUSE   # compare WAREHOUSE's backtests with the golden
    python -m kinematic_pipeline_tests.golden_ci write WAREHOUSE   # regenerate it (say why in the commit)
    python -m kinematic_pipeline_tests.golden_ci own WAREHOUSE     # write this platform's own golden file

WAREHOUSE is a ci-profile warehouse materialized whole (``.ci/run`` does it). Every metric of every backtest
row (policies and Buy & Hold, every tau and cost) is compared with ``kinematic_pipeline_tests/golden/
ci_backtests.csv`` (``test_golden_ci_report.py`` in CI); a change in any number fails with the rows and
columns that moved. Training on CPU with
the pinned torch is deterministic on one machine, so the tolerance is tight (1e-9 relative): a difference means
the pipeline computes something else, not noise. The one exception is what is computed from the models' float32
probabilities themselves (Brier score, calibration error): x86 CPUs of other generations run other GEMM kernels
whose float32 sums differ in their last bits (measured: the same commit on two hosts, up to 1.1e-7 relative in
Brier, every action and return equal), so those columns are compared to 1e-6 relative, about 8 float32 ulps.

Across CPU vendors the difference is not in the last bits: MKL and ATen pick their kernels by vendor and vector
width, and 200 steps of training compound a kernel's rounding. The same commit on an AMD EPYC host (AVX-512, no AMX)
against the golden written on Intel Xeon hosts: Brier up to 8.1e-4 relative in 1,270 of 2,850 rows, and one
policy's decisions on two tickers (9 rows' returns). So a platform, named by its CPU vendor and torch's kernel
capability (``platform_key``: ``AuthenticAMD-AVX512``), may have its own golden file, ``ci_backtests.<platform>.csv``,
which it is compared with, exactly as above; a platform without one is compared with ``ci_backtests.csv`` (written
on Intel Xeon hosts, AVX-512). A deliberate change regenerates every platform's file, each on its platform (the
failure names the file it compared with).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import polars as pl

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
GOLDEN = GOLDEN_DIR / "ci_backtests.csv"  # every platform without its own file (written on Intel Xeon hosts)
KEYS = ["fold", "variant", "tau", "seed", "ticker", "cost_bps"]
REL_TOL = 1e-9
FLOAT32_COLUMNS = {"brier": 1e-6, "ece": 1e-6}  # metrics of float32 probabilities: see the docstring


def platform_key() -> str:
    """The CPU vendor and torch's CPU kernel capability (``GenuineIntel-AVX512``, ``AuthenticAMD-AVX512``): what picks
    the float32 kernels a training step runs."""
    import platform

    import torch

    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    vendor = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("vendor_id")), platform.machine())
    return f"{vendor}-{torch.backends.cpu.get_cpu_capability()}"


def own_golden(key: str | None = None) -> Path:
    """The golden file of platform ``key`` (this machine's by default), whether or not it exists."""
    return GOLDEN_DIR / f"ci_backtests.{key or platform_key()}.csv"


def golden_path(key: str | None = None) -> Path:
    """The golden file a platform is compared with: its own when there is one, else ``ci_backtests.csv``."""
    own = own_golden(key)
    return own if own.exists() else GOLDEN


def backtest_rows(warehouse: Path) -> pl.DataFrame:
    files = sorted((Path(warehouse) / "backtests").glob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"no backtests shards under {warehouse}/backtests: materialize the ci profile first")
    frame = pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed")
    return frame.sort(KEYS, nulls_last=True)


def compare(actual: pl.DataFrame, golden: pl.DataFrame) -> list[str]:
    """Human-readable differences (empty when every row and number matches)."""
    problems = []
    if actual.select(KEYS).rows() != golden.select(KEYS).rows():
        missing = set(golden.select(KEYS).rows()) - set(actual.select(KEYS).rows())
        extra = set(actual.select(KEYS).rows()) - set(golden.select(KEYS).rows())
        return [
            f"backtest rows differ: {len(missing)} missing (e.g. {sorted(missing, key=str)[:3]}), "
            f"{len(extra)} new (e.g. {sorted(extra, key=str)[:3]})"
        ]
    for column in golden.columns:
        if column in KEYS:
            continue
        a, g = actual[column], golden[column]
        if a.dtype.is_numeric() or a.dtype == pl.Boolean:
            x, y = a.cast(pl.Float64).to_numpy(), g.cast(pl.Float64).to_numpy()
            same = np.isclose(x, y, rtol=FLOAT32_COLUMNS.get(column, REL_TOL), atol=1e-12, equal_nan=True)
        else:
            same = (a.cast(pl.String).fill_null("") == g.cast(pl.String).fill_null("")).to_numpy()
        for i in np.flatnonzero(~same)[:5]:
            key = dict(zip(KEYS, actual.select(KEYS).row(int(i))))
            problems.append(f"{column} of {key}: {a[int(i)]} (golden {g[int(i)]})")
    return problems


def main(command: str, warehouse: str) -> int:
    actual = backtest_rows(Path(warehouse))
    if command in ("write", "own"):
        path = own_golden() if command == "own" else golden_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        actual.write_csv(path)
        print(f"wrote {actual.height} rows to {path} (platform {platform_key()})")
        return 0
    path = golden_path()
    problems = compare(actual, pl.read_csv(path, schema=actual.schema))
    print("\n".join(problems) if problems else f"{actual.height} backtest rows equal the golden {path.name}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
