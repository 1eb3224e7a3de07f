"""A run uses exactly the pair it records: a foundation retrained under an old adapter is refused by the real CLI.

On the ci warehouse ``.ci/run`` materialized (``KP_GOLDEN_WAREHOUSE``, its ``DAGSTER_HOME`` and profile in the
environment): the foundation of one policy is replaced by another valid checkpoint (what a retrain leaves),
then ``dagster asset materialize`` of its predictions fails with one message naming both hashes and the adapter
partition to re-materialize, and ``lineage`` reports the stale pair; with the foundation put back both succeed
again and the predictions' bytes are the ones before.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kinematic_pipeline.policy import Policy
from kinematic_pipeline.tasks.buy_sell_hold import BuySellHold
from kinematic_pipeline.warehouse import PREDICTIONS
from kinematic_pipeline.warehouse.atomic import file_sha256
from kinematic_pipeline.warehouse.verified import MODEL_MANIFEST
from kinematic_pipeline_tests.conftest import dagster_materialize, golden_ci_settings

pytestmark = pytest.mark.e2e
FOLD, TAU = "2022H1", 0.01


@pytest.fixture
def settings():
    return golden_ci_settings()


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, env={**os.environ, "KP_PROFILE": "ci"}, timeout=600)


def test_a_retrained_foundation_under_an_old_adapter_is_refused(settings):
    wh = settings.warehouse
    policy, other = (
        Policy.named(settings.folds, "splinegpt", 1235, BuySellHold(TAU), FOLD),
        Policy.named(settings.folds, "splinegpt", 1234, BuySellHold(TAU), FOLD),
    )
    foundation, replacement = wh.foundation_checkpoint(policy), wh.foundation_checkpoint(other)
    predictions = wh.evaluation_file(PREDICTIONS, policy)
    before, pinned = file_sha256(predictions), file_sha256(foundation)
    key = policy.key
    materialize = dagster_materialize()
    materialize += ["--select", "splinegpt_predictions", "--partition", key]
    lineage = [sys.executable, "-m", "kinematic_pipeline", "lineage", "--model", "splinegpt", "--tau", str(TAU)]
    lineage += ["--seed", "1235", "--fold", FOLD, "--ticker", "SYN000"]
    backup = Path(str(foundation) + ".kept")
    listed, listed_backup = foundation.parent / MODEL_MANIFEST, foundation.parent / (MODEL_MANIFEST + ".kept")
    shutil.copy2(foundation, backup)
    shutil.copy2(listed, listed_backup)
    try:
        # a valid checkpoint with other weights and its own file list: the foundation "retrained"
        shutil.copy2(replacement, foundation)
        shutil.copy2(replacement.parent / MODEL_MANIFEST, listed)
        failed = _run(*materialize)
        assert failed.returncode != 0
        output = failed.stdout + failed.stderr
        assert f"fine-tuned from foundation sha256 {pinned[:16]}" in output
        assert f"is now sha256 {file_sha256(replacement)[:16]}" in output
        assert f"re-materialize splinegpt_adapter partition {key}" in output
        assert file_sha256(predictions) == before  # nothing was written from the stale pair
        traced = _run(*lineage)
        assert traced.returncode == 1 and "pair               STALE" in traced.stdout
    finally:
        shutil.move(backup, foundation)
        shutil.move(listed_backup, listed)
    assert _run(*materialize).returncode == 0
    assert file_sha256(predictions) == before
    traced = _run(*lineage)
    assert traced.returncode == 0 and f"adapter fine-tuned from foundation sha256 {pinned[:16]}  ok" in traced.stdout


def test_predictions_made_by_an_adapter_since_replaced_are_not_backtested(settings):
    wh = settings.warehouse
    policy, other = (
        Policy.named(settings.folds, "splinegpt", 1235, BuySellHold(TAU), FOLD),
        Policy.named(settings.folds, "splinegpt", 1234, BuySellHold(TAU), FOLD),
    )
    ours = next(p for p in wh.adapter_files(policy) if p.suffix == ".safetensors")
    theirs = next(p for p in wh.adapter_files(other) if p.suffix == ".safetensors")
    key = policy.key
    backtest = dagster_materialize()
    backtest += ["--select", "splinegpt_backtests,splinegpt_margin_backtests", "--partition", key]
    backup = Path(str(ours) + ".kept")
    shutil.copy2(ours, backup)
    try:
        shutil.copy2(theirs, ours)  # the adapter "re-fine-tuned" after its predictions were made
        failed = _run(*backtest)
        output = failed.stdout + failed.stderr
        assert failed.returncode != 0 and f"were made by {ours} sha256" in output
        assert f"re-materialize splinegpt_predictions partition {key}" in output
    finally:
        shutil.move(backup, ours)
    assert _run(*backtest).returncode == 0


def test_predictions_refuse_token_days_whose_raw_days_were_re_ingested(settings, tmp_path):
    """A test-period bar corrected and re-ingested (a new raw_ohlcv unit with its own manifest) after the tokens
    were cut: predicting from those tokens fails naming the token shard, both digests and what to re-materialize;
    with the raw day put back the same predictions are written again."""
    import polars as pl

    from kinematic_pipeline.folds import evaluation_days, fold_named
    from kinematic_pipeline.warehouse import QUARANTINE, RAW_OHLCV

    wh = settings.warehouse
    policy = Policy.named(settings.folds, "splinegpt", 1235, BuySellHold(TAU), FOLD)
    predictions = wh.evaluation_file(PREDICTIONS, policy)
    before = file_sha256(predictions)
    day = evaluation_days(settings, "spline_tokens", fold_named(settings.folds, FOLD))[3]
    recorded = wh.manifest_row("spline_tokens", day, ["raw_inputs_digest"])["raw_inputs_digest"]
    unit = wh.unit_dir(RAW_OHLCV, day)
    backup = tmp_path / "kept"
    shutil.copytree(unit, backup)
    key = policy.key
    materialize = dagster_materialize()
    materialize += ["--select", "splinegpt_predictions", "--partition", key]
    lineage = [sys.executable, "-m", "kinematic_pipeline", "lineage", "--model", "splinegpt", "--tau", str(TAU)]
    lineage += ["--seed", "1235", "--fold", FOLD, "--ticker", "SYN000"]
    try:
        manifest = pl.read_parquet(wh.manifest(RAW_OHLCV, day))
        bars = pl.read_parquet(wh.shard(RAW_OHLCV, day))
        corrected = bars.with_columns(
            close=pl.col("close") * pl.when(pl.int_range(pl.len()) == 0).then(1.01).otherwise(1.0)
        )
        quarantine = wh.shard(QUARANTINE, day)
        wh.write_shard(
            RAW_OHLCV,
            day,
            corrected,
            manifest.row(0, named=True),
            dict(manifest.schema),
            companions={QUARANTINE: pl.read_parquet(quarantine) if quarantine.exists() else None},
        )
        failed = _run(*materialize)
        output = failed.stdout + failed.stderr
        assert failed.returncode != 0
        assert f"spline_tokens shard of {day}" in output and f"digest was {recorded[:16]}" in output
        assert "Re-materialize spline_tokens" in output
        assert file_sha256(predictions) == before  # nothing was written from the stale pair
        traced = _run(*lineage)  # the raw day behind the token look-back is part of the chain
        assert traced.returncode == 1 and "token days STALE" in traced.stdout, traced.stdout
    finally:
        shutil.rmtree(unit)
        shutil.move(backup, unit)
    assert _run(*materialize).returncode == 0
    assert file_sha256(predictions) == before
    traced = _run(*lineage)
    assert traced.returncode == 0 and "token days match the raw days behind them" in traced.stdout


def test_labels_whose_next_day_was_re_ingested_and_re_tokenized_are_refused(settings, tmp_path):
    """The last session's bar corrected, re-ingested and re-tokenized (the token pins hold again): the labels of
    the session before (they read that bar as their next day) and of the last session were built from other
    inputs, so predicting the fold fails naming the labels day, both digests and the fix; with both units put
    back the same predictions are written again."""
    import polars as pl

    from kinematic_pipeline.folds import evaluation_days
    from kinematic_pipeline.stages.tokenize import materialize_tokens
    from kinematic_pipeline.tokenizations import SPLINE

    SPLINE_TOKENS = SPLINE.tokens_asset
    from kinematic_pipeline.warehouse import LABELS, QUARANTINE, RAW_OHLCV

    wh = settings.warehouse
    policy = Policy.named(settings.folds, "splinegpt", 1235, BuySellHold(TAU), "2022H2")
    predictions = wh.evaluation_file(PREDICTIONS, policy)
    before = file_sha256(predictions)
    *_, previous, last = evaluation_days(settings, SPLINE_TOKENS)
    recorded = wh.manifest_row(LABELS, previous, ["inputs_digest"])["inputs_digest"]
    units = [wh.unit_dir(RAW_OHLCV, last), wh.unit_dir(SPLINE_TOKENS, last)]
    for k, unit in enumerate(units):
        shutil.copytree(unit, tmp_path / f"kept{k}")
    key = policy.key
    materialize = dagster_materialize()
    materialize += ["--select", "splinegpt_predictions", "--partition", key]
    try:
        manifest = pl.read_parquet(wh.manifest(RAW_OHLCV, last))
        bars = pl.read_parquet(wh.shard(RAW_OHLCV, last))
        quarantine = wh.shard(QUARANTINE, last)
        wh.write_shard(
            RAW_OHLCV,
            last,
            bars.with_columns(close=pl.col("close") * 1.01),
            manifest.row(0, named=True),
            dict(manifest.schema),
            companions={QUARANTINE: pl.read_parquet(quarantine) if quarantine.exists() else None},
        )
        materialize_tokens(settings, [last], tokenizations=(SPLINE,), progress=False)
        failed = _run(*materialize)
        output = failed.stdout + failed.stderr
        assert failed.returncode != 0
        assert f"labels shard of {previous} (and 1 more day(s) through {last})" in output, output[-3000:]
        assert f"digest was {recorded[:16]}" in output and "Re-materialize labels for" in output
        assert file_sha256(predictions) == before  # nothing was written from stale labels
    finally:
        for k, unit in enumerate(units):
            shutil.rmtree(unit)
            shutil.move(tmp_path / f"kept{k}", unit)
    assert _run(*materialize).returncode == 0
    assert file_sha256(predictions) == before


def test_a_report_rebuilt_after_an_adapter_was_replaced_is_refused_and_two_runs_give_the_same_bytes(settings):
    wh = settings.warehouse
    tables = dagster_materialize("--select", "paper_tables")
    assert _run(*tables).returncode == 0
    first = {p.name: file_sha256(p) for p in sorted(wh.report_tables_dir.iterdir()) if p.is_file()}
    assert _run(*tables).returncode == 0
    second = {p.name: file_sha256(p) for p in sorted(wh.report_tables_dir.iterdir()) if p.is_file()}
    assert first == second  # the same inputs, the same bytes (a day with an IC of exactly 0 flipped "Days IC > 0")
    policy, other = (
        Policy.named(settings.folds, "splinegpt", 1235, BuySellHold(TAU), FOLD),
        Policy.named(settings.folds, "splinegpt", 1234, BuySellHold(TAU), FOLD),
    )
    ours = next(p for p in wh.adapter_files(policy) if p.suffix == ".safetensors")
    theirs = next(p for p in wh.adapter_files(other) if p.suffix == ".safetensors")
    key = policy.key
    backup = Path(str(ours) + ".kept")
    shutil.copy2(ours, backup)
    try:
        shutil.copy2(theirs, ours)  # the adapter replaced after its predictions and backtests were made
        failed = _run(*tables)
        output = failed.stdout + failed.stderr
        assert failed.returncode != 0 and f"were made by {ours} sha256" in output
        assert f"re-materialize splinegpt_predictions partition {key}" in output
        after = {p.name: file_sha256(p) for p in sorted(wh.report_tables_dir.iterdir()) if p.is_file()}
        assert after == first  # the report on disk is still the current one, not rebuilt from stale rows
    finally:
        shutil.move(backup, ours)
    assert _run(*tables).returncode == 0
