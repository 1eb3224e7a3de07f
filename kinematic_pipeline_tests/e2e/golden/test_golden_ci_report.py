"""The ci report's numbers, pinned: every metric of every backtest row of a whole ci materialization equals
the golden file (``golden/ci_backtests.csv``), so a change in any metric is noticed.

``.ci/run`` materializes the ci profile, then runs this with ``KP_GOLDEN_WAREHOUSE`` set to that warehouse:

    KP_GOLDEN_WAREHOUSE=warehouse/ci pytest -m e2e kinematic_pipeline_tests/e2e/golden/test_golden_ci_report.py

A deliberate change regenerates the file with ``python -m kinematic_pipeline_tests.golden_ci write WAREHOUSE``, on
each platform that has its own (``golden_ci.golden_path``).
"""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl
import pytest

from kinematic_pipeline_tests.golden_ci import backtest_rows, compare, golden_path, platform_key

pytestmark = pytest.mark.e2e


@pytest.fixture
def materialized() -> Path:
    path = os.environ.get("KP_GOLDEN_WAREHOUSE")
    if not path:
        if os.environ.get("CI"):
            pytest.fail("KP_GOLDEN_WAREHOUSE is not set: .ci/run must point it at the ci warehouse it materialized")
        pytest.skip("set KP_GOLDEN_WAREHOUSE to a ci-profile warehouse materialized whole")
    return Path(path)


def test_every_backtest_metric_of_the_ci_profile_equals_the_golden_file(materialized):
    actual = backtest_rows(materialized)
    golden = pl.read_csv(golden_path(), schema=actual.schema)
    assert actual.height == golden.height > 0
    assert compare(actual, golden) == [], f"compared with {golden_path().name} on {platform_key()}"


def test_the_comparison_notices_a_changed_metric(materialized):
    actual = backtest_rows(materialized)
    golden = pl.read_csv(golden_path(), schema=actual.schema)
    row = actual.with_row_index().filter(pl.col("sharpe").is_finite())["index"][3]  # a defined Sharpe (not N/A)
    moved = actual.with_columns(pl.col("sharpe") + pl.when(pl.int_range(pl.len()) == row).then(1e-6).otherwise(0.0))
    problems = compare(moved, golden)
    assert len(problems) == 1 and problems[0].startswith("sharpe of ")


def test_probability_metrics_allow_float32_last_bits_and_nothing_more(materialized):
    actual = backtest_rows(materialized)
    golden = pl.read_csv(golden_path(), schema=actual.schema)
    row = actual.with_row_index().filter(pl.col("brier").is_finite())["index"][0]
    for scale, noticed in ((1 + 2e-7, False), (1 + 1e-4, True)):
        at_row = pl.int_range(pl.len()) == row
        moved = actual.with_columns(pl.when(at_row).then(pl.col("brier") * scale).otherwise(pl.col("brier")))
        assert bool(compare(moved, golden)) is noticed, scale
