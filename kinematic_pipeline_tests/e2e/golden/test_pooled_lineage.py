"""``lineage`` of a Sharpe the report prints: the same string, and every fold's and seed's chain behind it.

On the ci warehouse ``.ci/run`` materialized (``KP_GOLDEN_WAREHOUSE``): the report's risk-adjusted table prints
each (variant, ticker) Sharpe of the pooled walk-forward record, mean over seeds ± std. ``lineage`` without
``--fold``/``--seed`` prints that very string, checks each seed's pooled record against its folds' backtests and
walks all 2 folds x 2 seeds chains; a pooled record that no longer covers its folds' days is reported broken.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import polars as pl
import pytest

from kinematic_pipeline.stages.oracle_control import RULE_LABELS
from kinematic_pipeline_tests.conftest import golden_ci_settings

pytestmark = pytest.mark.e2e
MODEL, TAU, TICKER = "splinegpt", 0.01, "SYN000"
FOLDS, SEEDS = ("2022H1", "2022H2"), (1234, 1235)


@pytest.fixture
def settings():
    return golden_ci_settings()


def _lineage(*extra: str) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "kinematic_pipeline", "lineage", "--model", MODEL, "--tau", str(TAU)]
    args += ["--ticker", TICKER, *extra]
    return subprocess.run(args, capture_output=True, text=True, env={**os.environ, "KP_PROFILE": "ci"}, timeout=600)


def _printed_sharpe(settings) -> str:
    """The report's cell: row ``TICKER`` of the risk-adjusted table under the calibrated argmax (the rule of the
    ``backtests`` records lineage traces; the table's other rows are the paper's rule), column "Sharpe: Spline"."""
    lines = settings.warehouse.tables_file.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("### Risk-adjusted efficiency"))
    start = next(i for i in range(start, len(lines)) if lines[i].startswith("|"))  # the header, below the caption
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    cells = ([c.strip() for c in line.strip("|").split("|")] for line in lines[start + 2 :] if line.startswith("|"))
    rule, ticker = header.index("Rule"), header.index("Ticker")
    row = next(c for c in cells if c[rule] == RULE_LABELS["calibrated"] and c[ticker] == TICKER)
    return row[header.index("Sharpe: Spline")]


def test_lineage_of_a_pooled_sharpe_prints_the_reports_number_and_walks_every_chain(settings):
    printed = _printed_sharpe(settings)
    assert printed not in ("-", "") and ("±" in printed or "seeds)" in printed)  # over the two seeds
    proc = _lineage()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    lines = proc.stdout.splitlines()
    assert f"Sharpe {printed} (as the report prints it)" in lines[0], lines[0]
    for fold in FOLDS:
        for seed in SEEDS:
            assert f"-- fold {fold}, seed {seed} --" in proc.stdout
    for seed in SEEDS:
        assert any(line.startswith(f"  seed {seed}: pooled") and line.endswith(": ok") for line in lines)
    assert "files checked in 4 chains: every link resolves" in lines[-1]
    # one fold and seed: the per-fold chain on its own
    one = _lineage("--fold", FOLDS[0], "--seed", str(SEEDS[0]))
    assert one.returncode == 0 and f"seed {SEEDS[0]}, fold {FOLDS[0]}" in one.stdout.splitlines()[0]
    assert "-- fold" not in one.stdout


def test_a_pooled_record_that_no_longer_covers_its_folds_is_a_broken_link(settings, tmp_path):
    path = settings.warehouse.reports_dir / "pooled" / "backtests.parquet"
    backup = tmp_path / "backtests.parquet"
    shutil.copy2(path, backup)
    try:
        pooled = pl.read_parquet(path)
        pooled.with_columns(
            days=pl.when(pl.col("seed") == SEEDS[0]).then(pl.col("days") - 1).otherwise(pl.col("days"))
        ).write_parquet(path)
        proc = _lineage()
        assert proc.returncode == 1
        assert f"the pooled record of seed {SEEDS[0]} is not its folds' days" in proc.stdout, proc.stdout[-2000:]
    finally:
        shutil.move(backup, path)
