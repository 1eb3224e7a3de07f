"""Every model and store file is verified before use, through the real CLI on the ci warehouse the DAG lane
materialized (``KP_GOLDEN_WAREHOUSE``, its ``DAGSTER_HOME`` and profile in the environment): one flipped byte and a
truncation of a foundation's ``model.pt``, an adapter's weights and a window store's ``tokens.npy``, each with its
mtime put back as it was (bit rot, ``cp -p``, ``rsync -a``), are each refused with one message naming the file and the
asset to re-materialize (a foundation's: the foundation itself, called damaged, never retrained); with the file put
back, the same step succeeds and the predictions' bytes are those before.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kinematic_pipeline.config import load_settings
from kinematic_pipeline.policy import Policy
from kinematic_pipeline.tasks.buy_sell_hold import BuySellHold
from kinematic_pipeline.warehouse import PREDICTIONS
from kinematic_pipeline.warehouse.atomic import file_sha256
from kinematic_pipeline_tests.conftest import CI_FOLDS, dagster_materialize, golden_ci_settings

FOLD, TAU = "2022H1", 0.01
BACKTESTING = "splinegpt_backtests,splinegpt_margin_backtests"  # one multi-asset: the Dagster CLI selects it whole


def _damaged(data: bytes) -> list[tuple[str, bytes]]:
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x01
    return [("a flipped byte", bytes(flipped)), ("a truncation", data[: len(data) // 3])]


def _materialize(select: str, partition: str | None) -> subprocess.CompletedProcess:
    args = dagster_materialize("--select", select)
    if partition:
        args += ["--partition", partition]
    return subprocess.run(args, capture_output=True, text=True, env={**os.environ, "KP_PROFILE": "ci"}, timeout=600)


@pytest.mark.e2e
def test_a_damaged_foundation_adapter_or_window_store_is_refused_by_the_cli():
    wh = golden_ci_settings().warehouse  # skipped without the ci warehouse, a failure under CI
    policy = Policy.named(CI_FOLDS, "splinegpt", 1234, BuySellHold(TAU), FOLD)
    key = policy.key
    predictions = wh.evaluation_file(PREDICTIONS, policy)
    before = file_sha256(predictions)
    cases = [  # (file, what reads it, the fix the message names)
        (
            wh.foundation_checkpoint(policy),
            ("splinegpt_predictions", key),
            f"splinegpt_foundation partition {FOLD}@1234",
        ),
        (
            wh.adapter_dir(policy) / "adapter" / "adapter_model.safetensors",
            ("splinegpt_predictions", key),
            f"splinegpt_adapter partition {key}",
        ),
        (wh.window_store_dir("spline_tokens") / "tokens.npy", ("spline_corpus_stats", None), "spline_window_store"),
    ]
    # one damage per file through the CLI, the kinds in turn (both on any verified file: unit/test_verified_files.py)
    for turn, (file, (select, partition), fix) in enumerate(cases):
        data, st = file.read_bytes(), file.stat()
        try:
            for what, damaged in _damaged(data)[turn % 2 : turn % 2 + 1]:
                file.write_bytes(damaged)
                os.utime(file, ns=(st.st_atime_ns, st.st_mtime_ns))  # the mtime put back: bit rot, cp -p, rsync -a
                proc = _materialize(select, partition)
                assert proc.returncode != 0, (file, what)
                output = proc.stdout + proc.stderr
                for fragment in (str(file), "is not the file its manifest records", fix):
                    assert fragment in output, (file, what, fragment, output[-3000:])
        finally:
            file.write_bytes(data)
        assert _materialize(select, partition).returncode == 0, file
    assert file_sha256(predictions) == before
    assert Path(predictions).exists()


@pytest.mark.e2e
def test_a_copied_warehouse_whose_model_was_replaced_is_refused_while_the_original_passes(tmp_path):
    """The predictions' model pins are relative to the warehouse (or, written by an older version, absolute and read
    by their part under the warehouse they were written in): a copy checks its own files, never the original's."""
    import shutil

    path = golden_ci_settings().warehouse.root  # skipped without the ci warehouse, a failure under CI
    policy = Policy.named(CI_FOLDS, "splinegpt", 1234, BuySellHold(TAU), FOLD)
    copy = Path(shutil.copytree(path, tmp_path / "copy" / "warehouse", symlinks=True))
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    wh = load_settings("ci", warehouse=copy).warehouse
    weights = wh.adapter_dir(policy) / "adapter" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[::-1])  # replaced in the copy only
    args = dagster_materialize("--select", BACKTESTING)
    args += ["--partition", policy.key]
    env = {**os.environ, "KP_PROFILE": "ci", "KP_WAREHOUSE": str(copy), "DAGSTER_HOME": str(home)}
    proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-3000:]
    for fragment in (f"made by {weights}", f"re-materialize splinegpt_predictions partition {policy.key}"):
        assert fragment in output, (fragment, output[-3000:])
    assert _materialize(BACKTESTING, policy.key).returncode == 0  # the original still passes
